package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/perturb"
)

// perturbProc is `bpfbench perturb ...` running as a subprocess.
type perturbProc struct {
	cmd    *exec.Cmd
	stdout strings.Builder
	stderr strings.Builder
	start  time.Time
}

// startPerturb starts the CLI as a subprocess and waits until it says the
// perturbation is in place (its first stderr line).
func startPerturb(t *testing.T, args ...string) *perturbProc {
	t.Helper()
	p := &perturbProc{cmd: cliCmd(append([]string{"perturb"}, args...)...)}
	p.cmd.Stdout = &p.stdout
	errPipe, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
	})
	r := bufio.NewReader(errPipe)
	line, err := r.ReadString('\n')
	p.stderr.WriteString(line)
	if err != nil || !strings.HasPrefix(line, "perturb ") {
		t.Fatalf("perturb %v did not start: %q %v", args, line, err)
	}
	p.start = time.Now()
	go func() {
		rest, _ := io.ReadAll(r)
		p.stderr.Write(rest)
	}()
	return p
}

// stop sends sig and waits; it returns the exit code.
func (p *perturbProc) stop(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	if sig != 0 {
		_ = p.cmd.Process.Signal(sig)
	}
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
		t.Fatalf("perturb did not exit after %v", sig)
	}
	return p.cmd.ProcessState.ExitCode()
}

// report decodes the --output json report line.
func (p *perturbProc) report(t *testing.T, v any) {
	t.Helper()
	var env struct {
		Report json.RawMessage `json:"report"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(p.stdout.String())), &env); err != nil {
		t.Fatalf("report %q: %v (stderr %q)", p.stdout.String(), err, p.stderr.String())
	}
	if err := json.Unmarshal(env.Report, v); err != nil {
		t.Fatal(err)
	}
}

// The CPU perturbation burns what it says, measured by the kernel's
// accounting of the child (rusage), and its threads end with it, on a
// deadline or on SIGTERM.
func TestPerturbCPU(t *testing.T) {
	for _, sig := range []syscall.Signal{0, syscall.SIGTERM} {
		t.Run(fmt.Sprintf("signal=%v", sig), func(t *testing.T) {
			args := []string{"cpu", "--threads", "1", "--cpus", "0", "--duty", "0.5", "--output", "json"}
			if sig == 0 {
				args = append(args, "--duration", "1s")
			}
			p := startPerturb(t, args...)
			if sig != 0 {
				time.Sleep(time.Second)
			}
			if code := p.stop(t, sig); code != 0 {
				t.Fatalf("exit %d: %s", code, p.stderr.String())
			}
			var rep perturb.CPUReport
			p.report(t, &rep)
			ru := p.cmd.ProcessState.UserTime() + p.cmd.ProcessState.SystemTime()
			t.Logf("report %+v; rusage of the whole process %v", rep, ru)
			// The process's own CPU time bounds the threads' from above;
			// the runtime and the start-up add a little.
			if rep.CPUSeconds > ru.Seconds()+0.02 || rep.CPUSeconds < ru.Seconds()-0.25 {
				t.Errorf("reported %.3f CPU-s, the kernel accounted %.3f", rep.CPUSeconds, ru.Seconds())
			}
			// The duty cycle bounds the share from above; below it, the
			// thread was starved by other work on CPU 0, which this test
			// cannot know, so the share must only be what was burnt.
			if rep.Share > 0.56 {
				t.Errorf("share %.2f of a 50%% duty cycle", rep.Share)
			}
			if rep.CPUSeconds <= 0 || math.Abs(rep.Share-rep.CPUSeconds/rep.WallS) > 0.01 {
				t.Errorf("share %.3f, but %.3f CPU-s in %.3f s", rep.Share, rep.CPUSeconds, rep.WallS)
			}
		})
	}
}

func readProcIO(pid int, key string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key+": "); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/io", key, pid)
}

// The IO perturbation's IOPS match the bytes the kernel accounts to the
// process at the block layer, and its scratch file is gone after a
// deadline and after SIGTERM.
func TestPerturbIO(t *testing.T) {
	privtest.Require(t)                                          // /proc/PID/io of a child
	dir, err := os.MkdirTemp("/var/tmp", "bpfbench-perturb-io-") // not tmpfs: O_DIRECT
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	for _, sig := range []syscall.Signal{0, syscall.SIGTERM} {
		t.Run(fmt.Sprintf("signal=%v", sig), func(t *testing.T) {
			args := []string{"io", "--dir", dir, "--size", "16mb", "--depth", "2", "--output", "json"}
			if sig == 0 {
				args = append(args, "--duration", "1s")
			}
			p := startPerturb(t, args...)
			if sig == 0 {
				if code := p.stop(t, 0); code != 0 {
					t.Fatalf("exit %d: %s", code, p.stderr.String())
				}
				var rep perturb.IOReport
				p.report(t, &rep)
				if rep.Ops == 0 || rep.MeanLatency <= 0 {
					t.Errorf("report %+v", rep)
				}
			} else {
				time.Sleep(800 * time.Millisecond)
				kernel, err := readProcIO(p.cmd.Process.Pid, "read_bytes")
				if err != nil {
					t.Fatal(err)
				}
				sampled := time.Since(p.start)
				if code := p.stop(t, sig); code != 0 {
					t.Fatalf("exit %d: %s", code, p.stderr.String())
				}
				var rep perturb.IOReport
				p.report(t, &rep)
				kernelIOPS := float64(kernel) / 4096 / sampled.Seconds()
				t.Logf("report %+v; the kernel accounted %.0f reads/s", rep, kernelIOPS)
				// The report counts a little longer than the sample. The
				// kernel also accounts to the process the filesystem's
				// own reads for it (an extent block to map an O_DIRECT
				// offset: one 4 KiB block was seen), a few blocks at most.
				const metadata = 8 * 4096
				if float64(rep.Ops)*4096+metadata < float64(kernel) {
					t.Errorf("reported %d reads, the kernel had %d bytes read by then", rep.Ops, kernel)
				}
				if rep.IOPS < 0.6*kernelIOPS || rep.IOPS > 1.6*kernelIOPS {
					t.Errorf("reported %.0f IOPS, the kernel accounted %.0f", rep.IOPS, kernelIOPS)
				}
			}
			if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) > 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}

// vethPair is two network namespaces joined by a veth pair: A (10.x.y.1
// on vethA) sends, B (10.x.y.2) receives.
type vethPair struct {
	nsA, nsB, vethA, addrB string
}

func newVethPair(t *testing.T) *vethPair {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		privtest.Skip(t, "ip not installed (apt-get install iproute2)")
	}
	id := os.Getpid() % 100000
	v := &vethPair{nsA: fmt.Sprintf("bbpA%d", id), nsB: fmt.Sprintf("bbpB%d", id), vethA: fmt.Sprintf("bbpa%d", id)}
	subnet := fmt.Sprintf("10.%d.%d", 50+id%50, (id/100)%250)
	v.addrB = subnet + ".2"
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "del", v.nsA).Run()
		_ = exec.Command("ip", "netns", "del", v.nsB).Run()
	})
	ip("netns", "add", v.nsA)
	ip("netns", "add", v.nsB)
	ip("link", "add", v.vethA, "netns", v.nsA, "type", "veth", "peer", "name", "bbpb"+strconv.Itoa(id), "netns", v.nsB)
	ip("-n", v.nsA, "addr", "add", subnet+".1/24", "dev", v.vethA)
	ip("-n", v.nsB, "addr", "add", subnet+".2/24", "dev", "bbpb"+strconv.Itoa(id))
	ip("-n", v.nsA, "link", "set", v.vethA, "up")
	ip("-n", v.nsB, "link", "set", "bbpb"+strconv.Itoa(id), "up")
	return v
}

// inNetns runs fn on a thread in network namespace name; the thread is
// left there and ends with fn's goroutine.
func inNetns(name string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		ns, err := netns.GetFromName(name)
		if err != nil {
			errc <- err
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// transfer sends as fast as it can from A to B for d and returns the
// rate B received, in bits per second.
func (v *vethPair) transfer(t *testing.T, d time.Duration) float64 {
	t.Helper()
	var ln net.Listener
	if err := inNetns(v.nsB, func() (err error) {
		ln, err = net.Listen("tcp4", v.addrB+":0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var got atomic.Int64
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			got.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	var conn net.Conn
	if err := inNetns(v.nsA, func() (err error) {
		conn, err = net.Dial("tcp4", ln.Addr().String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	end := time.Now().Add(d)
	conn.SetWriteDeadline(end)
	// Measure from a quarter of the way in: the bucket's burst and TCP's
	// start are over, the rest flows at the rate.
	var n0 atomic.Int64
	var t0 atomic.Int64
	time.AfterFunc(d/4, func() { n0.Store(got.Load()); t0.Store(time.Now().UnixNano()) })
	buf := make([]byte, 64<<10)
	for time.Now().Before(end) {
		if _, err := conn.Write(buf); err != nil {
			break
		}
	}
	n := got.Load() - n0.Load()
	el := time.Since(time.Unix(0, t0.Load())).Seconds()
	return float64(n) * 8 / el
}

// rootQdiscKind returns the kind and handle of the root qdisc of iface in ns.
func rootQdiscKind(t *testing.T, nsName, iface string) (string, uint32) {
	t.Helper()
	ns, err := netns.GetFromName(nsName)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName(iface)
	if err != nil {
		t.Fatal(err)
	}
	qs, err := h.QdiscList(l)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Attrs().Parent == netlink.HANDLE_ROOT {
			return q.Type(), q.Attrs().Handle
		}
	}
	return "", 0
}

// The net perturbation shapes a veth link to its rate, as a transfer
// through it sees, and gives the link back its default qdisc on a
// deadline, on SIGTERM and, after SIGKILL, with --restore.
func TestPerturbNet(t *testing.T) {
	privtest.Require(t)
	v := newVethPair(t)
	kind0, _ := rootQdiscKind(t, v.nsA, v.vethA)
	state := filepath.Join(perturb.DefaultStateDir, fmt.Sprintf("tbf-%s-%s.json", v.nsA, v.vethA))
	const rate = 8e6
	unshaped := v.transfer(t, 300*time.Millisecond)
	t.Logf("unshaped: %.0f Mbit/s; default root qdisc %q", unshaped/1e6, kind0)
	clean := func(t *testing.T) {
		t.Helper()
		if k, h := rootQdiscKind(t, v.nsA, v.vethA); k != kind0 || h == netlink.MakeHandle(0xbb, 0) {
			t.Errorf("root qdisc %s %x left behind (was %q)", k, h, kind0)
		}
		if _, err := os.Stat(state); err == nil {
			t.Errorf("state file %s left behind", state)
		}
	}
	for _, sig := range []syscall.Signal{0, syscall.SIGTERM} {
		t.Run(fmt.Sprintf("signal=%v", sig), func(t *testing.T) {
			args := []string{"net", "--netns", v.nsA, "--iface", v.vethA, "--rate", "8mbit", "--limit", "512kb", "--output", "json"}
			if sig == 0 {
				args = append(args, "--duration", "2s")
			}
			p := startPerturb(t, args...)
			if k, _ := rootQdiscKind(t, v.nsA, v.vethA); k != "tbf" {
				t.Fatalf("root qdisc %q while shaping", k)
			}
			got := v.transfer(t, 1200*time.Millisecond)
			if code := p.stop(t, sig); code != 0 {
				t.Fatalf("exit %d: %s", code, p.stderr.String())
			}
			var rep perturb.NetReport
			p.report(t, &rep)
			t.Logf("shaped to 8 Mbit/s: the transfer saw %.2f Mbit/s; report %+v", got/1e6, rep)
			if got < 0.75*rate || got > 1.25*rate {
				t.Errorf("shaped transfer %.2f Mbit/s, want 8 ± 25%%", got/1e6)
			}
			if rep.Bytes < uint64(got/8) || rep.Packets == 0 {
				t.Errorf("the qdisc sent %d bytes, the transfer's last second alone %.0f", rep.Bytes, got/8)
			}
			clean(t)
		})
	}
	// SIGKILL: the process's reaper undoes the shaping.
	t.Run("reaped after a crash", func(t *testing.T) {
		p := startPerturb(t, "net", "--netns", v.nsA, "--iface", v.vethA, "--rate", "8mbit")
		p.stop(t, syscall.SIGKILL)
		if k := waitQdiscNot(t, v.nsA, v.vethA, "tbf"); k == "tbf" {
			t.Fatalf("root qdisc still bpfbench's tbf 10 s after SIGKILL: the reaper did not restore it")
		}
		code, _, stderr := runCLI("perturb", "net", "--restore", v.vethA, "--netns", v.nsA)
		if code == 0 || !strings.Contains(stderr, "not shaped by bpfbench") {
			t.Errorf("restore after the reaper: exit %d %q, want nothing to restore", code, stderr)
		}
		if fast := v.transfer(t, 300*time.Millisecond); fast < 4*rate {
			t.Errorf("after the reaper: %.1f Mbit/s, still shaped?", fast/1e6)
		}
	})
	// SIGKILL of the process and its reaper: the next command run as root
	// finds the dead owner's state and restores it before it starts.
	t.Run("swept after a crash", func(t *testing.T) {
		p := startPerturb(t, "net", "--netns", v.nsA, "--iface", v.vethA, "--rate", "8mbit")
		killReaperOf(t, p.cmd.Process.Pid)
		p.stop(t, syscall.SIGKILL)
		if k, _ := rootQdiscKind(t, v.nsA, v.vethA); k != "tbf" {
			t.Fatalf("root qdisc %q after SIGKILL of both, want bpfbench's tbf still there", k)
		}
		code, _, stderr := runCLI("perturb", "net", "--netns", v.nsA, "--iface", v.vethA, "--rate", "1mbit", "--duration", "1s")
		if code != 0 || !strings.Contains(stderr, "removed what a dead bpfbench") {
			t.Errorf("shaping after the crash: exit %d %q, want the dead owner's shaping removed first", code, stderr)
		}
		clean(t)
		if fast := v.transfer(t, 300*time.Millisecond); fast < 4*rate {
			t.Errorf("after the sweep: %.1f Mbit/s, still shaped?", fast/1e6)
		}
	})
}

// waitQdiscNot polls the root qdisc of iface in ns until its kind is not
// kind, for at most 10 s (a deadline to fail by, not a measured time), and
// returns the last kind seen.
func waitQdiscNot(t *testing.T, ns, iface, kind string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		k, _ := rootQdiscKind(t, ns, iface)
		if k != kind || time.Now().After(deadline) {
			return k
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// killReaperOf SIGKILLs the reaper watching pid (bpfbench reap --pid PID)
// and waits for it to be gone.
func killReaperOf(t *testing.T, pid int) {
	t.Helper()
	want := []byte("reap\x00--pid\x00" + strconv.Itoa(pid) + "\x00")
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		rp, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cl, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && bytes.Contains(cl, want) {
			if err := syscall.Kill(rp, syscall.SIGKILL); err != nil {
				t.Fatalf("kill the reaper %d: %v", rp, err)
			}
			for i := 0; i < 200; i++ {
				if syscall.Kill(rp, 0) != nil {
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
			return
		}
	}
	t.Fatalf("no reaper of %d found", pid)
}

// The slow client holds the server's side of its connection against a
// closed window, as the server's own tcp_info records.
func TestPerturbClient(t *testing.T) {
	privtest.Require(t)
	url := inProcessSim(t, nil)
	code, stdout, stderr := runCLI("perturb", "client", "--target", url, "--stop-after", "200ms", "--duration", "1500ms", "--output", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var env struct{ Report perturb.ClientReport }
	if err := json.Unmarshal([]byte(stdout), &env); err != nil {
		t.Fatal(err)
	}
	rep := env.Report
	t.Logf("%+v", rep)
	if rep.BytesRead == 0 || rep.StoppedS < 0.15 || rep.WallS < 1.4 {
		t.Errorf("report %+v", rep)
	}
	// Stopped at 0.2 s of 1.5 s: the window was closed for most of the rest.
	if rep.ServerRwndLimitedS < 0.6 {
		t.Errorf("the server was window-limited for %.2f s, want most of the 1.3 s without reading", rep.ServerRwndLimitedS)
	}
	code, stdout, stderr = runCLI("perturb", "client", "--target", url, "--read-rate", "4000", "--duration", "1s", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if err := json.Unmarshal([]byte(stdout), &env); err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", env.Report)
	if r := env.Report.ReadRate; r < 2000 || r > 6000 {
		t.Errorf("read %.0f bytes/s, asked 4000", r)
	}
}

func TestPerturbBadInput(t *testing.T) {
	dir := t.TempDir()
	ro := filepath.Join(dir, "ro.img")
	if err := os.WriteFile(ro, make([]byte, 1<<20), 0o444); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no kind", []string{"perturb"}, "needs a kind"},
		{"unknown kind", []string{"perturb", "gpu"}, "unknown perturbation"},
		{"missing interface", []string{"perturb", "net", "--iface", "bbnosuch0", "--rate", "1mbit", "--duration", "1s"}, "interface bbnosuch0 does not exist"},
		{"missing netns", []string{"perturb", "net", "--netns", "bbnosuchns", "--iface", "lo", "--rate", "1mbit"}, "network namespace bbnosuchns does not exist"},
		{"bad rate", []string{"perturb", "net", "--iface", "lo", "--rate", "fast"}, "rate \"fast\""},
		{"read-only file", []string{"perturb", "io", "--file", ro, "--write", "--duration", "1s"}, "read-only"},
		{"too many threads", []string{"perturb", "cpu", "--threads", "100000", "--duration", "1s"}, "at most 256"},
		{"missing CPU", []string{"perturb", "cpu", "--cpus", "4096", "--duration", "1s"}, "does not exist"},
		{"restore unshaped", []string{"perturb", "net", "--restore", "lo", "--state-dir", dir}, "lo is not shaped by bpfbench"},
		{"client without a mode", []string{"perturb", "client", "--target", "http://127.0.0.1:1"}, "either --read-rate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(tc.args...)
			if code == 0 {
				t.Fatalf("exit 0, want non-zero")
			}
			if line := oneLine(t, stderr); !strings.Contains(line, tc.want) {
				t.Errorf("stderr %q does not say %q", line, tc.want)
			}
		})
	}
}
