package job

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bpfbench/bpfbench/result"

	"github.com/bpfbench/bpfbench/exporter/report"
	"github.com/bpfbench/bpfbench/internal/manifest"
	"github.com/bpfbench/bpfbench/internal/owner"
	"github.com/bpfbench/bpfbench/internal/spawn"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/loadgen/dataset"
	"github.com/bpfbench/bpfbench/perturb"
	"github.com/bpfbench/bpfbench/pipeline"
	"github.com/bpfbench/bpfbench/readiness"
	"github.com/bpfbench/bpfbench/session"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The demo's settings: the simulated server's GPU step and its slowed-down
// one, how long its slow-reading clients stop reading, and the request rate
// of a phased job (demo, validate) when none is given.
const (
	DemoKernelUS     = 2000
	DemoSlowKernelUS = 20000
	DemoSlowPause    = 4 * time.Second
	DefaultPhaseRate = 4.0
)

// DemoPhases are the demo's phases, in order.
var DemoPhases = []string{"baseline", "cpu contention", "disk contention", "gpu slowdown", "slow-reading client"}

// DemoSettle is how long the demo lets the server settle after each
// injection before the next phase begins (a third of a phase, at most
// 3 s): a phase that slowed the server leaves a queue of requests, whose
// bigger batches would otherwise be the next phase's server_compute. The
// settling time belongs to no phase.
func DemoSettle(phase time.Duration) time.Duration { return min(phase/3, 3*time.Second) }

// settleOutside ends the current phase and waits d outside any phase (the
// server settling after an injection); false when ctx ends first.
func settleOutside(ctx context.Context, marks *pipeline.PhaseMarks, d time.Duration) bool {
	marks.End()
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// demoSettles counts the settling periods: after the cpu, disk and gpu
// phases.
const demoSettles = 3

// DemoRequests is the number of requests the demo sends at rate over
// phases of length phase, settling included.
func DemoRequests(rate float64, phase time.Duration) int {
	total := time.Duration(len(DemoPhases))*phase + demoSettles*DemoSettle(phase)
	return int(math.Ceil(rate * total.Seconds()))
}

// DemoSlowReaders are the requests of the last phase that read slowly: a
// quarter and half way into it, at rate over phases of length phase.
func DemoSlowReaders(rate float64, phase time.Duration) []int {
	start := time.Duration(len(DemoPhases)-1)*phase + demoSettles*DemoSettle(phase)
	at := func(d time.Duration) int { return int(math.Floor(rate*(start+d).Seconds() + 1e-6)) }
	return []int{at(phase / 4), at(phase / 2)}
}

// PhaseRate is the rate of a phased job: rate, or DefaultPhaseRate when it
// is not a finite positive number (the load options' default, inf, sends
// everything at once, which a phased scenario cannot split).
func PhaseRate(rate float64) float64 {
	if rate <= 0 || math.IsInf(rate, 0) || math.IsNaN(rate) {
		return DefaultPhaseRate
	}
	return rate
}

// DemoConfig configures the demo: the whole job on the simulated server.
type DemoConfig struct {
	// Load is the base load (endpoint, model, timeouts, headers, output
	// length, percentiles, ...); the demo sets its target, rate, arrivals
	// and requests.
	Load loadgen.Config
	// Sim is the running simulated server (StartSim).
	Sim *Sim
	// ServerCPUs are the CPUs the server runs on (nil: not pinned); the
	// cpu phase's busy threads run there, every other injection and
	// bpfbench elsewhere.
	ServerCPUs []int
	// OutDir receives result.json, trace.json and report.html.
	OutDir string
	// Phase is the length of each phase; Rate the fixed request rate.
	Phase time.Duration
	Rate  float64
	// Sections, Readiness and Logger are those of RunConfig.
	Sections  []session.SectionFactory
	Readiness func() []readiness.Check
	Logger    *slog.Logger
	// Manifest is RunConfig's.
	Manifest manifest.Options
}

// DemoPerPhase is the number of requests in each phase.
func DemoPerPhase(rate float64, phase time.Duration) int { return int(rate * phase.Seconds()) }

// CheckDemo says what is wrong with a demo's phase length and rate.
func CheckDemo(rate float64, phase time.Duration) error {
	if phase < 2*time.Second || rate <= 0 {
		return errors.New("--phase must be at least 2s and --rate positive")
	}
	if n := DemoPerPhase(rate, phase); n < 4 {
		return fmt.Errorf("%v phases at %g req/s make %d requests a phase; give at least 4 (a longer --phase or a higher --rate)", phase, rate, n)
	}
	return nil
}

// DemoCauses are the causes each phase of the demo injects, the critical
// path's names (the baseline injects none).
var DemoCauses = map[string]string{
	"cpu contention": "cpu_runqueue", "disk contention": "io_block",
	"gpu slowdown": "gpu_sync", "slow-reading client": "net_backpressure",
}

// DemoResult is a demo's run and what each phase injected.
type DemoResult struct {
	*RunResult
	// Injected says, per phase after the baseline, what its injection
	// achieved and what the critical path named.
	Injected []string
	// Named counts the phases whose critical-path top cause is the one
	// injected; Weak those whose injection achieved too little to judge.
	Named, Weak int
}

// The disk phase's sizing: its reads are 1 MiB with O_DIRECT; the number
// in flight is chosen so that a read waits at least demoIOWait behind
// them (the decode step's order of magnitude), from a calibration of the
// disk before the run, between demoIOMinDepth and demoIOMaxDepth.
const (
	demoIOBlock    = 1 << 20
	demoIOMinDepth = 8
	demoIOMaxDepth = 64
	demoIOWait     = 10 * time.Millisecond
	demoIOCalib    = time.Second
)

// calibrateIO measures the disk under path before a run: how long a 1 MiB
// O_DIRECT read takes with demoIOMinDepth in flight, over demoIOCalib;
// it returns the disk injection's depth (demoIODepth) and a note on it.
func calibrateIO(ctx context.Context, path string) (int, string) {
	cctx, cancel := context.WithTimeout(ctx, demoIOCalib)
	cal, err := perturb.IO{Path: path, BlockSize: demoIOBlock, Depth: demoIOMinDepth}.RunProcess(cctx)
	cancel()
	switch {
	case err != nil:
		return demoIOMinDepth, fmt.Sprintf("the disk's calibration failed (%v), so %d in flight", err, demoIOMinDepth)
	case cal.Ops == 0:
		return demoIOMinDepth, fmt.Sprintf("the disk's calibration read nothing, so %d in flight", demoIOMinDepth)
	}
	d := demoIODepth(time.Duration(cal.MeanLatency * 1e9))
	return d, fmt.Sprintf("the disk took %.1f ms a read with %d in flight before the run, so %d in flight", cal.MeanLatency*1e3, demoIOMinDepth, d)
}

// demoIODepth is the disk phase's reads in flight for a disk whose reads
// took lat each with demoIOMinDepth in flight.
func demoIODepth(lat time.Duration) int {
	if lat <= 0 {
		return demoIOMinDepth
	}
	d := int(math.Ceil(float64(demoIOMinDepth) * float64(demoIOWait) / float64(lat)))
	return min(max(d, demoIOMinDepth), demoIOMaxDepth)
}

// Demo drives the simulated server through its phases (a baseline, CPU
// contention, disk contention, a GPU slowdown, a slow-reading client)
// while the collectors follow it, and returns the run with what each phase
// injected, achieved and was named.
func Demo(ctx context.Context, cfg DemoConfig) (*DemoResult, error) {
	if cfg.Sim == nil {
		return nil, errors.New("the demo needs a running simulated server")
	}
	cfg.Rate = PhaseRate(cfg.Rate)
	if err := CheckDemo(cfg.Rate, cfg.Phase); err != nil {
		return nil, err
	}
	n := DemoRequests(cfg.Rate, cfg.Phase)
	outLen := cfg.Load.Scenario.Dataset.OutputLen
	if outLen <= 0 {
		outLen = 64
	}
	reqs, err := dataset.Load(dataset.Config{Name: dataset.Random, InputLen: 64, OutputLen: outLen}, n, 1)
	if err != nil {
		return nil, err
	}
	slow := DemoSlowReaders(cfg.Rate, cfg.Phase)
	for i := range reqs {
		reqs[i].OffsetNs = -1
	}
	for _, i := range slow {
		reqs[i].OutputLen = max(200, 3*outLen)
		reqs[i].SlowRead = DemoSlowPause
	}
	lc := cfg.Load
	lc.Target.URL = cfg.Sim.URL
	lc.Scenario.Rate = cfg.Rate
	lc.Scenario.Constant = true
	lc.Scenario.Requests = reqs
	lc.Scenario.NumRequests = n
	lc.Scenario.Duration = 0
	lc.Target.IgnoreEOS = true
	if lc.Target.Timeout == 0 || lc.Target.Timeout > 10*time.Minute {
		lc.Target.Timeout = 2 * time.Minute
	}

	depth, calNote := calibrateIO(ctx, cfg.Sim.IOFile)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}

	var injErr error
	sc := &scenario{phase: cfg.Phase, settle: DemoSettle(cfg.Phase), baseline: DemoPhases[0],
		injections: demoInjections(cfg, depth, calNote, &injErr)}
	res, err := Run(ctx, RunConfig{Load: lc, Pid: cfg.Sim.Pid(), OutDir: cfg.OutDir, Phases: sc.run,
		Sections: cfg.Sections, Readiness: cfg.Readiness, Logger: cfg.Logger, Manifest: cfg.Manifest})
	if res == nil {
		return nil, err
	}
	achieved := append([]string{""}, sc.achieved...)
	achieved[4] = slowReaders(res, slow)
	out := &DemoResult{RunResult: res}
	if res.Doc != nil {
		out.Named, out.Weak = judgePhases(res.Doc, achieved, DemoCauses)
		res.Doc.Diagnosis = report.Diagnose(res.Doc)
		if _, werr := writeRunDir(cfg.OutDir, res.Doc); werr != nil && err == nil {
			err = werr
		}
		for _, p := range res.Doc.Phases[1:] {
			out.Injected = append(out.Injected, p.Name+": "+p.Injection+"; "+p.Verdict)
		}
	}
	if injErr == nil {
		injErr = sc.injErr
	}
	if err == nil && injErr != nil {
		err = fmt.Errorf("an injection failed: %w", injErr)
	}
	return out, err
}

// demoInjections are the demo's phases after the baseline, as
// validate's injections: CPU contention on the server's CPUs, O_DIRECT
// reads of depth on the simulator's file, its GPU kernel slowed, and the
// slow-reading clients (DemoSlowReaders, set on the requests). A failed
// injection is in *injErr.
func demoInjections(cfg DemoConfig, depth int, calNote string, injErr *error) []Injection {
	while := func(fn func(context.Context) string) func(context.Context) (func() string, error) {
		return func(ctx context.Context) (func() string, error) { return during(ctx, fn), nil }
	}
	cpu := func(c context.Context) string {
		p := perturb.CPU{CPUs: cfg.ServerCPUs}
		if err := p.Validate(); err != nil {
			*injErr = err
			return "failed: " + err.Error()
		}
		p.Threads = 2 * len(p.CPUs)
		r, err := p.RunProcess(c)
		if err != nil {
			*injErr = err
			return "failed: " + err.Error()
		}
		return fmt.Sprintf("%d busy threads on the server's CPUs %v burnt %.1f CPU-s (%.0f%% of a CPU each)", r.Threads, r.CPUs, r.CPUSeconds, r.Share*100)
	}
	disk := func(c context.Context) string {
		r, err := perturb.IO{Path: cfg.Sim.IOFile, BlockSize: demoIOBlock, Depth: depth}.RunProcess(c)
		if err != nil {
			*injErr = err
			return "failed: " + err.Error()
		}
		return fmt.Sprintf("%.0f O_DIRECT reads/s of 1 MiB, %d in flight, %.1f ms each (%s)", r.IOPS, depth, r.MeanLatency*1e3, calNote)
	}
	gpu := func(context.Context) (func() string, error) {
		if err := cfg.Sim.SetGPUKernel(DemoSlowKernelUS); err != nil {
			*injErr = err
		}
		return func() string {
			_ = cfg.Sim.SetGPUKernel(DemoKernelUS)
			return fmt.Sprintf("the CUDA stub's step kernel from %d to %d µs", DemoKernelUS, DemoSlowKernelUS)
		}, nil
	}
	return []Injection{
		{Name: DemoPhases[1], Cause: DemoCauses[DemoPhases[1]], Start: while(cpu)},
		{Name: DemoPhases[2], Cause: DemoCauses[DemoPhases[2]], Start: while(disk)},
		{Name: DemoPhases[3], Cause: DemoCauses[DemoPhases[3]], Start: gpu},
		{Name: DemoPhases[4], Cause: DemoCauses[DemoPhases[4]], SlowRead: DemoSlowPause},
	}
}

// slowReaders says how long the slow-reading requests actually stopped
// reading.
func slowReaders(res *RunResult, slow []int) string {
	var parts []string
	for _, i := range slow {
		for k := range res.Load.Records {
			r := &res.Load.Records[k]
			if r.Index != i {
				continue
			}
			if r.PausedNs == nil {
				parts = append(parts, fmt.Sprintf("request %d never paused", i))
			} else {
				parts = append(parts, fmt.Sprintf("request %d stopped reading for %.2f s", i, float64(r.PausedNs[1]-r.PausedNs[0])/1e9))
			}
		}
	}
	if len(parts) == 0 {
		return "the slow-reading requests did not run"
	}
	return strings.Join(parts, ", ") + " after its first token"
}

// judgePhases sets each phase's injection (achieved[i]), expected cause
// and verdict: the critical path's top cause of what the phase added to
// its slowest 10% of gaps, with its share, or "injection too weak" when
// the phase added less than MinAddedMs of the normal gap. It returns the
// phases named correctly and those too weak to judge.
func judgePhases(doc *result.Document, achieved []string, want map[string]string) (named, weak int) {
	cp := doc.CriticalPath
	if cp == nil {
		return 0, 0
	}
	minAdded := MinAddedMs(sumMs(cp.NormalITLMs))
	for i := range doc.Phases {
		p := &doc.Phases[i]
		if i < len(achieved) {
			p.Injection = achieved[i]
		}
		p.Expected = want[p.Name]
		if i == 0 || p.Expected == "" || i >= len(cp.Phases) || cp.Phases[i].Name != p.Name {
			continue
		}
		c := cp.Phases[i]
		switch {
		case c.TailAddedMs < minAdded:
			p.Weak = true
			weak++
			p.Verdict = fmt.Sprintf("injection too weak: its slowest gaps took %.1f ms more than the baseline's (under %.1f ms), so no cause is named", c.TailAddedMs, minAdded)
		case c.TailTop == p.Expected:
			named++
			p.Verdict = fmt.Sprintf("the critical path names %s, %.0f%% of the %.1f ms its slowest gaps added", c.TailTop, 100*c.TailAddedShares[c.TailTop], c.TailAddedMs)
		default:
			p.Verdict = fmt.Sprintf("the critical path names %s, %.0f%% of the %.1f ms its slowest gaps added (%s injected: %.0f%%)", c.TailTop, 100*c.TailAddedShares[c.TailTop], c.TailAddedMs, p.Expected, 100*c.TailAddedShares[p.Expected])
		}
		if c.TailStealMs >= 0.05 {
			p.Verdict += fmt.Sprintf("; the hypervisor's steal, %.1f ms more, is left out", c.TailStealMs)
		}
	}
	return named, weak
}

// Sim is the simulated server (llmsim with the CUDA stub) running as a
// child process, for the demo and `validate --sim`.
type Sim struct {
	URL string
	// Control is the CUDA stub's control file (its kernel time in µs);
	// StepControl llmsim's (its decode step's CPU work in µs); IOFile the
	// KV offload file the server reads with O_DIRECT.
	Control, StepControl, IOFile string
	// Net is the network namespace the server serves in (SimConfig.Netns),
	// nil when it serves on 127.0.0.1.
	Net *SimNet
	cmd *exec.Cmd
	log *os.File
}

// SimConfig configures StartSim.
type SimConfig struct {
	// Dir receives llmsim.log, the KV offload file and the control file.
	Dir string
	// CPUs, when set, restricts the server to these CPUs.
	CPUs []int
	// Netns puts the server in a network namespace of its own, behind a
	// veth pair, so that its egress towards the client can be shaped
	// without touching any interface of the host (the net row of
	// validate).
	Netns bool
	// Processes is llmsim's --processes: 2 (the default, 0) runs a
	// frontend and an engine child process over a unix socket, as vLLM V1
	// does, so that the demo and validation cross a process boundary; 1
	// runs one process.
	Processes int
}

// siblingBinary finds a file built next to this executable (make build
// puts bpfbench, llmsim and the CUDA stub in bin/), or on PATH.
func siblingBinary(name string) (string, error) {
	exe, err := os.Executable()
	if err == nil {
		p := filepath.Join(filepath.Dir(exe), name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s not found next to bpfbench: run make build first", name)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// writeDataFile writes size bytes of real data (not a sparse file: holes
// read without any IO) for O_DIRECT reads.
func writeDataFile(path string, size int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i*7 + 1)
	}
	for w := 0; w < size; w += len(buf) {
		if _, err := f.Write(buf); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// StartSim starts llmsim (found next to this executable) with the CUDA
// stub, waits until it is healthy and returns it; Close stops it.
func StartSim(ctx context.Context, cfg SimConfig) (*Sim, error) {
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot create --out %s: %w", cfg.Dir, err)
	}
	llmsim, err := siblingBinary("llmsim")
	if err != nil {
		return nil, err
	}
	libcuda, err := siblingBinary("libcuda.so.1")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	host := "127.0.0.1"
	var sn *SimNet
	if cfg.Netns {
		if sn, err = newSimNet(perturb.DefaultStateDir); err != nil {
			return nil, err
		}
		host = sn.Addr.String()
	}
	logf, err := os.Create(filepath.Join(cfg.Dir, "llmsim.log"))
	if err != nil {
		if sn != nil {
			sn.Close()
		}
		return nil, fmt.Errorf("cannot write to --out %s: %w", cfg.Dir, err)
	}
	s := &Sim{
		Net:         sn,
		URL:         fmt.Sprintf("http://%s:%d", host, port),
		Control:     filepath.Join(cfg.Dir, "gpu-kernel-us"),
		StepControl: filepath.Join(cfg.Dir, "step-us"),
		IOFile:      filepath.Join(cfg.Dir, "kv-offload.img"),
		log:         logf,
	}
	if err := s.writeFiles(); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.start(ctx, cfg, llmsim, libcuda, fmt.Sprintf("%s:%d", host, port)); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.waitHealthy(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// writeFiles writes the KV offload file the server reads and the control
// files of its kernel time and decode step, before it starts.
func (s *Sim) writeFiles() error {
	_ = owner.Note(perturb.DefaultStateDir, owner.KindFile, s.IOFile) // removed with a dead owner's leftovers
	if err := writeDataFile(s.IOFile, 128<<20); err != nil {
		return fmt.Errorf("writing the KV offload file: %w", err)
	}
	if err := s.SetGPUKernel(DemoKernelUS); err != nil {
		return err
	}
	return s.SetStep(DemoStepUS)
}

// start spawns llmsim serving on addr with the CUDA stub libcuda, on
// cfg's CPUs and in the server's network namespace when it has one.
func (s *Sim) start(ctx context.Context, cfg SimConfig, llmsim, libcuda, addr string) error {
	s.cmd = exec.CommandContext(ctx, llmsim, "--addr", addr,
		"--work", "cpu", "--itl", strconv.Itoa(DemoStepUS)+"us", "--step-control", s.StepControl, "--max-num-seqs", "32", "--jitter", "0.05",
		"--io-file", s.IOFile, "--io-bytes", "262144", "--cuda-lib", libcuda, "--processes", strconv.Itoa(cmp.Or(cfg.Processes, 2)))
	s.cmd.Env = append(os.Environ(), "CUDASTUB_KERNEL_US="+strconv.Itoa(DemoKernelUS), "CUDASTUB_CONTROL_FILE="+s.Control)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	// The server dies with bpfbench even when bpfbench is killed, so that
	// nothing holds the namespace once its name is gone.
	opt := spawn.Options{Signal: syscall.SIGKILL, CPUs: cfg.CPUs}
	if s.Net != nil {
		opt.Netns = int(s.Net.ns)
	}
	if err := spawn.Start(s.cmd, opt); err != nil {
		return fmt.Errorf("starting llmsim: %w", err)
	}
	return nil
}

// waitHealthy polls the server's /health until it answers OK, for
// simHealthWait at most.
func (s *Sim) waitHealthy() error {
	// Up in well under a second here; a slow host (an emulated CPU, a
	// loaded node) takes longer, and only a hung one the whole minute.
	deadline := time.Now().Add(simHealthWait)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(s.URL + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("llmsim did not become healthy within %v (see llmsim.log in the run directory)", simHealthWait)
}

// simHealthWait is how long StartSim waits for the simulator's /health.
const simHealthWait = time.Minute

// Pid is the server's process id.
func (s *Sim) Pid() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// DemoStepUS is the simulated server's decode step: its CPU work, µs.
const DemoStepUS = 15000

// SetStep changes the decode step's CPU work in the running server.
func (s *Sim) SetStep(us int) error {
	return os.WriteFile(s.StepControl, []byte(strconv.Itoa(us)+"\n"), 0o644)
}

// SetGPUKernel changes the simulated GPU's step time in the running server.
func (s *Sim) SetGPUKernel(us int) error {
	return os.WriteFile(s.Control, []byte(strconv.Itoa(us)+"\n"), 0o644)
}

// Close stops the server, removes its KV offload file and its network
// namespace with the veth pair.
func (s *Sim) Close() error {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
	if os.Remove(s.IOFile) == nil {
		owner.Forget(perturb.DefaultStateDir, owner.KindFile, s.IOFile)
	}
	err := s.log.Close()
	if s.Net != nil {
		err = errors.Join(s.Net.Close(), err)
	}
	return err
}

var _ io.Closer = (*Sim)(nil)

// SimNet is the network namespace the simulated server serves in: a veth
// pair joins it to the host, HostAddr (10.200.X.1/30) on HostIface in the
// current namespace and Addr (10.200.X.2/30) on Iface inside Name. Its
// state file in the state directory records it first, so that a run
// that dies before Close is cleaned up by the next StartSim
// (sweepSimNets).
type SimNet struct {
	Name             string
	Iface, HostIface string
	Addr, HostAddr   netip.Addr
	ns               netns.NsHandle
	state            string
	once             sync.Once
	closeErr         error
}

// simNetState is a SimNet's state file.
type simNetState struct {
	Netns     string `json:"netns"`
	Iface     string `json:"iface"`
	HostIface string `json:"host_iface"`
	owner.Owner
	Started time.Time `json:"started"`
}

const simNetPrefix = "simnet-"

// newSimNet sweeps what dead runs left, then creates the namespace and the
// veth pair on the first 10.200.X.0/30 that no interface of the host uses.
func newSimNet(stateDir string) (*SimNet, error) {
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the state directory %s: %w", stateDir, err)
	}
	if _, err := SweepLeftovers(stateDir); err != nil {
		slog.Warn("removing what a dead run left", "component", "job", "err", err)
	}
	used := map[byte]bool{}
	if addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4); err == nil {
		for _, a := range addrs {
			if ip := a.IP.To4(); ip != nil && ip[0] == 10 && ip[1] == 200 {
				used[ip[2]] = true
			}
		}
	}
	start := os.Getpid() % 250
	for i := 0; i < 250; i++ {
		x := byte((start + i) % 250)
		if used[x] {
			continue
		}
		sn, err := createSimNet(stateDir, x)
		if errors.Is(err, unix.EEXIST) {
			continue // another run took it meanwhile
		}
		return sn, err
	}
	return nil, errors.New("no free 10.200.X.0/30 subnet for the server's network namespace")
}

func createSimNet(stateDir string, x byte) (*SimNet, error) {
	sn := &SimNet{
		Name:      fmt.Sprintf("bpfbench-sim-%d", x),
		Iface:     fmt.Sprintf("bbsim%dn", x),
		HostIface: fmt.Sprintf("bbsim%dh", x),
		Addr:      netip.AddrFrom4([4]byte{10, 200, x, 2}),
		HostAddr:  netip.AddrFrom4([4]byte{10, 200, x, 1}),
		ns:        -1,
		state:     filepath.Join(stateDir, fmt.Sprintf("%sbpfbench-sim-%d.json", simNetPrefix, x)),
	}
	if _, err := os.Stat(filepath.Join("/run/netns", sn.Name)); err == nil {
		return nil, unix.EEXIST
	}
	if _, err := netlink.LinkByName(sn.HostIface); err == nil {
		return nil, unix.EEXIST
	}
	f, err := os.OpenFile(sn.state, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, os.ErrExist) {
		return nil, unix.EEXIST
	}
	if err != nil {
		return nil, fmt.Errorf("saving the state of the server's network namespace: %w", err)
	}
	b, _ := json.MarshalIndent(simNetState{Netns: sn.Name, Iface: sn.Iface, HostIface: sn.HostIface, Owner: owner.Self(), Started: time.Now()}, "", "  ")
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(sn.state)
		return nil, fmt.Errorf("saving the state of the server's network namespace: %w", err)
	}
	if err := owner.Recorded(stateDir); err != nil {
		slog.Warn("no reaper for the server's network namespace: if this process is killed, the next bpfbench removes it", "component", "job", "err", err)
	}
	if err := sn.create(); err != nil {
		sn.Close()
		return nil, err
	}
	return sn, nil
}

// create makes the namespace, the veth pair and the addresses.
func (sn *SimNet) create() error {
	errc := make(chan error, 1)
	go func() {
		// NewNamed moves the calling thread into the new namespace: put it
		// back, or let the thread end with this goroutine.
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("reading this thread's network namespace: %w", err)
			return
		}
		defer orig.Close()
		ns, err := netns.NewNamed(sn.Name)
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		if err != nil {
			errc <- fmt.Errorf("creating network namespace %s: %w", sn.Name, err)
			return
		}
		sn.ns = ns
		errc <- nil
	}()
	if err := <-errc; err != nil {
		return err
	}
	la := netlink.NewLinkAttrs()
	la.Name = sn.HostIface
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: sn.Iface, PeerNamespace: netlink.NsFd(int(sn.ns))}); err != nil {
		return fmt.Errorf("adding veth pair %s/%s: %w", sn.HostIface, sn.Iface, err)
	}
	hl, err := netlink.LinkByName(sn.HostIface)
	if err != nil {
		return fmt.Errorf("looking up %s: %w", sn.HostIface, err)
	}
	if err := netlink.AddrAdd(hl, &netlink.Addr{IPNet: prefix30(sn.HostAddr)}); err != nil {
		return fmt.Errorf("adding %s/30 to %s: %w", sn.HostAddr, sn.HostIface, err)
	}
	if err := netlink.LinkSetUp(hl); err != nil {
		return fmt.Errorf("setting %s up: %w", sn.HostIface, err)
	}
	h, err := netlink.NewHandleAt(sn.ns)
	if err != nil {
		return fmt.Errorf("opening netlink in network namespace %s: %w", sn.Name, err)
	}
	defer h.Close()
	for _, name := range []string{"lo", sn.Iface} {
		l, err := h.LinkByName(name)
		if err != nil {
			return fmt.Errorf("looking up %s in network namespace %s: %w", name, sn.Name, err)
		}
		if name == sn.Iface {
			if err := h.AddrAdd(l, &netlink.Addr{IPNet: prefix30(sn.Addr)}); err != nil {
				return fmt.Errorf("adding %s/30 to %s in network namespace %s: %w", sn.Addr, name, sn.Name, err)
			}
		}
		if err := h.LinkSetUp(l); err != nil {
			return fmt.Errorf("setting %s up in network namespace %s: %w", name, sn.Name, err)
		}
	}
	return nil
}

func prefix30(a netip.Addr) *net.IPNet {
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(30, 32)}
}

// Close removes a shaping of the server's interface that is left, the
// veth pair, the namespace and the state file; the server must have
// exited. Safe to call more than once.
func (sn *SimNet) Close() error {
	sn.once.Do(func() { sn.closeErr = removeSimNet(sn.state, sn.Name, sn.Iface, sn.HostIface) })
	if sn.ns.IsOpen() {
		sn.ns.Close()
		sn.ns = -1
	}
	return sn.closeErr
}

func removeSimNet(state, name, iface, hostIface string) error {
	var errs []error
	// A tbf a dead run left on the server's side: its state file goes,
	// the qdisc goes with the interface.
	if _, err := os.Stat(filepath.Join(filepath.Dir(state), fmt.Sprintf("tbf-%s-%s.json", name, iface))); err == nil {
		if _, err := perturb.Restore(filepath.Dir(state), name, iface); err != nil {
			errs = append(errs, err)
		}
	}
	if l, err := netlink.LinkByName(hostIface); err == nil {
		if err := netlink.LinkDel(l); err != nil {
			errs = append(errs, fmt.Errorf("removing veth %s: %w", hostIface, err))
		}
	}
	if _, err := os.Stat(filepath.Join("/run/netns", name)); err == nil {
		if err := netns.DeleteNamed(name); err != nil {
			errs = append(errs, fmt.Errorf("removing network namespace %s: %w", name, err))
		}
	}
	if len(errs) == 0 {
		if err := os.Remove(state); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
