package cuda_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/collectors/cuda"
	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/uprobecost"
	"github.com/bpfbench/bpfbench/readiness"
)

// The CUDA driver's own CUresult codes the real library returns here,
// where there is no device.
const (
	cudaErrorNotInitialized = 3
	cudaErrorNoDevice       = 100
)

// realLibrary finds a library of the real NVIDIA driver (Debian's
// libcuda1 and libnvidia-ml1, non-free), or skips: CI installs them and
// forbids the skip (BPFBENCH_REQUIRE_PRIVILEGED=1).
func realLibrary(t *testing.T, soname, pkg string) string {
	t.Helper()
	p := readiness.FindLibrary(soname)
	if p == "" {
		privtest.SkipPrivileged(t, "%s not installed: install Debian's %s (non-free) to test against the real NVIDIA driver library", soname, pkg)
	}
	return p
}

type realResult struct {
	Init, Syncs, SyncRC, Allocs, AllocRC int
}

func (r *realResult) UnmarshalJSON(b []byte) error {
	var v struct {
		Init    int `json:"init"`
		Syncs   int `json:"syncs"`
		SyncRC  int `json:"sync_rc"`
		Allocs  int `json:"allocs"`
		AllocRC int `json:"alloc_rc"`
	}
	err := json.Unmarshal(b, &v)
	*r = realResult{v.Init, v.Syncs, v.SyncRC, v.Allocs, v.AllocRC}
	return err
}

// startRealCall builds tools/cudastub/src/realcall.c and starts it on lib.
func startRealCall(t *testing.T, lib string, syncs, allocs string) (*exec.Cmd, io.WriteCloser, *bufio.Reader) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "realcall")
	if out, err := exec.Command("cc", "-O2", "-o", bin, "../../tools/cudastub/src/realcall.c", "-ldl").CombinedOutput(); err != nil {
		t.Fatalf("building realcall: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-l", lib, "-s", syncs, "-a", allocs)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, err := bufio.NewReader(stderr).ReadString('\n'); err != nil || !strings.Contains(line, "ready") {
		t.Fatalf("realcall did not get ready: %q %v", line, err)
	}
	return cmd, stdin, bufio.NewReader(stdout)
}

// Against the real libcuda.so.1 (no GPU here): every probed symbol
// resolves, cuStreamSynchronize and cuMemAlloc_v2 are counted exactly with
// the error the driver returned, and the launch functions' first
// instruction, read from the library, puts the launch budget in the
// single-step cost class (the real cuLaunchKernel begins with a RIP-relative
// cmpl, which the kernel single-steps).
func TestRealDriverLibrary(t *testing.T) {
	privtest.Require(t)
	lib := realLibrary(t, "libcuda.so.1", "libcuda1")
	cmd, stdin, stdout := startRealCall(t, lib, "10", "100")
	pid := cmd.Process.Pid
	libs, err := cuda.FindLibraries(pid, nil)
	if err != nil || len(libs) == 0 {
		t.Fatalf("finding the CUDA libraries of realcall: %v", err)
	}
	var mu sync.Mutex
	rets := map[string]map[int32]int{}
	cost := uprobecost.Cost{EmulatedNs: 1000, SingleStepNs: 3000}
	s, err := cuda.NewSectionConfig(collectors.Options{Pid: pid}, cuda.SectionConfig{
		Budget: cuda.Budget{Cost: &cost},
		OnEvent: func(e *cuda.Event) {
			mu.Lock()
			defer mu.Unlock()
			if rets[e.Name()] == nil {
				rets[e.Name()] = map[int32]int{}
			}
			rets[e.Name()][e.Ret]++
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("%+v", err)
	}
	defer s.Close()
	for _, l := range s.Summary().(cuda.Summary).Libraries {
		t.Logf("%s library %s: %d symbols probed, missing %v", l.API, l.Path, l.Symbols, l.Missing)
		if l.API == "driver" && (l.Symbols == 0 || len(l.Missing) > 0) {
			t.Errorf("the real driver library lacks probed symbols: %d probed, missing %v", l.Symbols, l.Missing)
		}
	}
	emu, step := s.LaunchProbeKinds(uint32(pid))
	t.Logf("launch probes: %d emulated, %d single-stepped", emu, step)
	if step == 0 {
		t.Errorf("no launch function of the real driver is single-stepped")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	stdin.Write([]byte("g"))
	line, err := stdout.ReadString('\n')
	if err != nil {
		t.Fatalf("reading realcall's result: %v", err)
	}
	var r realResult
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	checkRealCalls(t, s, r, rets, cost)
}

func checkRealCalls(t *testing.T, s *cuda.Section, r realResult, rets map[string]map[int32]int, cost uprobecost.Cost) {
	t.Helper()
	t.Logf("realcall: cuInit returned %d, %d cuStreamSynchronize returned %d, %d cuMemAlloc_v2 returned %d", r.Init, r.Syncs, r.SyncRC, r.Allocs, r.AllocRC)
	if r.Init != cudaErrorNoDevice || r.SyncRC != cudaErrorNotInitialized || r.AllocRC != cudaErrorNotInitialized {
		t.Logf("the driver's codes differ from those of a host without a device; comparing with what it returned")
	}
	sum := s.Summary().(cuda.Summary)
	for _, c := range []struct {
		name string
		n    int
		rc   int
	}{{"cuStreamSynchronize", r.Syncs, r.SyncRC}, {"cuMemAlloc_v2", r.Allocs, r.AllocRC}} {
		var got cuda.CallSummary
		for _, cs := range sum.Calls {
			if cs.Name == c.name {
				got = cs
			}
		}
		if got.Count != uint64(c.n) || got.Errors != uint64(c.n) {
			t.Errorf("%s: counted %d calls, %d errors; realcall made %d, each failing", c.name, got.Count, got.Errors, c.n)
		}
		if rets[c.name][int32(c.rc)] != c.n {
			t.Errorf("%s: return codes %v, want %d times %d", c.name, rets[c.name], c.n, c.rc)
		}
	}
	if lp := s.LaunchProbes(); lp.HitCostNs != cost.SingleStepNs {
		t.Errorf("the launch budget prices a hit at %.0f ns, want the single-step class's %.0f", lp.HitCostNs, cost.SingleStepNs)
	}
}

// NVML through go-nvml against the real libnvidia-ml.so.1: without the
// kernel driver it says so, and `bpfbench check` finds both libraries.
func TestRealNVML(t *testing.T) {
	realLibrary(t, "libnvidia-ml.so.1", "libnvidia-ml1")
	realLibrary(t, "libcuda.so.1", "libcuda1")
	ret := nvml.Init()
	if ret == nvml.SUCCESS {
		defer nvml.Shutdown()
		t.Logf("NVML initialized: a GPU driver is loaded here")
	} else {
		t.Logf("nvml.Init: %s (%d)", nvml.ErrorString(ret), int(ret))
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			t.Errorf("go-nvml did not load the installed libnvidia-ml.so.1")
		}
		if ret == nvml.ERROR_DRIVER_NOT_LOADED && nvml.ErrorString(ret) != "Driver Not Loaded" {
			t.Errorf("NVML's own error string %q, want the library's \"Driver Not Loaded\"", nvml.ErrorString(ret))
		}
	}
	for _, c := range readiness.Readiness(nil) {
		if c.Name == "nvml" || c.Name == "libcuda" {
			t.Logf("check: %s %s %s", c.Name, c.Status, c.Detail)
			if c.Status != readiness.OK || !strings.HasPrefix(c.Detail, "/") {
				t.Errorf("bpfbench check: %s %s %q, want the installed library's path", c.Name, c.Status, c.Detail)
			}
		}
	}
}
