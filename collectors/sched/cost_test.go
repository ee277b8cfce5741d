package sched

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/collectors/bpfutil"
	"github.com/bpfbench/bpfbench/internal/privtest"
)

// costWorkload starts a workload paused and returns its pids, a go-ahead
// and a wait that returns its figure (higher is better).
type costWorkload func(tb testing.TB) (pids []int, start func(), figure func() float64)

// pinnedStorm is a pipe ping-pong of two processes pinned to CPU 0; the
// pinger waits for a line on stdin. Its figure is round trips per second.
func pinnedStorm(trips int) costWorkload {
	return func(tb testing.TB) ([]int, func(), func() float64) {
		r1, w1, _ := os.Pipe()
		r2, w2, _ := os.Pipe()
		echo := exec.Command(os.Args[0])
		echo.Env = append(os.Environ(), "BPFBENCH_STORM=echo")
		echo.ExtraFiles = []*os.File{r1, w2}
		ping := exec.Command(os.Args[0])
		ping.Env = append(os.Environ(), "BPFBENCH_STORM=ping", "BPFBENCH_STORM_N="+strconv.Itoa(trips), "BPFBENCH_STORM_WAIT=1")
		ping.ExtraFiles = []*os.File{r2, w1}
		in, _ := ping.StdinPipe()
		outp, _ := ping.StdoutPipe()
		if err := echo.Start(); err != nil {
			tb.Fatal(err)
		}
		if err := ping.Start(); err != nil {
			tb.Fatal(err)
		}
		for _, f := range []*os.File{r1, w1, r2, w2} {
			f.Close()
		}
		var set unix.CPUSet
		set.Set(0)
		for _, p := range []int{echo.Process.Pid, ping.Process.Pid} {
			_ = unix.SchedSetaffinity(p, &set)
		}
		figure := func() float64 {
			line, _ := bufio.NewReader(outp).ReadString('\n')
			_ = ping.Wait()
			_ = echo.Wait()
			ns, _ := strconv.ParseFloat(strings.TrimSpace(line), 64)
			return float64(trips) / (ns / 1e9)
		}
		return []int{echo.Process.Pid, ping.Process.Pid}, func() { in.Write([]byte("go\n")) }, figure
	}
}

// barrierPool is bin/barrierpool (two threads, 200 µs steps) for secs
// seconds; its figure is steps per second.
func barrierPool(secs int) costWorkload {
	return func(tb testing.TB) ([]int, func(), func() float64) {
		bin, _ := filepath.Abs("../../bin/barrierpool")
		if _, err := os.Stat(bin); err != nil {
			privtest.Skip(tb, "no bin/barrierpool: run make build")
		}
		cmd := exec.Command(bin, "-t", "2", "-w", "200", "-s", "50", "-d", strconv.Itoa(secs), "-W")
		errp, _ := cmd.StderrPipe()
		outp, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			tb.Fatal(err)
		}
		br := bufio.NewReader(errp)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				tb.Fatalf("barrierpool: %v", err)
			}
			if strings.Contains(line, "ready") {
				break
			}
		}
		figure := func() float64 {
			line, _ := bufio.NewReader(outp).ReadString('\n')
			_ = cmd.Process.Signal(syscall.SIGUSR1)
			_ = cmd.Wait()
			var r struct {
				StepsPerSecond float64 `json:"steps_per_second"`
			}
			_ = json.Unmarshal([]byte(line), &r)
			return r.StepsPerSecond
		}
		return []int{cmd.Process.Pid}, func() { _ = cmd.Process.Signal(syscall.SIGUSR1) }, figure
	}
}

type costMode struct {
	name string
	cfg  *Config // nil: nothing attached
	// other: the target is this test process, not the workload: every
	// switch of the workload takes the path of a thread of no target.
	other bool
	// host: no target at all.
	host bool
	// empty: an empty program on sched_switch and one on sched_waking,
	// the floor of any observer there.
	empty bool
}

// BenchmarkWakersCost measures what the critical-path data costs a
// session: the scheduler collector as it was (sched_switch only) and with
// wakers, softirq vectors and the process tree, then also with the
// interrupt time inside running stretches, next to nothing attached,
// on a pinned pipe ping-pong and on bin/barrierpool, in alternating rounds
// of one run. BPF run-time statistics are on in every mode (two clock
// reads per program run, the same for both observers), so the per-program
// figures are upper bounds.
//
//	sudo go test -run '^$' -bench WakersCost -benchtime 3x ./collectors/sched/
func BenchmarkWakersCost(b *testing.B) {
	privtest.Require(b)
	stats, err := bpfutil.EnableStats()
	if err != nil {
		b.Fatalf("enabling BPF run-time stats: %v", err)
	}
	defer stats.Close()
	modes := []costMode{
		{name: "nothing"},
		{name: "empty", empty: true},
		{name: "before", cfg: &Config{}},
		{name: "after", cfg: &Config{Wakers: true, SoftirqVector: true, Tree: true}},
		{name: "irqtime", cfg: &Config{Wakers: true, SoftirqVector: true, Tree: true, IRQTime: true}},
		{name: "other", cfg: &Config{Wakers: true, SoftirqVector: true, Tree: true, IRQTime: true}, other: true},
		// The daemon's host-wide collector on a storm (no target): one
		// switch in 512 sampled, the rest an early return.
		{name: "host", cfg: &Config{HostWide: true, HostSample: 512}, host: true},
	}
	if only := os.Getenv("BPFBENCH_COST_MODES"); only != "" {
		// e.g. BPFBENCH_COST_MODES=nothing,irqtime,other
		modes = slices.DeleteFunc(modes, func(m costMode) bool { return !slices.Contains(strings.Split(only, ","), m.name) })
	}
	for _, wl := range []struct {
		name string
		w    costWorkload
	}{{"storm", pinnedStorm(200000)}, {"barrier", barrierPool(3)}} {
		b.Run(wl.name, func(b *testing.B) {
			figs := map[string][]float64{}
			for round := range b.N {
				for i := range modes {
					m := modes[(i+round)%len(modes)]
					fig, line := costRound(b, wl.w, m)
					figs[m.name] = append(figs[m.name], fig)
					b.Logf("round %d %-7s %s", round, m.name, line)
				}
			}
			if len(figs["nothing"]) == 0 {
				return
			}
			base := median(append([]float64(nil), figs["nothing"]...))
			for _, m := range modes[1:] {
				r := median(append([]float64(nil), figs[m.name]...)) / base
				b.ReportMetric(r, m.name+"-ratio")
			}
		})
	}
}

func costRound(b *testing.B, w costWorkload, m costMode) (float64, string) {
	pids, start, figure := w(b)
	if m.empty {
		return emptyRound(b, start, figure)
	}
	if m.cfg == nil {
		t0 := time.Now()
		start()
		fig := figure()
		return fig, fmt.Sprintf("%.0f/s over %v", fig, time.Since(t0).Round(time.Millisecond))
	}
	c := New(*m.cfg)
	if err := c.Start(context.Background()); err != nil {
		b.Fatalf("%+v", err)
	}
	defer c.Close()
	if m.other {
		pids = []int{os.Getpid()}
	}
	if m.host {
		pids = nil
	}
	for _, p := range pids {
		if err := c.SetTarget(uint32(p), 1, true); err != nil {
			b.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	before := progStats(c)
	t0 := time.Now()
	start()
	fig := figure()
	el := time.Since(t0)
	after := progStats(c)
	cancel()
	<-done
	recs := c.DrainStats().Records
	ps, _ := c.PipeStats()
	var sb strings.Builder
	fmt.Fprintf(&sb, "%.0f/s over %v; %.0f records/s, %d folded, %d lost;", fig, el.Round(time.Millisecond), float64(recs)/el.Seconds(), ps.Folded, ps.Lost)
	sb.WriteString(statsLine(before, after, el))
	return fig, sb.String()
}

type progStat struct{ ns, runs uint64 }

func (a progStat) sub(b progStat) progStat { return progStat{a.ns - b.ns, a.runs - b.runs} }

// statsLine is each program's runs/s, ns/run and ms of CPU a second
// between two reads of progStats.
func statsLine(before, after map[string]progStat, el time.Duration) string {
	var sb strings.Builder
	for _, name := range slices.Sorted(maps.Keys(after)) {
		d := after[name].sub(before[name])
		if d.runs == 0 {
			continue
		}
		fmt.Fprintf(&sb, " %s %.0f runs/s %.0f ns/run %.2f ms/s;", name, float64(d.runs)/el.Seconds(), float64(d.ns)/float64(d.runs), float64(d.ns)/1e6/el.Seconds())
	}
	return sb.String()
}

func progStats(c *Collector) map[string]progStat { return statsOf(c.Programs()) }

func statsOf(progs []*ebpf.Program) map[string]progStat {
	out := map[string]progStat{}
	for _, p := range progs {
		if p == nil {
			continue
		}
		info, err := p.Info()
		if err != nil {
			continue
		}
		st, err := p.Stats()
		if err != nil {
			continue
		}
		out[info.Name] = progStat{uint64(st.Runtime), st.RunCount}
	}
	return out
}

// emptyRound runs the workload under empty programs on sched_switch and
// sched_waking (r0 = 0; exit): the kernel's dispatch alone.
func emptyRound(b *testing.B, start func(), figure func() float64) (float64, string) {
	var progs []*ebpf.Program
	for _, tp := range []string{"sched_switch", "sched_waking"} {
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Name: "empty_" + tp, Type: ebpf.Tracing, AttachType: ebpf.AttachTraceRawTp, AttachTo: tp,
			License: "GPL", Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
		})
		if err != nil {
			b.Fatalf("loading an empty tp_btf/%s program: %v", tp, err)
		}
		defer p.Close()
		l, err := link.AttachTracing(link.TracingOptions{Program: p})
		if err != nil {
			b.Fatalf("attaching to tp_btf/%s: %v", tp, err)
		}
		defer l.Close()
		progs = append(progs, p)
	}
	before := statsOf(progs)
	t0 := time.Now()
	start()
	fig := figure()
	el := time.Since(t0)
	after := statsOf(progs)
	return fig, fmt.Sprintf("%.0f/s over %v;%s", fig, el.Round(time.Millisecond), statsLine(before, after, el))
}
