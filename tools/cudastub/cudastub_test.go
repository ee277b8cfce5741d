package cudastub_test

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ebitengine/purego"
)

// binDir holds the stub built once for the whole test binary.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cudastub-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	out, err := exec.Command("make", "-s", "-C", ".", "OUT="+dir).CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building the stub with make: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// result is the JSON the driver program prints.
type result struct {
	API            string            `json:"api"`
	Lib            string            `json:"lib"`
	PID            int               `json:"pid"`
	Launch         string            `json:"launch"`
	Sync           string            `json:"sync"`
	Grid           [3]uint32         `json:"grid"`
	Block          [3]uint32         `json:"block"`
	KernelUS       float64           `json:"kernel_us"`
	Rounds         uint64            `json:"rounds"`
	Launches       uint64            `json:"launches"`
	Syncs          uint64            `json:"syncs"`
	Allocs         uint64            `json:"allocs"`
	AllocErrors    uint64            `json:"alloc_errors"`
	AllocErrorCode int               `json:"alloc_error_code"`
	Frees          uint64            `json:"frees"`
	Copies         uint64            `json:"copies"`
	CopyBytes      uint64            `json:"copy_bytes"`
	Calls          map[string]uint64 `json:"calls"`
	Errors         map[string]uint64 `json:"errors"`
	Unexpected     uint64            `json:"unexpected_errors"`
	SyncWallNS     uint64            `json:"sync_wall_ns"`
	SyncMaxNS      uint64            `json:"sync_max_ns"`
	SyncNS         []uint64          `json:"sync_ns"`
	LaunchWallNS   uint64            `json:"launch_wall_ns"`
	StartNS        uint64            `json:"start_ns"`
	EndNS          uint64            `json:"end_ns"`
	ElapsedNS      uint64            `json:"elapsed_ns"`
	LaunchesPerSec float64           `json:"launches_per_second"`

	// --graphs and --exhaust.
	Instantiations      uint64 `json:"instantiations"`
	InstantiateErrors   uint64 `json:"instantiate_errors"`
	GraphLaunches       uint64 `json:"graph_launches"`
	ExecDestroys        uint64 `json:"exec_destroys"`
	Exhaustions         uint64 `json:"exhaustions"`
	PoolFragmentation   int    `json:"pool_fragmentation"`
	PoolAllocs          uint64 `json:"pool_allocs"`
	PoolOOM             uint64 `json:"pool_oom"`
	PoolOOMFragmented   uint64 `json:"pool_oom_fragmented"`
	PoolTrims           uint64 `json:"pool_trims"`
	PoolAttributeSets   uint64 `json:"pool_attribute_sets"`
	PoolReservedPeak    uint64 `json:"pool_reserved_peak"`
	PoolReservedTrimmed uint64 `json:"pool_reserved_after_trim"`

	// Measured by the test around the process.
	wall time.Duration // start to exit
	cpu  time.Duration // user and system CPU time
}

func libFor(api string) string {
	if api == "runtime" {
		return filepath.Join(binDir, "libcudart.so.12")
	}
	return filepath.Join(binDir, "libcuda.so.1")
}

// runDriver runs cudastub-driver with args and env and decodes its JSON.
// wantExit is the exit status the run must end with.
func runDriver(t *testing.T, env []string, wantExit int, args ...string) result {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "cudastub-driver"), args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	err := cmd.Run()
	wall := time.Since(t0)
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running cudastub-driver %v: %v", args, err)
	}
	if code != wantExit {
		t.Fatalf("cudastub-driver %v: exit status %d, want %d\nstderr: %s", args, code, wantExit, stderr.String())
	}
	r := decode(t, stdout.Bytes())
	r.wall = wall
	r.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return r
}

func decode(t *testing.T, b []byte) result {
	t.Helper()
	var r result
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("decoding the driver's JSON: %v\n%s", err, b)
	}
	return r
}

// checkTimeline holds a run's times to its own timeline, not to a nominal
// duration with a tolerance. The work queued on a stream runs one item
// after another from the first call, so the run cannot end before queuedNs
// of it is done (a sleep ends late, never early): that bound is exact. How
// late a waiter wakes depends on the machine's load and is not checked.
// The driver's own figures must agree with each other and with the
// elapsed time the test measured around the process.
func checkTimeline(t *testing.T, r result, queuedNs uint64) {
	t.Helper()
	if r.ElapsedNS < queuedNs {
		t.Errorf("run ended %v after it began, before its %v of queued work", time.Duration(r.ElapsedNS), time.Duration(queuedNs))
	}
	var sum, most uint64
	for _, d := range r.SyncNS {
		sum += d
		most = max(most, d)
	}
	if len(r.SyncNS) == int(r.Syncs) && (sum != r.SyncWallNS || most != r.SyncMaxNS) {
		t.Errorf("sync samples add to %v (max %v), the driver reports %v (max %v)", time.Duration(sum), time.Duration(most), time.Duration(r.SyncWallNS), time.Duration(r.SyncMaxNS))
	}
	if r.SyncWallNS+r.LaunchWallNS > r.ElapsedNS || r.EndNS-r.StartNS != r.ElapsedNS {
		t.Errorf("sync %v + launch %v of %v elapsed (%d..%d)", time.Duration(r.SyncWallNS), time.Duration(r.LaunchWallNS), time.Duration(r.ElapsedNS), r.StartNS, r.EndNS)
	}
	if r.wall < time.Duration(r.ElapsedNS) {
		t.Errorf("the driver reports %v elapsed, the test measured %v around it", time.Duration(r.ElapsedNS), r.wall)
	}
}

// driverAPI and runtimeAPI name the calls of each API by role.
var names = map[string]map[string]string{
	"driver": {
		"kernel": "cuLaunchKernel", "ex": "cuLaunchKernelEx", "graph": "cuGraphLaunch",
		"stream": "cuStreamSynchronize", "device": "cuCtxSynchronize", "event": "cuEventSynchronize",
		"alloc": "cuMemAlloc_v2", "free": "cuMemFree_v2",
		"htod": "cuMemcpyHtoD_v2", "dtoh": "cuMemcpyDtoH_v2",
	},
	"runtime": {
		"kernel": "cudaLaunchKernel", "ex": "cudaLaunchKernelExC", "graph": "cudaGraphLaunch",
		"stream": "cudaStreamSynchronize", "device": "cudaDeviceSynchronize", "event": "cudaEventSynchronize",
		"alloc": "cudaMalloc", "free": "cudaFree",
		"htod": "cudaMemcpy", "dtoh": "cudaMemcpy",
	},
}

// The ground truth the uprobe tests rely on: exact counts, the failing
// allocation, and synchronize time equal to the kernels' time.
func TestGroundTruth(t *testing.T) {
	const (
		launches = 40
		syncs    = 4
		allocs   = 5
		kernelUS = 2000
	)
	for _, api := range []string{"driver", "runtime"} {
		for _, launch := range []string{"kernel", "ex", "graph"} {
			for _, sync := range []string{"stream", "device", "event"} {
				// Sequential: parallel runs on a small machine wake late.
				t.Run(api+"/"+launch+"/"+sync, func(t *testing.T) {
					r := runDriver(t, nil, 0, "--api", api, "--lib", libFor(api),
						"--launches", fmt.Sprint(launches), "--syncs", fmt.Sprint(syncs),
						"--launch", launch, "--sync", sync,
						"--allocs", fmt.Sprint(allocs), "--fail-alloc",
						"--kernel-us", fmt.Sprint(kernelUS), "--grid", "4,2,1", "--block", "256,1,1")
					n := names[api]
					if r.Launches != launches || r.Calls[n[launch]] != launches {
						t.Errorf("launches %d, %s calls %d, want %d", r.Launches, n[launch], r.Calls[n[launch]], launches)
					}
					if r.Syncs != syncs || r.Calls[n[sync]] != syncs {
						t.Errorf("syncs %d, %s calls %d, want %d", r.Syncs, n[sync], r.Calls[n[sync]], syncs)
					}
					if r.Allocs != allocs || r.Calls[n["alloc"]] != allocs {
						t.Errorf("allocs %d, %s calls %d, want %d", r.Allocs, n["alloc"], r.Calls[n["alloc"]], allocs)
					}
					if r.AllocErrors != 1 || r.Errors[n["alloc"]] != 1 || r.AllocErrorCode != 2 {
						t.Errorf("alloc errors %d (%s %d), code %d; want 1 error with code 2", r.AllocErrors, n["alloc"], r.Errors[n["alloc"]], r.AllocErrorCode)
					}
					if r.Frees != allocs-1 || r.Calls[n["free"]] != allocs-1 {
						t.Errorf("frees %d, want %d", r.Frees, allocs-1)
					}
					if len(r.Errors) != 1 || r.Unexpected != 0 {
						t.Errorf("errors %v, unexpected %d; want only the failing allocation", r.Errors, r.Unexpected)
					}
					if r.Grid != [3]uint32{4, 2, 1} || r.Block != [3]uint32{256, 1, 1} {
						t.Errorf("grid %v block %v", r.Grid, r.Block)
					}
					checkTimeline(t, r, launches*kernelUS*1000)
				})
			}
		}
	}
}

// A spinning synchronize waits on the CPU, a sleeping one off it: the
// ground truth is the same run in sleep mode, whose CPU time is the
// driver's cost without the waits.
func TestSpinMode(t *testing.T) {
	var cpu [2]time.Duration
	for i, mode := range []string{"sleep", "spin"} {
		r := runDriver(t, nil, 0, "--lib", libFor("driver"), "--launches", "10", "--syncs", "2",
			"--kernel-us", "5000", "--mode", mode)
		checkTimeline(t, r, 10*5000*1000)
		cpu[i] = r.cpu
	}
	if cpu[1] <= cpu[0] {
		t.Errorf("spinning synchronizes used %v of CPU, sleeping ones %v", cpu[1], cpu[0])
	}
}

// CUDASTUB_CONTROL_FILE overrides the kernel time of a running process.
func TestControlFile(t *testing.T) {
	ctl := filepath.Join(t.TempDir(), "kernel_us")
	if err := os.WriteFile(ctl, []byte("5000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runDriver(t, []string{"CUDASTUB_CONTROL_FILE=" + ctl}, 0, "--lib", libFor("driver"),
		"--launches", "20", "--syncs", "20", "--kernel-us", "1000")
	// 20 kernels of the control file's 5 ms, not the flag's 1 ms.
	checkTimeline(t, r, 20*5000*1000)
}

// A kernel name sleep_<N>us sets that kernel's time; stream 0 and a NULL
// function work, as the simulated server uses them.
func TestDefaultStream(t *testing.T) {
	for _, api := range []string{"driver", "runtime"} {
		r := runDriver(t, nil, 0, "--api", api, "--lib", libFor(api), "--default-stream",
			"--launches", "5", "--kernel-us", "1000")
		if r.Launches != 5 || r.Syncs != 1 {
			t.Errorf("%s default stream: %d launches, %d syncs", api, r.Launches, r.Syncs)
		}
		checkTimeline(t, r, 5*1000*1000)
	}
}

func TestCopies(t *testing.T) {
	// 25 MB at 25 GB/s: 1 ms per copy, 2 copies per --copies.
	for _, api := range []string{"driver", "runtime"} {
		r := runDriver(t, []string{"CUDASTUB_COPY_GBPS=25"}, 0, "--api", api, "--lib", libFor(api),
			"--launches", "0", "--syncs", "0", "--allocs", "1", "--copies", "4", "--copy-bytes", "25000000")
		if r.Copies != 8 || r.CopyBytes != 8*25000000 {
			t.Errorf("%s: copies %d bytes %d", api, r.Copies, r.CopyBytes)
		}
		if api == "driver" && (r.Calls["cuMemcpyHtoD_v2"] != 4 || r.Calls["cuMemcpyDtoH_v2"] != 4) {
			t.Errorf("driver copy calls %v", r.Calls)
		}
		if api == "runtime" && r.Calls["cudaMemcpy"] != 8 {
			t.Errorf("runtime copy calls %v", r.Calls)
		}
		checkTimeline(t, r, 8*1000*1000)
	}
	// Async copies do not block; the synchronize waits for them.
	r := runDriver(t, []string{"CUDASTUB_COPY_GBPS=25"}, 0, "--lib", libFor("driver"),
		"--launches", "0", "--syncs", "1", "--copies", "2", "--copy-bytes", "25000000", "--async-copies")
	if r.Calls["cuMemcpyHtoDAsync_v2"] != 2 || r.Calls["cuMemcpyDtoHAsync_v2"] != 2 {
		t.Errorf("async copy calls %v", r.Calls)
	}
	checkTimeline(t, r, 4*1000*1000)
}

// Running out of CUDASTUB_MEM_BYTES fails an allocation that is not the magic
// size; the driver reports it as unexpected and exits 1.
func TestMemoryLimit(t *testing.T) {
	for _, api := range []string{"driver", "runtime"} {
		r := runDriver(t, []string{"CUDASTUB_MEM_BYTES=3145728"}, 1, "--api", api, "--lib", libFor(api),
			"--launches", "0", "--syncs", "0", "--allocs", "4", "--alloc-bytes", "1048576")
		if r.Allocs != 4 || r.AllocErrors != 1 || r.AllocErrorCode != 2 || r.Frees != 3 {
			t.Errorf("%s: allocs %d errors %d code %d frees %d", api, r.Allocs, r.AllocErrors, r.AllocErrorCode, r.Frees)
		}
	}
}

func TestRate(t *testing.T) {
	r := runDriver(t, nil, 0, "--lib", libFor("driver"), "--launches", "50", "--rate", "500", "--kernel-us", "0")
	// 50 launches at 500/s: the 50th starts 98 ms after the first.
	if r.ElapsedNS < 98e6 || r.LaunchesPerSec > 520 {
		t.Errorf("50 launches at 500/s took %v (%.0f/s)", time.Duration(r.ElapsedNS), r.LaunchesPerSec)
	}
}

func TestWaitStart(t *testing.T) {
	for _, how := range []string{"stdin", "signal"} {
		t.Run(how, func(t *testing.T) {
			cmd := exec.Command(filepath.Join(binDir, "cudastub-driver"), "--lib", libFor("driver"),
				"--launches", "3", "--wait-start", "--kernel-us", "100")
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stdout bytes.Buffer
			cmd.Stdout = &stdout
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			line, err := bufio.NewReader(stderr).ReadString('\n')
			if err != nil || !strings.Contains(line, fmt.Sprintf("ready pid=%d", cmd.Process.Pid)) {
				t.Fatalf("ready line %q, %v", line, err)
			}
			// The library is mapped before the calls begin.
			maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", cmd.Process.Pid))
			if err != nil || !bytes.Contains(maps, []byte("libcuda.so.1")) {
				t.Errorf("libcuda.so.1 not mapped while waiting (%v)", err)
			}
			time.Sleep(50 * time.Millisecond) // a window to see nothing happen in: no event to wait for
			if stdout.Len() != 0 {
				t.Fatalf("the driver ran before it was started: %s", stdout.String())
			}
			if how == "stdin" {
				_, err = stdin.Write([]byte{'\n'})
			} else {
				err = cmd.Process.Signal(syscall.SIGUSR1)
			}
			if err != nil {
				t.Fatal(err)
			}
			go io.Copy(io.Discard, stderr)
			if err := cmd.Wait(); err != nil {
				t.Fatalf("driver: %v", err)
			}
			if r := decode(t, stdout.Bytes()); r.Launches != 3 || r.PID != cmd.Process.Pid {
				t.Errorf("launches %d pid %d", r.Launches, r.PID)
			}
		})
	}
}

func TestLoop(t *testing.T) {
	cmd := exec.Command(filepath.Join(binDir, "cudastub-driver"), "--lib", libFor("driver"),
		"--loop", "--launches", "10", "--kernel-us", "50")
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the loop's run: rounds of 10 launches of 50 µs
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("driver after SIGTERM: %v", err)
	}
	r := decode(t, stdout.Bytes())
	if r.Rounds < 2 || r.Launches < 20 || r.Calls["cuLaunchKernel"] != r.Launches {
		t.Errorf("loop: %d rounds, %d launches, calls %v", r.Rounds, r.Launches, r.Calls)
	}

	r = runDriver(t, nil, 0, "--lib", libFor("driver"), "--loop", "--duration-ms", "100",
		"--launches", "100", "--syncs", "0", "--kernel-us", "0")
	if r.ElapsedNS < 100e6 || r.Launches < 100 {
		t.Errorf("--duration-ms 100: elapsed %v, %d launches", time.Duration(r.ElapsedNS), r.Launches)
	}
}

// Every API symbol is a function of its own, exported with default
// visibility, so that uprobes on two symbols never share an address.
func TestExportedSymbols(t *testing.T) {
	want := map[string][]string{
		"libcuda.so.1": {"cuInit", "cuDriverGetVersion", "cuDeviceGet", "cuDeviceGetCount",
			"cuCtxCreate_v2", "cuCtxDestroy_v2", "cuModuleLoad", "cuModuleGetFunction",
			"cuLaunchKernel", "cuLaunchKernelEx", "cuGraphLaunch", "cuMemcpyHtoD_v2",
			"cuMemcpyDtoH_v2", "cuMemcpyDtoD_v2", "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2",
			"cuMemcpyAsync", "cuMemcpy", "cuStreamCreate", "cuStreamSynchronize", "cuCtxSynchronize",
			"cuEventCreate", "cuEventRecord", "cuEventSynchronize", "cuMemAlloc_v2", "cuMemFree_v2",
			"cuMemAllocAsync", "cuGetErrorString", "cuGraphInstantiate", "cuGraphInstantiate_v2",
			"cuGraphInstantiateWithFlags", "cuGraphInstantiateWithParams", "cuGraphExecDestroy",
			"cuMemPoolCreate", "cuMemPoolDestroy", "cuMemAllocFromPoolAsync", "cuMemFreeAsync",
			"cuMemPoolTrimTo", "cuMemPoolSetAttribute", "cuMemPoolGetAttribute"},
		"libcudart.so.12": {"cudaLaunchKernel", "cudaMemcpy", "cudaMemcpyAsync",
			"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMalloc", "cudaFree",
			"cudaGraphLaunch", "cudaGetErrorString", "cudaGraphInstantiate",
			"cudaGraphInstantiateWithFlags", "cudaGraphInstantiateWithParams", "cudaGraphExecDestroy",
			"cudaMemPoolCreate", "cudaMemPoolDestroy", "cudaMallocFromPoolAsync", "cudaFreeAsync",
			"cudaMemPoolTrimTo", "cudaMemPoolSetAttribute", "cudaMemPoolGetAttribute"},
	}
	for lib, syms := range want {
		f, err := elf.Open(filepath.Join(binDir, lib))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		soname, err := f.DynString(elf.DT_SONAME)
		if err != nil || len(soname) != 1 || soname[0] != lib {
			t.Errorf("%s: SONAME %v (%v)", lib, soname, err)
		}
		dyn, err := f.DynamicSymbols()
		if err != nil {
			t.Fatal(err)
		}
		byName := map[string]elf.Symbol{}
		byAddr := map[uint64]string{}
		for _, s := range dyn {
			if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Section == elf.SHN_UNDEF {
				continue
			}
			byName[s.Name] = s
			if other, dup := byAddr[s.Value]; dup {
				t.Errorf("%s: %s and %s share address %#x", lib, other, s.Name, s.Value)
			}
			byAddr[s.Value] = s.Name
		}
		for _, name := range syms {
			s, ok := byName[name]
			if !ok {
				t.Errorf("%s does not export %s", lib, name)
				continue
			}
			if elf.ST_BIND(s.Info) != elf.STB_GLOBAL || elf.ST_VISIBILITY(s.Other) != elf.STV_DEFAULT || s.Size == 0 {
				t.Errorf("%s: %s bind %v visibility %v size %d", lib, name, elf.ST_BIND(s.Info), elf.ST_VISIBILITY(s.Other), s.Size)
			}
		}
		for name := range byName {
			if strings.HasPrefix(name, "stub_") {
				t.Errorf("%s leaks internal symbol %s", lib, name)
			}
		}
	}
}

// The simulated server calls the driver API from Go through purego with the
// real signatures, on stream 0 and with a NULL or looked-up function.
func TestPuregoDriverAPI(t *testing.T) {
	// A private copy: a library already loaded by an earlier run of this
	// test in the same process would already be initialized.
	lib := filepath.Join(t.TempDir(), "libcuda.so.1")
	b, err := os.ReadFile(libFor("driver"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lib, b, 0o755); err != nil {
		t.Fatal(err)
	}
	h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Fatal(err)
	}
	var (
		cuInit              func(flags uint32) int32
		cuDeviceGet         func(dev *int32, ordinal int32) int32
		cuCtxCreate         func(ctx *uintptr, flags uint32, dev int32) int32
		cuModuleLoadData    func(mod *uintptr, image *byte) int32
		cuModuleGetFunction func(f *uintptr, mod uintptr, name string) int32
		cuMemAlloc          func(p *uint64, bytes uint64) int32
		cuMemFree           func(p uint64) int32
		cuLaunchKernel      func(f uintptr, gx, gy, gz, bx, by, bz, shmem uint32, stream uintptr, params, extra uintptr) int32
		cuStreamSynchronize func(stream uintptr) int32
		cuMemcpyHtoD        func(dst uint64, src *byte, n uint64) int32
		cuMemcpyDtoH        func(dst *byte, src uint64, n uint64) int32
		cuGetErrorString    func(code int32, s **byte) int32
		setKernelUS         func(us float64)
		kernelUS            func() float64
	)
	purego.RegisterLibFunc(&cuInit, h, "cuInit")
	purego.RegisterLibFunc(&cuDeviceGet, h, "cuDeviceGet")
	purego.RegisterLibFunc(&cuCtxCreate, h, "cuCtxCreate_v2")
	purego.RegisterLibFunc(&cuModuleLoadData, h, "cuModuleLoadData")
	purego.RegisterLibFunc(&cuModuleGetFunction, h, "cuModuleGetFunction")
	purego.RegisterLibFunc(&cuMemAlloc, h, "cuMemAlloc_v2")
	purego.RegisterLibFunc(&cuMemFree, h, "cuMemFree_v2")
	purego.RegisterLibFunc(&cuLaunchKernel, h, "cuLaunchKernel")
	purego.RegisterLibFunc(&cuStreamSynchronize, h, "cuStreamSynchronize")
	purego.RegisterLibFunc(&cuMemcpyHtoD, h, "cuMemcpyHtoD_v2")
	purego.RegisterLibFunc(&cuMemcpyDtoH, h, "cuMemcpyDtoH_v2")
	purego.RegisterLibFunc(&cuGetErrorString, h, "cuGetErrorString")
	purego.RegisterLibFunc(&setKernelUS, h, "cudastub_set_kernel_us")
	purego.RegisterLibFunc(&kernelUS, h, "cudastub_kernel_us")

	var dev int32
	if rc := cuDeviceGet(&dev, 0); rc != 3 {
		t.Errorf("cuDeviceGet before cuInit = %d, want CUDA_ERROR_NOT_INITIALIZED (3)", rc)
	}
	must := func(what string, rc int32) {
		t.Helper()
		if rc != 0 {
			t.Fatalf("%s = %d", what, rc)
		}
	}
	must("cuInit", cuInit(0))
	must("cuDeviceGet", cuDeviceGet(&dev, 0))
	var ctx, mod, fn uintptr
	must("cuCtxCreate_v2", cuCtxCreate(&ctx, 0, dev))
	image := []byte("image\x00")
	must("cuModuleLoadData", cuModuleLoadData(&mod, &image[0]))
	must("cuModuleGetFunction", cuModuleGetFunction(&fn, mod, "sleep_3000us"))
	setKernelUS(2000)
	if got := kernelUS(); got != 2000 {
		t.Errorf("cudastub_kernel_us = %v after setting 2000", got)
	}

	var p uint64
	must("cuMemAlloc_v2", cuMemAlloc(&p, 4096))
	buf := make([]byte, 4096)
	must("cuMemcpyHtoD_v2", cuMemcpyHtoD(p, &buf[0], uint64(len(buf))))

	// Two 2 ms kernels with a NULL function and one 3 ms kernel by name, on
	// stream 0; the grid arguments are checked, so the stack arguments
	// (blockDimZ onwards) must arrive intact.
	start := time.Now()
	must("cuLaunchKernel NULL", cuLaunchKernel(0, 8, 1, 1, 128, 1, 1, 0, 0, 0, 0))
	must("cuLaunchKernel NULL", cuLaunchKernel(0, 8, 1, 1, 128, 1, 1, 0, 0, 0, 0))
	must("cuLaunchKernel sleep_3000us", cuLaunchKernel(fn, 8, 1, 1, 128, 1, 1, 0, 0, 0, 0))
	if rc := cuLaunchKernel(0, 8, 1, 1, 128, 1, 0, 0, 0, 0, 0); rc != 1 {
		t.Errorf("cuLaunchKernel with blockDimZ 0 = %d, want CUDA_ERROR_INVALID_VALUE (1)", rc)
	}
	must("cuStreamSynchronize", cuStreamSynchronize(0))
	// The stream's timeline began at the first launch: the synchronize
	// cannot return before its 7 ms of kernels are done.
	if d := time.Since(start); d < 7*time.Millisecond {
		t.Errorf("cuStreamSynchronize(0) returned %v after the first launch, before the 7 ms of kernels", d)
	}
	must("cuMemcpyDtoH_v2", cuMemcpyDtoH(&buf[0], p, uint64(len(buf))))
	must("cuMemFree_v2", cuMemFree(p))
	if rc := cuMemFree(p); rc != 1 {
		t.Errorf("second cuMemFree_v2 = %d, want CUDA_ERROR_INVALID_VALUE (1)", rc)
	}
	if rc := cuMemAlloc(&p, 0xDEADBEEF); rc != 2 {
		t.Errorf("cuMemAlloc_v2(0xDEADBEEF) = %d, want CUDA_ERROR_OUT_OF_MEMORY (2)", rc)
	}
	var s *byte
	must("cuGetErrorString", cuGetErrorString(2, &s))
	if got := cString(s); got != "out of memory" {
		t.Errorf("cuGetErrorString(2) = %q", got)
	}
}

func cString(p *byte) string {
	if p == nil {
		return ""
	}
	var b []byte
	for ptr := p; *ptr != 0; ptr = (*byte)(unsafeAdd(ptr, 1)) {
		b = append(b, *ptr)
	}
	return string(b)
}

// --graphs N --launches M --exhaust K: N instantiations (each instantiate
// call in turn), M graph launches over them, N exec destroys, K pool
// exhaustions (each one out-of-memory return and one trim), exactly, in
// the counts and in the per-symbol calls.
func TestGraphsAndPools(t *testing.T) {
	names := map[string][]string{
		"driver":  {"cuGraphInstantiateWithFlags", "cuGraphInstantiateWithParams", "cuGraphInstantiate", "cuGraphLaunch", "cuGraphExecDestroy", "cuMemAllocFromPoolAsync", "cuMemPoolTrimTo", "cuMemPoolSetAttribute", "cuMemFreeAsync"},
		"runtime": {"cudaGraphInstantiate", "cudaGraphInstantiateWithFlags", "cudaGraphInstantiateWithParams", "cudaGraphLaunch", "cudaGraphExecDestroy", "cudaMallocFromPoolAsync", "cudaMemPoolTrimTo", "cudaMemPoolSetAttribute", "cudaFreeAsync"},
	}
	for api, n := range names {
		t.Run(api, func(t *testing.T) {
			// 2 rounds of: 5 instantiations (+1 failing), 40 launches, 3
			// exhaustions of a 4 MiB pool by 1 MiB blocks.
			r := runDriver(t, nil, 0, "--api", api, "--lib", libFor(api), "--loop", "--duration-ms", "1",
				"--graphs", "5", "--fail-instantiate", "--launches", "40", "--syncs", "2", "--kernel-us", "10",
				"--exhaust", "3", "--pool-bytes", "4194304", "--alloc-bytes", "1048576")
			rounds := r.Rounds
			if rounds < 1 {
				t.Fatalf("%d rounds", rounds)
			}
			if r.Instantiations != 5*rounds || r.InstantiateErrors != rounds || r.GraphLaunches != 40*rounds || r.ExecDestroys != 5*rounds {
				t.Errorf("graphs: %d instantiations, %d failed, %d launches, %d destroys in %d rounds", r.Instantiations, r.InstantiateErrors, r.GraphLaunches, r.ExecDestroys, rounds)
			}
			// 4 blocks fit, the fifth fails: 5 allocations per exhaustion.
			if r.Exhaustions != 3*rounds || r.PoolOOM != 3*rounds || r.PoolAllocs != 15*rounds || r.PoolTrims != 3*rounds || r.PoolOOMFragmented != 0 {
				t.Errorf("pool: %d exhaustions, %d allocations, %d out of memory (%d fragmented), %d trims in %d rounds", r.Exhaustions, r.PoolAllocs, r.PoolOOM, r.PoolOOMFragmented, r.PoolTrims, rounds)
			}
			if r.PoolAttributeSets != 1 || r.PoolReservedPeak != 4<<20 || r.PoolReservedTrimmed != 1<<20 {
				t.Errorf("pool: %d attribute sets, reserved peak %d, %d after the trim", r.PoolAttributeSets, r.PoolReservedPeak, r.PoolReservedTrimmed)
			}
			want := map[string]uint64{
				n[0]: 2*rounds + rounds, n[1]: 2 * rounds, n[2]: rounds, n[3]: 40 * rounds, n[4]: 5 * rounds,
				n[5]: 15 * rounds, n[6]: 3 * rounds, n[7]: 1, n[8]: 12 * rounds,
			}
			for name, w := range want {
				if r.Calls[name] != w {
					t.Errorf("%s called %d times, want %d", name, r.Calls[name], w)
				}
			}
			if r.Errors[n[5]] != 3*rounds || r.Errors[n[0]] != rounds || len(r.Errors) != 2 {
				t.Errorf("errors %v", r.Errors)
			}
		})
	}
}

// With CUDASTUB_POOL_FRAGMENTATION=1 a pool places blocks first fit: with
// every other block freed, two blocks' worth fails although the free total
// holds it; without, it succeeds.
func TestPoolFragmentation(t *testing.T) {
	for _, api := range []string{"driver", "runtime"} {
		for _, frag := range []int{0, 1} {
			r := runDriver(t, []string{fmt.Sprintf("CUDASTUB_POOL_FRAGMENTATION=%d", frag)}, 0, "--api", api, "--lib", libFor(api),
				"--launches", "0", "--syncs", "0", "--exhaust", "2", "--fragment", "--pool-bytes", "8388608", "--alloc-bytes", "1048576")
			// Per exhaustion: 8 blocks and one refused, then the probe.
			if r.PoolFragmentation != frag || r.PoolAllocs != 20 || r.PoolOOM != uint64(2+2*frag) || r.PoolOOMFragmented != uint64(2*frag) {
				t.Errorf("%s, fragmentation %d: %d allocations, %d out of memory, %d with the free total enough (reported fragmentation %d)",
					api, frag, r.PoolAllocs, r.PoolOOM, r.PoolOOMFragmented, r.PoolFragmentation)
			}
		}
	}
}
