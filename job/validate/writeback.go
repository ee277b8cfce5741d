package validate

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// The host's page-cache writeback is a disturbance no injection makes: a
// build, a package installation or a copy leaves the host with dirty
// pages, which the kernel's flusher writes back about 30 s later
// (vm.dirty_expire_centisecs), in the middle of a phased job. Its
// kworkers then hold a CPU and its writes queue on the disk the server
// reads from, so that phase's truth is no longer its injection alone
// (measured: 1.5 GB written just before `validate --sim` moved its gpu
// row to 58% gpu_sync, 41% io_block). A phased job therefore flushes the
// host's dirty pages before it starts (FlushDirty), and measures the
// writeback during each phase (Scenario.WritebackMiB).

// pageKiB is the size of a page, KiB (/proc/vmstat counts pages).
var pageKiB = uint64(os.Getpagesize() / 1024)

// hostWritten is the number of pages the host's page cache has written
// back to disk since boot (/proc/vmstat nr_written: buffered writes only,
// never O_DIRECT); ok false when it cannot be read.
func hostWritten() (pages uint64, ok bool) {
	b, err := os.ReadFile("/proc/vmstat")
	if err != nil {
		return 0, false
	}
	return vmstatField(b, "nr_written")
}

// vmstatField is the value of the line "name N" of /proc/vmstat's text b.
func vmstatField(b []byte, name string) (uint64, bool) { return procField(b, name, ' ', "") }

// procField is the number after sep on the line of b whose key is name,
// less unit.
func procField(b []byte, name string, sep byte, unit string) (uint64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := bytes.Cut(sc.Bytes(), []byte{sep})
		if !ok || string(k) != name {
			continue
		}
		v = bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(v), []byte(unit)))
		n, err := strconv.ParseUint(string(v), 10, 64)
		return n, err == nil
	}
	return 0, false
}

// hostDirtyKiB is the host's page cache waiting to be written back: dirty
// and under writeback, KiB (/proc/meminfo); ok false when it cannot be
// read.
func hostDirtyKiB() (kib uint64, ok bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	d, ok1 := meminfoField(b, "Dirty")
	w, ok2 := meminfoField(b, "Writeback")
	return d + w, ok1 && ok2
}

// meminfoField is the value of the line "name: N kB" of /proc/meminfo's
// text b, KiB.
func meminfoField(b []byte, name string) (uint64, bool) { return procField(b, name, ':', "kB") }

// flushAbove is the dirty page cache below which FlushDirty writes nothing
// back: a few MiB are written within a phase's noise.
const flushAbove = 16 << 10 // KiB

// Flush is what FlushDirty did: the host's dirty page cache before it,
// and how long writing it back took (zero when it was under flushAbove).
type Flush struct {
	DirtyMiB float64
	Took     time.Duration
}

// String says it in a line of the job's log.
func (f Flush) String() string {
	if f.Took == 0 {
		return fmt.Sprintf("%.0f MiB of dirty page cache, not flushed", f.DirtyMiB)
	}
	return fmt.Sprintf("flushed %.0f MiB of dirty page cache in %.1f s", f.DirtyMiB, f.Took.Seconds())
}

// FlushDirty writes the host's dirty page cache back to disk (sync(2))
// before a phased job, so that its writeback does not land in a phase; it
// logs what it found and how long it took. It returns when the kernel
// has written it, or when ctx ends (the sync goes on in the background).
func FlushDirty(ctx context.Context, log *slog.Logger) Flush {
	kib, ok := hostDirtyKiB()
	f := Flush{DirtyMiB: float64(kib) / 1024}
	if !ok || kib < flushAbove {
		return f
	}
	if log != nil {
		log.Info("writing the host's dirty page cache back before the run: its writeback, 30 s later, would share the disk and a CPU with a phase", "dirty_mib", int(f.DirtyMiB))
	}
	t0 := time.Now()
	done := make(chan struct{})
	go func() {
		unix.Sync()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	f.Took = max(time.Since(t0), time.Nanosecond)
	if log != nil {
		log.Info("host page cache written back", "dirty_mib", int(f.DirtyMiB), "seconds", f.Took.Seconds())
	}
	return f
}

// WritebackNote is what a row's verdict adds for mib of host writeback
// during its phase ("" below WritebackNoteMiB).
func WritebackNote(mib float64) string {
	if mib < WritebackNoteMiB {
		return ""
	}
	return fmt.Sprintf("the host wrote back %.0f MiB of page cache meanwhile", mib)
}

// WritebackNoteMiB is the host writeback during a phase from which its
// row says so: the kernel's flusher at work, sharing the disk and a CPU
// with the server.
const WritebackNoteMiB = 8
