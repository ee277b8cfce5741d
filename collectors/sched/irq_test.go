package sched

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testproc"
)

func init() { testproc.Register("irqspin", childIRQSpin) }

// The classes come from the PCI class of the device that owns a vector,
// else from a virtio handler's driver or a storage driver's handler name.
func TestIRQClassesOfSysfs(t *testing.T) {
	root := t.TempDir()
	write := func(p, s string) {
		t.Helper()
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(p, to string) {
		t.Helper()
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(to, p); err != nil {
			t.Fatal(err)
		}
	}
	// PCI: a virtio-blk (mass storage, other), a NIC with MSI-X, a GPU, a
	// legacy-interrupt SATA controller.
	write("bus/pci/devices/0000:00:02.0/class", "0x018000\n")
	write("bus/pci/devices/0000:00:02.0/irq", "0\n")
	write("bus/pci/devices/0000:00:02.0/msi_irqs/35", "msix\n")
	write("bus/pci/devices/0000:00:02.0/msi_irqs/36", "msix\n")
	write("bus/pci/devices/0000:00:03.0/class", "0x020000\n")
	write("bus/pci/devices/0000:00:03.0/msi_irqs/37", "msix\n")
	write("bus/pci/devices/0000:00:03.0/msi_irqs/38", "msix\n")
	write("bus/pci/devices/0000:00:04.0/class", "0x030200\n")
	write("bus/pci/devices/0000:00:04.0/msi_irqs/50", "msix\n")
	write("bus/pci/devices/0000:00:1f.2/class", "0x010601\n")
	write("bus/pci/devices/0000:00:1f.2/irq", "19\n")
	// Vectors no PCI device lists: virtio over MMIO, an NVMe handler name,
	// timers (x86's legacy one, arm64's per-CPU arch_timer).
	write("kernel/irq/60/actions", "virtio7-req.0\n")
	write("kernel/irq/61/actions", "virtio8-input.0\n")
	write("kernel/irq/62/actions", "virtio9-rx\n")
	write("kernel/irq/63/actions", "nvme0q1\n")
	write("kernel/irq/0/actions", "timer\n")
	write("kernel/irq/11/actions", "arch_timer\n")
	write("kernel/irq/37/actions", "virtio2-input.0\n")
	link("bus/virtio/devices/virtio7/driver", "../../../../bus/virtio/drivers/virtio_blk")
	link("bus/virtio/devices/virtio8/driver", "../../../../bus/virtio/drivers/virtio_net")
	link("bus/virtio/devices/virtio9/driver", "../../../../bus/virtio/drivers/vmw_vsock_virtio_transport")
	got, err := IRQClasses(root)
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint32]IRQClass{35: IRQBlock, 36: IRQBlock, 37: IRQNet, 38: IRQNet, 19: IRQBlock, 60: IRQBlock, 61: IRQNet, 63: IRQBlock, 0: IRQTimer, 11: IRQTimer}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
	if _, err := IRQClasses(t.TempDir()); err == nil {
		t.Error("an empty sysfs gave no error")
	}
}

// childIRQSpin pins itself to CPU args[0] and spins on it until the
// monotonic time args[1] (ns), sleeps 2 ms (a switch-in record that closes
// the phase), spins until args[2] and sleeps 2 ms again.
func childIRQSpin(args []string, ready func(...int), wait func()) {
	runtime.LockOSThread()
	cpu, _ := strconv.Atoi(args[0])
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		panic(err)
	}
	setComm("irqspin")
	ready(unix.Gettid())
	wait()
	for _, a := range args[1:3] {
		until, _ := strconv.ParseInt(a, 10, 64)
		for monoNs() < until {
		}
		ts := unix.NsecToTimespec(2e6)
		for unix.Nanosleep(&ts, &ts) == unix.EINTR {
		}
	}
}

// blockIRQs counts, per CPU, the interrupts of the given vectors so far
// (/proc/interrupts).
func blockIRQs(t *testing.T, vecs map[uint32]IRQClass) []uint64 {
	t.Helper()
	f, err := os.Open("/proc/interrupts")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan()
	ncpu := len(strings.Fields(sc.Text()))
	out := make([]uint64, ncpu)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < ncpu+1 {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSuffix(fs[0], ":"), 10, 32)
		if cls, ok := vecs[uint32(n)]; err != nil || !ok || cls != IRQBlock {
			continue
		}
		for c := range ncpu {
			v, _ := strconv.ParseUint(fs[1+c], 10, 64)
			out[c] += v
		}
	}
	return out
}

// blockSoftirqs counts, per CPU, the BLOCK and IRQ_POLL softirqs so far
// (/proc/softirqs).
func blockSoftirqs(t *testing.T) []uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/softirqs")
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, l := range strings.Split(string(b), "\n") {
		fs := strings.Fields(l)
		if len(fs) < 2 || (fs[0] != "BLOCK:" && fs[0] != "IRQ_POLL:") {
			continue
		}
		if out == nil {
			out = make([]uint64, len(fs)-1)
		}
		for c := range min(len(out), len(fs)-1) {
			v, _ := strconv.ParseUint(fs[1+c], 10, 64)
			out[c] += v
		}
	}
	return out
}

// blockEvents is blockIRQs and blockSoftirqs on cpu.
func blockEvents(t *testing.T, vecs map[uint32]IRQClass, cpu int) (hard, soft uint64) {
	t.Helper()
	h, s := blockIRQs(t, vecs), blockSoftirqs(t)
	if cpu < len(h) {
		hard = h[cpu]
	}
	if cpu < len(s) {
		soft = s[cpu]
	}
	return hard, soft
}

// directReads reads path with O_DIRECT, 256 KiB at a time at random
// offsets, from CPU cpu, until the monotonic time until; it returns the
// reads done.
func directReads(t *testing.T, path string, size int64, cpu int, until int64) int {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var set, old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		t.Fatal(err)
	}
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	defer unix.SchedSetaffinity(0, &old) //nolint:errcheck // the thread is unlocked after
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatalf("open %s with O_DIRECT: %v", path, err)
	}
	defer unix.Close(fd)
	const bs = 256 << 10
	buf, err := unix.Mmap(-1, 0, bs, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(buf) //nolint:errcheck // test memory
	n := 0
	for monoNs() < until {
		off := rand.Int64N(size/bs) * bs
		if _, err := unix.Pread(fd, buf, off); err != nil {
			t.Fatalf("O_DIRECT read of %s: %v", path, err)
		}
		n++
	}
	return n
}

// A thread spins on the CPU that serves the disk's interrupts, first with
// the disk left alone, then while another CPU reads a file with O_DIRECT:
// its records carry the block interrupt time that ran on its CPU while it
// spun, at a plausible cost per block interrupt and softirq the kernel
// counted on that CPU (/proc/interrupts, /proc/softirqs) in each phase.
func TestInterruptTimeOfTheDisk(t *testing.T) {
	privtest.Require(t)
	classes, err := IRQClasses(sysRoot)
	if err != nil {
		t.Logf("classifying interrupts: %v", err)
	}
	const size = 64 << 20
	path := diskFile(t, size)
	irqCPU, readCPU := diskIRQCPU(t, classes, path, size)

	now := monoNs()
	t1, t2 := now+1200e6, now+2400e6
	spin := testproc.Start(t, "irqspin", strconv.Itoa(irqCPU), strconv.FormatInt(t1, 10), strconv.FormatInt(t2, 10))
	_, rec, stop := sessionOf(t, Config{Wakers: true, SoftirqVector: true, IRQTime: true, Fold: &NoFold}, spin.Pid())
	// The ground truth: the block interrupts and softirqs the kernel
	// counted on the spinner's CPU in each phase (the host's other IO
	// included: other tests may write meanwhile).
	qh0, qs0 := blockEvents(t, classes, irqCPU)
	spin.Go(t)
	for monoNs() < t1 {
		time.Sleep(time.Millisecond)
	}
	qh1, qs1 := blockEvents(t, classes, irqCPU)
	for monoNs() < t1+50e6 {
		time.Sleep(10 * time.Millisecond)
	}
	bh0, bs0 := blockEvents(t, classes, irqCPU)
	n := directReads(t, path, size, readCPU, t2-50e6)
	bh1, bs1 := blockEvents(t, classes, irqCPU)
	spin.Wait(t, 20*time.Second)
	stop()

	// Each record carries the interrupts of the running stretch that
	// ended at its switch-out.
	var quiet, busy, quietRun, busyRun, net int64
	last := int64(0)
	for _, e := range rec.all() {
		if e.Tid != uint32(spin.Tids[0]) || RecKind(e.Kind) != RecSwitch {
			continue
		}
		out := int64(e.Ts) - int64(e.OffcpuNs)
		ran := int64(0)
		if last > 0 && out > last {
			ran = out - last
		}
		last = int64(e.Ts)
		blk := int64(e.IrqNs[IRQBlock])
		net += int64(e.IrqNs[IRQNet])
		switch {
		case out <= t1+1e6:
			quiet += blk
			quietRun += ran
		case out <= t2+1e6:
			busy += blk
			busyRun += ran
		}
	}
	quietN, busyN := (qh1-qh0)+(qs1-qs0), (bh1-bh0)+(bs1-bs0)
	t.Logf("quiet phase: %d block interrupts and %d softirqs on CPU %d, %.2f ms of block interrupt time in %.0f ms spinning", qh1-qh0, qs1-qs0, irqCPU, float64(quiet)/1e6, float64(quietRun)/1e6)
	t.Logf("reads phase: %d reads from CPU %d; %d block interrupts and %d softirqs on CPU %d, %.2f ms of block interrupt time in %.0f ms spinning (%.1f µs an interrupt and its softirq); network %.2f ms in both",
		n, readCPU, bh1-bh0, bs1-bs0, irqCPU, float64(busy)/1e6, float64(busyRun)/1e6, float64(busy)/1e3/float64(max(bh1-bh0, 1)), float64(net)/1e6)
	if busyRun <= 0 || quietRun <= 0 {
		t.Fatalf("the spinner's running stretches: quiet %d ns, reads %d ns: its records did not cover both phases", quietRun, busyRun)
	}
	if bh1 == bh0 {
		t.Fatalf("%d reads raised no block interrupt on CPU %d in the reads phase", n, irqCPU)
	}
	if busy <= 0 {
		t.Fatalf("%d block interrupts on the spinner's CPU, and its records carry no block interrupt time", bh1-bh0)
	}
	if busy > busyRun {
		t.Errorf("%d ns of block interrupts in %d ns of running", busy, busyRun)
	}
	// Per event (a handler or a softirq): a few µs to a few hundred here;
	// under 100 ns or over 5 ms would be a wrong sum or a lost exit. The
	// spinner may be preempted meanwhile (events it did not see), so only
	// the upper bound holds in the quiet phase, where there may be none.
	if per := float64(busy) / float64(busyN); per < 100 || per > 5e6 {
		t.Errorf("reads phase: %.0f ns of block interrupt time per block event counted on CPU %d", per, irqCPU)
	}
	if float64(quiet) > 5e6*float64(quietN)+1e6 {
		t.Errorf("quiet phase: %.2f ms of block interrupt time for %d block events counted on CPU %d", float64(quiet)/1e6, quietN, irqCPU)
	}
}

// diskFile writes a file of size bytes on a disk (the temporary directory
// unless it is a tmpfs, then /var/tmp) and returns its path.
func diskFile(t *testing.T, size int64) string {
	t.Helper()
	// A file on a disk: the temporary directory unless it is a tmpfs.
	dir := t.TempDir()
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err == nil && fs.Type == unix.TMPFS_MAGIC {
		vt, err := os.MkdirTemp("/var/tmp", "irqtime-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(vt) })
		dir = vt
	}
	path := filepath.Join(dir, "disk.img")
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i * 7)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	for range size / int64(len(chunk)) {
		if _, err := f.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return path
}

// diskIRQCPU finds the CPU that takes the disk's interrupts for O_DIRECT
// reads of path, and the CPU to read from so that they land there.
func diskIRQCPU(t *testing.T, classes map[uint32]IRQClass, path string, size int64) (irqCPU, readCPU int) {
	t.Helper()
	// Where do the disk's interrupts land for reads from CPU 0?
	ncpu := runtime.NumCPU()
	before := blockIRQs(t, classes)
	reads := directReads(t, path, size, 0, monoNs()+300e6)
	after := blockIRQs(t, classes)
	irqCPU, most := -1, uint64(0)
	for c := range min(len(before), len(after)) {
		if d := after[c] - before[c]; d > most {
			irqCPU, most = c, d
		}
	}
	if irqCPU < 0 {
		privtest.SkipOptional(t, "%d O_DIRECT reads of %s raised no interrupt of a block device this host's sysfs names (classified: %v)", reads, path, classes)
	}
	readCPU = 0
	if irqCPU == 0 && ncpu > 1 {
		// The reads' own CPU takes them: per-CPU queues, or CPU 0's
		// queue. Read from another CPU unless they follow the reader.
		readCPU = 1
		b := blockIRQs(t, classes)
		directReads(t, path, size, 1, monoNs()+100e6)
		a := blockIRQs(t, classes)
		if a[1]-b[1] > a[0]-b[0] {
			readCPU = 0 // they follow the submitter: spin beside the reader
		}
	}
	t.Logf("%d O_DIRECT reads from CPU 0 raised %d block interrupts on CPU %d; reading from CPU %d", reads, most, irqCPU, readCPU)
	return irqCPU, readCPU
}
