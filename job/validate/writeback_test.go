package validate

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/pipeline"
	"golang.org/x/sys/unix"
)

func TestHostFields(t *testing.T) {
	vm := []byte("nr_dirty 12\nnr_written 4096\nnr_writeback 3\n")
	if n, ok := vmstatField(vm, "nr_written"); !ok || n != 4096 {
		t.Errorf("nr_written %d %v", n, ok)
	}
	if _, ok := vmstatField(vm, "nr_written_x"); ok {
		t.Error("a field that is not there was found")
	}
	mi := []byte("MemTotal:       24000000 kB\nDirty:              1536 kB\nWriteback:            64 kB\n")
	if n, ok := meminfoField(mi, "Dirty"); !ok || n != 1536 {
		t.Errorf("Dirty %d %v", n, ok)
	}
	if n, ok := meminfoField(mi, "Writeback"); !ok || n != 64 {
		t.Errorf("Writeback %d %v", n, ok)
	}
	if WritebackNote(WritebackNoteMiB-1) != "" || !strings.Contains(WritebackNote(412), "412 MiB") {
		t.Errorf("notes %q %q", WritebackNote(WritebackNoteMiB-1), WritebackNote(412))
	}
}

// writeDirty writes mib MiB of buffered data to a file in dir and leaves
// it dirty; it skips the test where dir's pages are never written back
// (a tmpfs).
func writeDirty(t *testing.T, dir string, mib int) string {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC {
		privtest.SkipOptional(t, "%s is in memory: nothing there is written back", dir)
	}
	p := filepath.Join(dir, "dirty")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	for range mib {
		if _, err := f.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// FlushDirty writes back what the test dirtied: the host's dirty page
// cache was at least that before, the pages written back since boot grew
// by at least that, and it says how long it took.
func TestFlushDirtyWritesBack(t *testing.T) {
	const mib = 64
	w0, ok := hostWritten()
	if !ok {
		privtest.SkipOptional(t, "no /proc/vmstat nr_written")
	}
	writeDirty(t, t.TempDir(), mib)
	f := FlushDirty(context.Background(), nil)
	w1, _ := hostWritten()
	t.Logf("%v; the host wrote back %d MiB", f, (w1-w0)*pageKiB/1024)
	if f.DirtyMiB < mib || f.Took <= 0 {
		t.Errorf("flush %+v: want at least the %d MiB written", f, mib)
	}
	if got := (w1 - w0) * pageKiB / 1024; got < mib {
		t.Errorf("the host wrote back %d MiB, want at least the %d MiB written", got, mib)
	}
	if !strings.Contains(f.String(), "flushed") {
		t.Errorf("%q", f)
	}
}

// A phase during which a file of known size is written back reads at
// least that much writeback; the phase before it, with nothing dirtied,
// reads less than the row's note.
func TestScenarioMeasuresWriteback(t *testing.T) {
	const mib = 32
	if _, ok := hostWritten(); !ok {
		privtest.SkipOptional(t, "no /proc/vmstat nr_written")
	}
	dir := t.TempDir()
	FlushDirty(context.Background(), nil)
	inj := Injection{Name: "writer", Cause: "io_block", Start: func(context.Context) (func() string, error) {
		p := writeDirty(t, dir, mib)
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return func() string { return "wrote" }, f.Sync()
	}}
	sc := NewScenario(300*time.Millisecond, "baseline", []Injection{inj})
	sc.Run(context.Background(), &pipeline.PhaseMarks{})
	base, ok1 := sc.WritebackMiB("baseline")
	wr, ok2 := sc.WritebackMiB("writer")
	t.Logf("writeback: baseline %.1f MiB, writer %.1f MiB", base, wr)
	if !ok1 || !ok2 || wr < mib {
		t.Errorf("writer phase %.1f MiB (%v), want at least %d", wr, ok2, mib)
	}
	if base >= WritebackNoteMiB {
		t.Logf("the host wrote back %.1f MiB during the quiet phase (another process's)", base)
	}
	if _, ok := sc.WritebackMiB("nothing"); ok {
		t.Error("a phase that did not run was measured")
	}
}
