package sched

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/internal/privtest"
)

func init() {
	// The storm's peers: "echo" answers every byte on fd 3 with a byte on
	// fd 4; "ping" sends N bytes one at a time and prints the elapsed ns.
	if mode := os.Getenv("BPFBENCH_STORM"); mode != "" {
		in, out := os.NewFile(3, "in"), os.NewFile(4, "out")
		b := make([]byte, 1)
		switch mode {
		case "echo":
			for {
				if _, err := in.Read(b); err != nil {
					os.Exit(0)
				}
				out.Write(b)
			}
		case "ping":
			n, _ := strconv.Atoi(os.Getenv("BPFBENCH_STORM_N"))
			if os.Getenv("BPFBENCH_STORM_WAIT") == "1" { // a go-ahead line
				_, _ = os.Stdin.Read(make([]byte, 8))
			}
			start := time.Now()
			for range n {
				out.Write(b)
				in.Read(b)
			}
			fmt.Println(time.Since(start).Nanoseconds())
			os.Exit(0)
		}
	}
}

// storm runs n round trips between two processes over pipes and returns
// the round trips per second.
func storm(tb testing.TB, n int) float64 {
	tb.Helper()
	r1, w1, _ := os.Pipe()
	r2, w2, _ := os.Pipe()
	echo := exec.Command(os.Args[0])
	echo.Env = append(os.Environ(), "BPFBENCH_STORM=echo")
	echo.ExtraFiles = []*os.File{r1, w2}
	ping := exec.Command(os.Args[0])
	ping.Env = append(os.Environ(), "BPFBENCH_STORM=ping", "BPFBENCH_STORM_N="+strconv.Itoa(n))
	ping.ExtraFiles = []*os.File{r2, w1}
	if err := echo.Start(); err != nil {
		tb.Fatal(err)
	}
	out, err := ping.Output()
	r1.Close()
	w1.Close()
	r2.Close()
	w2.Close()
	echo.Wait()
	if err != nil {
		tb.Fatal(err)
	}
	ns, _ := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	return float64(n) / (ns / 1e9)
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func median(xs []float64) float64 {
	sort.Float64s(xs)
	return xs[len(xs)/2]
}

// BenchmarkSchedStorm measures the scheduler collector's cost on a pipe
// ping-pong between two processes (about four scheduler events per round
// trip): the storm's throughput with the daemon's host-wide aggregation on,
// as a ratio to the same storm with nothing attached, alternating rounds
// in one run; the in-kernel program time per event (BPF run-time stats);
// and the collector process's own CPU per million events (over what the
// same process spends on a storm without it). BPF run-time stats add two
// clock reads per program run, so bpf-ns/event is an upper bound.
//
//	sudo go test -run '^$' -bench SchedStorm ./collectors/sched/
func BenchmarkSchedStorm(b *testing.B) {
	privtest.Require(b)
	for _, sample := range []uint32{1, DefaultHostSample} {
		b.Run(fmt.Sprintf("host-sample-%d", sample), func(b *testing.B) { schedStorm(b, sample) })
	}
}

func schedStorm(b *testing.B, sample uint32) {
	const trips = 100000
	storm(b, 10000) // warm up
	var ratios, nsPerEvent, cpuPerMillion []float64
	var events uint64
	b.ResetTimer()
	for range b.N {
		// This process's own CPU during a storm without the collector
		// (process start-up of the peers, pipes) is subtracted below.
		cpuB := cpuTime()
		base := storm(b, trips)
		cpuBase := cpuTime() - cpuB
		c := New(Config{HostWide: true, HostSample: sample})
		if err := c.Start(context.Background()); err != nil {
			b.Fatalf("%+v", err)
		}
		// Loading parses the kernel's BTF; collect that garbage now so
		// the storm measures the steady state, not start-up.
		runtime.GC()
		cpu0 := cpuTime()
		with := storm(b, trips)
		cpu := cpuTime() - cpu0
		// The program's own time, with run-time statistics on for a
		// shorter storm of its own (they cost two clock reads a run, so
		// the ratio above is taken without them).
		stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
		if err != nil {
			b.Fatalf("enabling BPF run-time stats: %v", err)
		}
		storm(b, trips/4)
		stats.Close()
		rtNs, runs := c.ProgramRuntime()
		rt := time.Duration(rtNs)
		c.Close()
		events += runs
		ratios = append(ratios, with/base)
		nsPerEvent = append(nsPerEvent, float64(rt.Nanoseconds())/float64(runs))
		cpuPerMillion = append(cpuPerMillion, max(0, (cpu-cpuBase).Seconds())/(float64(runs)/1e6))
		b.Logf("round trips/s: baseline %.0f, with collector %.0f (ratio %.3f); %d events, %.0f ns of BPF each; collector process CPU %v over the storm's own %v",
			base, with, with/base, runs, float64(rt.Nanoseconds())/float64(runs), cpu, cpuBase)
	}
	b.ReportMetric((1-median(ratios))*100, "slowdown-%")
	b.ReportMetric(median(nsPerEvent), "bpf-ns/event")
	b.ReportMetric(median(cpuPerMillion), "daemon-cpu-s/Mevents")
	b.ReportMetric(float64(events)/float64(b.N), "events/op")
}
