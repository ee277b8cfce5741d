// Package validate is the job of `bpfbench validate`: a run (job/run) with a
// baseline phase, then each known injection in its own phase, and the cause
// the critical path named for each; its phased scenario is the demo's too.
package validate

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bpfbench/bpfbench/job/run"
	"github.com/bpfbench/bpfbench/result"

	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/correlate/critpath"
	"github.com/bpfbench/bpfbench/internal/atomicfile"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/loadgen/dataset"
	"github.com/bpfbench/bpfbench/loadgen/transport"
	"github.com/bpfbench/bpfbench/perturb"
	"github.com/bpfbench/bpfbench/pipeline"
	"github.com/bpfbench/bpfbench/readiness"
	"github.com/bpfbench/bpfbench/session"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Injection is one known cause a validation injects during its own phase.
type Injection struct {
	// Name labels the phase ("cpu", "io", "gpu", "client", "net").
	Name string
	// Cause is the cause the critical path must name.
	Cause string
	// Start begins the perturbation; the function it returns ends it and
	// says what it achieved. Nil for a slow-reading request.
	Start func(ctx context.Context) (stop func() string, err error)
	// SlowRead, when set, makes one request early in the phase a
	// slow-reading client that stops reading for this long.
	SlowRead time.Duration
	// Baseline, when set, is called as the baseline phase begins, and the
	// function it returns as it ends: a measurement of the server's normal
	// behaviour that Start then uses.
	Baseline func() func()
	// Prepare, when set, runs before the run starts (a calibration of
	// the injection's strength) and says what it chose.
	Prepare func(ctx context.Context) string
	// Stronger, when set, is the same injection made stronger (twice the
	// busy threads, reads in flight, kernel time, step work or pause; half
	// the shaping rate), for a retry of a phase too weak to judge.
	Stronger func() Injection
}

// ValidateConfig configures a validation by intervention.
type ValidateConfig struct {
	// Load is the base load: target, endpoint, model. Its rate, requests
	// and arrival are set by the validation.
	Load loadgen.Config
	Pid  int
	// OutDir receives the run directory and validation.json.
	OutDir string
	// MinShare is the share of its tail excess each injected cause must
	// have (Validation.MinShare).
	MinShare float64
	// Phase is how long each injection (and the baseline) lasts.
	Phase time.Duration
	// Rate is the fixed request rate (req/s) of the whole run.
	Rate       float64
	OutputLen  int
	Injections []Injection
	Sections   []session.SectionFactory
	Readiness  func() []readiness.Check
	Logger     *slog.Logger
	// Progress is the load generator's progress callback.
	Progress func(done, total int)
	// RetryWeak is how many times the injections too weak to judge are
	// run again, stronger, each time in a run of their own after a
	// baseline of its own (in OutDir/retry-N); their rows replace the
	// weak ones.
	RetryWeak int
	// MinAddedMs, when positive, replaces the least a row must add per
	// tail gap to be judged (default MinAddedMs of the normal gap).
	MinAddedMs float64
	// ValidateRun: the server's metrics and the manifest, as run's.
	ValidateRun
}

// ValidationRow is one injected cause and what the critical path named
// (result.ValidationRow).
type ValidationRow = result.ValidationRow

// Validation is the confusion matrix of injected × attributed causes,
// validation.json (result.Validation).
type Validation result.Validation

// hostSteal reads the hypervisor's steal and every CPU's time since boot
// from /proc/stat's cpu line (USER_HZ ticks); ok false when it cannot.
func hostSteal() (steal, total uint64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		if i < 8 { // user .. steal; guest time is in user already
			total += v
		}
		if i == 7 {
			steal = v
		}
	}
	return steal, total, true
}

// CPUInjection keeps threads busy on cpus (nil: every CPU), two per CPU.
func CPUInjection(cpus []int) Injection { return cpuInjection(cpus, 2) }

func cpuInjection(cpus []int, perCPU int) Injection {
	return Injection{Name: "cpu", Cause: correlate.CPURunqueue.String(), Stronger: func() Injection { return cpuInjection(cpus, 2*perCPU) },
		Start: busyThreads("cpu", perturb.CPU{CPUs: cpus}, perCPU, func(r perturb.CPUReport) string {
			return fmt.Sprintf("%d busy threads on CPUs %v burnt %.1f CPU-s (%.0f%% each)", r.Threads, r.CPUs, r.CPUSeconds, r.Share*100)
		})}
}

// busyThreads starts p with perCPU threads a CPU for the injection's
// phase; say tells what they burnt.
func busyThreads(name string, p perturb.CPU, perCPU int, say func(perturb.CPUReport) string) func(context.Context) (func() string, error) {
	return func(ctx context.Context) (func() string, error) {
		if err := p.Validate(); err != nil {
			return nil, err
		}
		p.Threads = perCPU * len(p.CPUs)
		return During(ctx, func(c context.Context) string {
			r, err := p.RunProcess(c)
			if err != nil {
				return name + ": " + err.Error()
			}
			return say(r)
		}), nil
	}
}

// IOInjection reads path with O_DIRECT, 1 MiB at a time, in a child
// process (perturb.IO.RunProcess), as many in flight as a calibration of
// the disk before the run says make each read wait about ioWait
// (CalibrateIO): a fast disk gets more.
func IOInjection(path string) Injection {
	cur := ioInjection(path, ioMinDepth, "")
	return Injection{Name: cur.Name, Cause: cur.Cause,
		Prepare: func(ctx context.Context) string {
			d, note := CalibrateIO(ctx, path)
			cur = ioInjection(path, d, note)
			return note
		},
		Stronger: func() Injection { return cur.Stronger() },
		Start:    func(ctx context.Context) (func() string, error) { return cur.Start(ctx) }}
}

// ioInjection reads path with depth reads in flight; note says how depth
// was chosen.
func ioInjection(path string, depth int, note string) Injection {
	return Injection{Name: "io", Cause: correlate.IOBlock.String(), Stronger: func() Injection {
		d := min(2*depth, 4*ioMaxDepth)
		return ioInjection(path, d, fmt.Sprintf("%s; retried stronger: %d in flight", note, d))
	}, Start: func(ctx context.Context) (func() string, error) {
		p := perturb.IO{Path: path, BlockSize: IOBlock, Depth: depth}
		if err := p.Validate(); err != nil {
			return nil, err
		}
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("the IO injection's file: %w", err)
		}
		return During(ctx, func(c context.Context) string {
			r, err := p.RunProcess(c)
			if err != nil {
				return "io: " + err.Error()
			}
			return fmt.Sprintf("%.0f O_DIRECT reads/s of 1 MiB on %s, %d in flight, %.1f ms each (%s)", r.IOPS, path, p.Depth, r.MeanLatency*1e3, note)
		}), nil
	}}
}

// GPUInjection raises the CUDA stub's kernel time through its control
// file to slowUS, and puts the previous value back.
func GPUInjection(control string, slowUS int) Injection {
	return Injection{Name: "gpu", Cause: correlate.GPUSync.String(),
		Stronger: func() Injection { return GPUInjection(control, 2*slowUS) },
		Start:    controlFile(control, slowUS, "the CUDA stub's control file", "the stub's kernel time")}
}

// ComputeInjection raises the server's own step work (llmsim's step
// control file) to us µs and puts the previous value back: the critical
// path must name server_compute; the union model has no such cause.
func ComputeInjection(control string, us int) Injection {
	return Injection{Name: "compute", Cause: critpath.ServerCompute.String(),
		Stronger: func() Injection { return ComputeInjection(control, 2*us) },
		Start:    controlFile(control, us, "the server's step control file", "the server's step work")}
}

// controlFile is an injection's Start that writes us (µs) to a control
// file and, at the end, puts back what it held.
func controlFile(path string, us int, file, what string) func(context.Context) (func() string, error) {
	return func(context.Context) (func() string, error) {
		prev, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", file, err)
		}
		if err := os.WriteFile(path, []byte(strconv.Itoa(us)+"\n"), 0o644); err != nil {
			return nil, fmt.Errorf("writing %s: %w", file, err)
		}
		return func() string {
			_ = os.WriteFile(path, prev, 0o644)
			return fmt.Sprintf("%s from %s to %d µs", what, strings.TrimSpace(string(prev)), us)
		}, nil
	}
}

// ClientCPUInjection keeps a thread busy on each of the load generator's
// CPUs at its own nice level: the client reads late, and the
// critical path must name client (the chunk waited in its socket); the
// union model has no such cause.
func ClientCPUInjection(cpus []int, nice int) Injection { return clientCPUInjection(cpus, nice, 1) }

func clientCPUInjection(cpus []int, nice, perCPU int) Injection {
	return Injection{Name: "client-cpu", Cause: critpath.Client.String(), Stronger: func() Injection { return clientCPUInjection(cpus, nice, 2*perCPU) },
		Start: busyThreads("client-cpu", perturb.CPU{CPUs: cpus, Nice: nice}, perCPU, func(r perturb.CPUReport) string {
			return fmt.Sprintf("%d busy threads at nice %d on the load generator's CPUs %v burnt %.1f CPU-s (%.0f%% each)", r.Threads, nice, r.CPUs, r.CPUSeconds, r.Share*100)
		})}
}

// NetRateShare is the share of the interface's baseline rate that the
// net injection shapes it to when no rate is given.
const NetRateShare = 0.8

// NetInjection shapes an interface with tbf during the phase. With no
// n.Rate, the rate is NetRateShare of what the interface sent per second
// in the baseline phase: a stream slower than its normal token rate.
func NetInjection(n perturb.Net) Injection { return netInjection(n, NetRateShare) }

// netInjection shapes to share of the baseline's rate when n has none.
func netInjection(n perturb.Net, share float64) Injection {
	var baseBps float64
	var baseErr error
	stronger := func() Injection {
		m := n
		m.Rate /= 2
		return netInjection(m, share/2)
	}
	inj := Injection{Name: "net", Cause: correlate.NetBackpressure.String(), Stronger: stronger, Start: func(context.Context) (func() string, error) {
		auto := ""
		if n.Rate == 0 {
			if baseBps <= 0 {
				if baseErr == nil {
					baseErr = fmt.Errorf("%s sent nothing in the baseline phase", n.Iface)
				}
				return nil, fmt.Errorf("choosing the shaping rate: %w: give --net-rate", baseErr)
			}
			n.Rate = uint64(max(baseBps*share, 8000))
			auto = fmt.Sprintf(" (%.0f%% of the %.3g Mbit/s of the baseline)", share*100, baseBps/1e6)
		}
		s, err := n.Apply()
		if err != nil {
			return nil, err
		}
		return func() string {
			r, err := s.Stop()
			if err != nil {
				return "net: " + err.Error()
			}
			return fmt.Sprintf("%s shaped to %.3g Mbit/s%s, burst %d B, queue %d B: %.3g Mbit/s sent, %d drops",
				r.Iface, float64(r.RateBps)/1e6, auto, r.BurstBytes, r.LimitBytes, r.AchievedBps/1e6, r.Drops)
		}, nil
	}}
	if n.Rate == 0 {
		inj.Baseline = func() func() {
			t0 := time.Now()
			b0, err := IfaceTxBytes(n.Netns, n.Iface)
			if err != nil {
				baseErr = err
				return func() {}
			}
			return func() {
				b1, err := IfaceTxBytes(n.Netns, n.Iface)
				if err != nil {
					baseErr = err
					return
				}
				if d := time.Since(t0).Seconds(); d > 0 && b1 > b0 {
					baseBps = float64(b1-b0) * 8 / d
				}
			}
		}
	}
	return inj
}

// IfaceTxBytes is what an interface (in the named network namespace, ""
// the current one) has sent so far.
func IfaceTxBytes(nsName, iface string) (uint64, error) {
	var h *netlink.Handle
	var err error
	if nsName == "" {
		h, err = netlink.NewHandle()
	} else {
		ns, nerr := netns.GetFromName(nsName)
		if nerr != nil {
			return 0, fmt.Errorf("network namespace %s: %w", nsName, nerr)
		}
		defer ns.Close()
		h, err = netlink.NewHandleAt(ns)
	}
	if err != nil {
		return 0, fmt.Errorf("opening netlink: %w", err)
	}
	defer h.Close()
	l, err := h.LinkByName(iface)
	if err != nil {
		return 0, fmt.Errorf("looking up %s: %w", iface, err)
	}
	if st := l.Attrs().Statistics; st != nil {
		return st.TxBytes, nil
	}
	return 0, fmt.Errorf("%s has no statistics", iface)
}

// ClientInjection makes one request a slow reader that stops for d.
func ClientInjection(d time.Duration) Injection {
	return Injection{Name: "client", Cause: correlate.NetBackpressure.String(), SlowRead: d,
		Stronger: func() Injection { return ClientInjection(2 * d) }}
}

// during runs fn until the returned stop is called, and returns its report.
func During(ctx context.Context, fn func(context.Context) string) func() string {
	c, cancel := context.WithCancel(ctx)
	done := make(chan string, 1)
	go func() { done <- fn(c) }()
	return func() string {
		cancel()
		return <-done
	}
}

// ServerIOFile finds a regular file pid has open with O_DIRECT (the KV
// offload file of llmsim, for example).
func ServerIOFile(pid int) (string, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("listing the files of pid %d: %w", pid, err)
	}
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil || !strings.HasPrefix(target, "/") {
			continue
		}
		info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, e.Name()))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(l, "flags:"); ok {
				flags, _ := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
				if flags&0o40000 != 0 { // O_DIRECT
					if st, err := os.Stat(target); err == nil && st.Mode().IsRegular() {
						return target, nil
					}
				}
			}
		}
	}
	return "", fmt.Errorf("pid %d has no file open with O_DIRECT: give --io-file", pid)
}

// Validate runs a baseline phase, then each injection in its own phase,
// under one fixed load while following cfg.Pid, and reports which cause
// the attribution named for each.
func Validate(ctx context.Context, cfg ValidateConfig) (*Validation, *run.RunResult, error) {
	cfg.setDefaults()
	steal0, total0, stealOK := hostSteal()
	if len(cfg.Injections) == 0 {
		return nil, nil, errors.New("nothing to inject")
	}
	sc, load, err := cfg.plan()
	if err != nil {
		return nil, nil, err
	}
	flush := FlushDirty(ctx, cfg.Logger)
	cfg.calibrate(ctx)
	res, err := run.Run(ctx, run.RunConfig{Load: load, Pid: cfg.Pid, OutDir: cfg.OutDir, Sections: cfg.Sections,
		Phases: sc.Run, Readiness: cfg.Readiness, Logger: cfg.Logger,
		ServerMetrics: cfg.ServerMetrics, ServerMetricsPeriod: cfg.ServerMetricsPeriod, Manifest: cfg.Manifest})
	if res == nil {
		return nil, nil, err
	}
	if sc.injErr != nil {
		return nil, res, sc.injErr
	}
	v := newValidation(cfg, transport.Redacted(load.Target.URL), res.Doc.CriticalPath)
	byName, critByName := phasesByName(res.Doc)
	if base, ok := byName["baseline"]; ok {
		v.BaselineP50, v.BaselineP99 = base.P50ITLMs, base.P99ITLMs
	}
	injOf := v.judge(cfg.Injections, sc.achieved, byName, critByName)
	for i := range v.Rows {
		if why := sc.missed(injOf[i], byName[v.Rows[i].Injection], res.Doc, cfg.Rate); why != "" {
			v.Rows[i].Missed, v.Rows[i].Weak, v.Rows[i].Correct = why, true, false
		}
	}
	for i := range v.Rows {
		v.Rows[i].WritebackMiB, _ = sc.WritebackMiB(v.Rows[i].Injection)
	}
	v.BaselineWritebackMiB, _ = sc.WritebackMiB(sc.baseline)
	if flush.Took > 0 {
		v.FlushedMiB, v.FlushS = flush.DirtyMiB, flush.Took.Seconds()
	}
	if err == nil {
		err = v.retryWeak(ctx, cfg, injOf)
	}
	v.tally()
	v.HostSteal = stealShare(steal0, total0, stealOK)
	if werr := v.write(res); werr != nil && err == nil {
		err = werr
	}
	return v, res, err
}

// setDefaults fills the phase length, rate and output length left zero.
func (cfg *ValidateConfig) setDefaults() {
	if cfg.Phase <= 0 {
		cfg.Phase = 6 * time.Second
	}
	if cfg.Rate <= 0 {
		cfg.Rate = 4
	}
	if cfg.OutputLen <= 0 {
		cfg.OutputLen = 64
	}
}

// plan lays out the phases of a validation and the fixed load that runs
// through them: the requests, each slow-reading injection's request made
// longer and slow to read.
func (cfg *ValidateConfig) plan() (*Scenario, loadgen.Config, error) {
	// The phases follow one another with a settling time between two
	// injections; the k-th injection's phase starts at phaseStart(k).
	settle := Settle(cfg.Phase)
	phaseStart := func(k int) time.Duration { return time.Duration(k+1)*cfg.Phase + time.Duration(k)*settle }
	perPhase := max(int(cfg.Rate*cfg.Phase.Seconds()), 4)
	firstOf := func(k int) int { return int(math.Floor(cfg.Rate*phaseStart(k).Seconds() + 1e-6)) }
	phases := len(cfg.Injections) + 1 // the baseline, then each injection
	n := max(int(math.Ceil(cfg.Rate*(phaseStart(len(cfg.Injections)-1)+cfg.Phase).Seconds())), perPhase*phases)
	reqs, err := dataset.Load(dataset.Config{Name: dataset.Random, InputLen: 64, OutputLen: cfg.OutputLen}, n, 1)
	if err != nil {
		return nil, loadgen.Config{}, err
	}
	for i := range reqs {
		reqs[i].OffsetNs = -1
	}
	// A slow-reading request is longer than the others, so that it is
	// still streaming when it stops reading; the baseline phase has a
	// request as long at the same place, read at once, so that what the
	// phase adds to the tail is the stalled reads, not a longer request in
	// an engine's batch (a CPU engine's step costs time per request it
	// carries).
	slow := make([]int, len(cfg.Injections)) // each slow-reading injection's request
	for k, inj := range cfg.Injections {
		if inj.SlowRead > 0 {
			at := slowOffset(perPhase, cfg.Rate, cfg.Phase, inj.SlowRead)
			slow[k] = firstOf(k) + at
			reqs[slow[k]].OutputLen = max(3*cfg.OutputLen, 200)
			reqs[slow[k]].SlowRead = inj.SlowRead
			reqs[at].OutputLen = reqs[slow[k]].OutputLen
		}
	}
	load := cfg.Load
	load.Scenario.Rate = cfg.Rate
	load.Scenario.Constant = true
	load.Scenario.Requests = reqs
	load.Scenario.NumRequests = n
	load.Scenario.Duration = 0
	load.Target.IgnoreEOS = true
	load.Output.Progress = cfg.Progress
	if load.Target.Timeout == 0 || load.Target.Timeout > 10*time.Minute {
		load.Target.Timeout = 2 * time.Minute
	}
	sc := &Scenario{phase: cfg.Phase, settle: settle, baseline: "baseline", injections: cfg.Injections, slow: slow}
	return sc, load, nil
}

// calibrate prepares each injection that needs it before the run, and
// logs what each found.
func (cfg *ValidateConfig) calibrate(ctx context.Context) {
	for _, inj := range cfg.Injections {
		if inj.Prepare != nil {
			if note := inj.Prepare(ctx); note != "" && cfg.Logger != nil {
				cfg.Logger.Info("injection calibrated", "injection", inj.Name, "note", note)
			}
		}
	}
}

// newValidation starts the validation of a run of target: what it ran
// and the least a row must add per tail gap to be judged (from the
// critical path cp, nil when there is none).
func newValidation(cfg ValidateConfig, target string, cp *result.CriticalPath) *Validation {
	v := &Validation{
		Target: target, Pid: cfg.Pid, RateRPS: cfg.Rate, PhaseS: cfg.Phase.Seconds(),
		Causes: critpath.CauseNames(), Matrix: map[string]map[string]int{}, Dir: cfg.OutDir, MinShare: cfg.MinShare,
	}
	v.Unexplained = -1
	normal := 0.0
	if cp != nil {
		v.Unexplained = cp.UnexplainedFraction
		normal = SumMs(cp.NormalITLMs)
	}
	v.MinAddedMs = MinAddedMs(normal)
	if cfg.MinAddedMs > 0 {
		v.MinAddedMs = cfg.MinAddedMs
	}
	return v
}

// phasesByName indexes the phases of doc, and those of its critical
// path, by name.
func phasesByName(doc *result.Document) (map[string]result.Phase, map[string]result.CriticalPhase) {
	byName := map[string]result.Phase{}
	for _, p := range doc.Phases {
		byName[p.Name] = p
	}
	critByName := map[string]result.CriticalPhase{}
	if cp := doc.CriticalPath; cp != nil {
		for _, p := range cp.Phases {
			critByName[p.Name] = p
		}
	}
	return byName, critByName
}

// tally counts the correct and the weak rows and fills the matrix of
// injected × judged causes.
func (v *Validation) tally() {
	for _, row := range v.Rows {
		switch {
		case row.Correct:
			v.Correct++
		case row.Weak:
			v.Weak++
		}
		if v.Matrix[row.Injected] == nil {
			v.Matrix[row.Injected] = map[string]int{}
		}
		v.Matrix[row.Injected][row.JudgedTop()]++
	}
}

// stealShare is the share of the host's CPU time the hypervisor stole
// since hostSteal read steal0 and total0 (ok0 whether it could), or -1
// when it cannot tell.
func stealShare(steal0, total0 uint64, ok0 bool) float64 {
	if steal1, total1, ok := hostSteal(); ok && ok0 && total1 > total0 {
		return float64(steal1-steal0) / float64(total1-total0)
	}
	return -1
}

// Scenario is the phases of validate and demo: a baseline phase, then
// each injection in its own phase, the server settling outside any phase
// between two injections.
type Scenario struct {
	phase, settle time.Duration
	baseline      string
	injections    []Injection
	// slow[k] is the slow-reading request of injection k (SlowRead).
	slow []int
	// achieved[k] is what injection k achieved (run fills it); injErr
	// the last injection that could not start.
	achieved []string
	injErr   error
	// writeback[name] is the host's page-cache writeback during the
	// phase name, MiB (absent: not measured).
	writeback map[string]float64
}

// NewScenario is the scenario of injections after a baseline phase
// named baseline, each phase of length phase, the server settling
// Settle(phase) between two injections (the demo's).
func NewScenario(phase time.Duration, baseline string, injections []Injection) *Scenario {
	return &Scenario{phase: phase, settle: Settle(phase), baseline: baseline, injections: injections}
}

// Achieved is what each injection achieved, once Run returned.
func (s *Scenario) Achieved() []string { return s.achieved }

// WritebackMiB is the host's page-cache writeback during the phase name,
// once Run returned (/proc/vmstat nr_written; ok false: not measured).
func (s *Scenario) WritebackMiB(name string) (float64, bool) {
	mib, ok := s.writeback[name]
	return mib, ok
}

// measureWriteback starts measuring the host's writeback during the
// phase name; the returned func ends it.
func (s *Scenario) measureWriteback(name string) func() {
	w0, ok0 := hostWritten()
	return func() {
		if w1, ok1 := hostWritten(); ok0 && ok1 && w1 >= w0 {
			s.writeback[name] = float64((w1-w0)*pageKiB) / 1024
		}
	}
}

// Err is the last injection that could not start, once Run returned.
func (s *Scenario) Err() error { return s.injErr }

// Run plays the scenario, marking its phases, until done or ctx ends
// (run.RunConfig.Phases).
func (s *Scenario) Run(ctx context.Context, marks *pipeline.PhaseMarks) {
	s.achieved = make([]string, len(s.injections))
	s.writeback = map[string]float64{}
	wait := func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(s.phase):
			return true
		}
	}
	marks.Begin(s.baseline)
	endWb := s.measureWriteback(s.baseline)
	var ends []func()
	for _, inj := range s.injections {
		if inj.Baseline != nil {
			ends = append(ends, inj.Baseline())
		}
	}
	ok := wait()
	endWb()
	for _, end := range ends {
		end()
	}
	if !ok {
		return
	}
	for k, inj := range s.injections {
		marks.Begin(inj.Name)
		endWb := s.measureWriteback(inj.Name)
		var stop func() string
		if inj.Start != nil {
			st, err := inj.Start(ctx)
			if err != nil {
				s.injErr = fmt.Errorf("injecting %s: %w", inj.Name, err)
			}
			stop = st
		} else if inj.SlowRead > 0 && k < len(s.slow) {
			s.achieved[k] = fmt.Sprintf("request %d stops reading for %v after its first token", s.slow[k], inj.SlowRead)
		}
		ok := wait()
		endWb()
		if stop != nil {
			s.achieved[k] = stop()
		}
		if !ok {
			return
		}
		// The server settles outside any phase before the next
		// injection: the requests an injection slowed are still in
		// flight when it stops, a larger batch than the rate keeps, and
		// their extra steps would be the next phase's compute.
		if k+1 < len(s.injections) && !settleOutside(ctx, marks, s.settle) {
			return
		}
	}
}

// judge adds a row for each injection whose phase ran: what the phase
// added to its slowest gaps and the cause the critical path named. It
// returns the injection of each row.
func (v *Validation) judge(injections []Injection, achieved []string, byName map[string]result.Phase, critByName map[string]result.CriticalPhase) []Injection {
	var injOf []Injection // the injection of each row
	for k, inj := range injections {
		p, ok := byName[inj.Name]
		if !ok {
			continue
		}
		row := ValidationRow{
			Injection: inj.Name, Injected: inj.Cause, Attributed: "none",
			RawShare: p.ITLP99[inj.Cause], RawTop: topCause(p.ITLP99),
			ShareAll: p.ITLAll[inj.Cause], P99Shares: p.ITLP99,
			Requests: p.Requests, P50ITLMs: p.P50ITLMs, P99ITLMs: p.P99ITLMs,
			AddedP50ITLMs: p.P50ITLMs - v.BaselineP50, AddedP99ITLMs: p.P99ITLMs - v.BaselineP99,
			Achieved: achieved[k],
		}
		if cp, ok := critByName[inj.Name]; ok {
			row.AddedShares, row.Attributed, row.AddedMs, row.StealMs = cp.TailAddedShares, cp.TailTop, cp.TailAddedMs, cp.TailStealMs
			row.Share = cp.TailAddedShares[row.Injected]
		}
		row.Weak = row.AddedMs < v.MinAddedMs
		row.Correct = !row.Weak && row.Attributed == row.Injected
		v.Rows = append(v.Rows, row)
		injOf = append(injOf, inj)
	}
	return injOf
}

// retryWeak runs the injections too weak to judge once more, stronger,
// up to cfg.RetryWeak times, each in its own run directory; their rows
// replace the weak ones.
func (v *Validation) retryWeak(ctx context.Context, cfg ValidateConfig, injOf []Injection) error {
	var err error
	for try := 1; try <= cfg.RetryWeak && err == nil && ctx.Err() == nil; try++ {
		var again []Injection
		at := map[string]int{} // an injection's name: its row
		for i, row := range v.Rows {
			switch {
			case row.Missed != "":
				// Once more as it was, after a baseline of its own.
				again = append(again, injOf[i])
				at[injOf[i].Name] = i
			case row.Weak && injOf[i].Stronger != nil:
				injOf[i] = injOf[i].Stronger()
				again = append(again, injOf[i])
				at[injOf[i].Name] = i
			}
		}
		if len(again) == 0 {
			break
		}
		rc := cfg
		rc.Injections, rc.RetryWeak = again, 0
		rc.OutDir = filepath.Join(cfg.OutDir, fmt.Sprintf("retry-%d", try))
		if cfg.Logger != nil {
			cfg.Logger.Info("injections too weak to judge: once more, stronger", "retry", try, "injections", len(again), "dir", rc.OutDir)
		}
		rv, _, rerr := Validate(ctx, rc)
		if rv == nil {
			err = fmt.Errorf("retrying the injections too weak to judge: %w", rerr)
			break
		}
		for _, r := range rv.Rows {
			i := at[r.Injection]
			r.Retry, r.RetryDir = try, rc.OutDir
			was := fmt.Sprintf("%s: added %.1f ms per tail gap", v.Rows[i].Achieved, v.Rows[i].AddedMs)
			if m := v.Rows[i].Missed; m != "" {
				was = v.Rows[i].Achieved + ": missed its phase, " + m
			}
			r.Earlier = append(slices.Clone(v.Rows[i].Earlier), was)
			v.Rows[i] = r
		}
		if rerr != nil {
			err = rerr
		}
	}
	return err
}

// missed says why injection inj took effect outside its phase p ("" when
// it did not, or cannot tell): a slow reader whose stall ended after the
// phase, its first token having waited in the server's queue (a backlog
// the phase before left, that a server near its capacity at the run's
// rate does not drain), made no gap of the phase longer.
func (s *Scenario) missed(inj Injection, p result.Phase, doc *result.Document, rate float64) string {
	k := slices.IndexFunc(s.injections, func(i Injection) bool { return i.Name == inj.Name })
	if inj.SlowRead <= 0 || k < 0 || k >= len(s.slow) || doc == nil || doc.BPFBench == nil {
		return ""
	}
	b := doc.BPFBench
	end := b.StartNs + int64(p.EndS*1e9)
	for i := range b.Records {
		r := &b.Records[i]
		if r.Index != s.slow[k] || r.Warmup {
			continue
		}
		switch {
		case r.PausedNs == nil:
			return fmt.Sprintf("request %d never stopped reading (%s)", r.Index, cmp.Or(r.Error, "no first token"))
		case r.PausedNs[1] >= end:
			return fmt.Sprintf("request %d's stall ended %.1f s after the phase, its first token %.1f s after it was sent: the server queued it (near its capacity at %.3g req/s, a backlog the phase before left is not drained; a lower --rate keeps the phases apart)",
				r.Index, float64(r.PausedNs[1]-end)/1e9, float64(r.TTFTNs())/1e9, rate)
		}
		return ""
	}
	return ""
}

// slowOffset is the index in its phase of the slow-reading request: a
// quarter into the phase, or earlier when its stall would otherwise end
// in the next phase (half a second kept for its first token), where the
// gap it makes would be judged.
func slowOffset(perPhase int, rate float64, phase, stall time.Duration) int {
	latest := int((phase - stall - 500*time.Millisecond).Seconds() * rate)
	return max(min(perPhase/4, latest), 0)
}

// topCause is the cause with the largest share, unexplained included.
func topCause(b correlate.Breakdown) string {
	best, bestV := "none", 0.0
	for _, c := range correlate.CauseNames() {
		if b[c] > bestV {
			best, bestV = c, b[c]
		}
	}
	return best
}

// write puts validation.json in the run directory and the matrix into
// result.json (key "validation").
func (v *Validation) write(res *run.RunResult) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	p := filepath.Join(v.Dir, result.ValidationFile)
	if err := atomicfile.WriteFile(p, append(b, '\n'), 0o644); err != nil {
		return err
	}
	res.Written = append(res.Written, p)
	res.Doc.Validation = (*result.Validation)(v)
	return res.Doc.WriteFile(filepath.Join(v.Dir, "result.json"))
}

// MinAddedMs is the least an injection must add per gap of its phase's
// slowest 10%, every cause summed, for its row to be judged: a tenth of
// the baseline's normal gap (normalMs), and at least 1 ms. Less than
// that is within what phases of a quiet run differ by, and the top cause
// of such an addition is noise.
func MinAddedMs(normalMs float64) float64 { return max(1, 0.1*normalMs) }

// SumMs is the sum of m's values.
func SumMs(m map[string]float64) float64 {
	var t float64
	for _, v := range m {
		t += v
	}
	return t
}

// WriteMatrix prints the confusion matrix (injected cause × the critical
// path's top added cause) and, per row, the injected cause's share of
// what the phase added to its slowest gaps.
func (v *Validation) WriteMatrix(w io.Writer) {
	short := map[string]string{"cpu_runqueue": "cpu_rq", "io_block": "io_blk", "gpu_sync": "gpu", "net_backpressure": "net_bp",
		"server_compute": "compute", "server_sleep": "sleep", "server_stopped": "stopped", "client": "client", "unexplained": "unexpl"}
	sh := func(c string) string {
		if v, ok := short[c]; ok {
			return v
		}
		return c
	}
	fmt.Fprintf(w, "%-16s", "injected \\ top")
	for _, c := range v.Causes {
		fmt.Fprintf(w, " %7s", sh(c))
	}
	fmt.Fprintf(w, "  %-10s %6s %-9s %10s %13s %15s\n", "phase", "share", "top", "added", "ITL p50 (+)", "ITL p99 (+)")
	for _, r := range v.Rows {
		fmt.Fprintf(w, "%-16s", sh(r.Injected))
		for _, c := range v.Causes {
			mark := "."
			if r.JudgedTop() == c {
				mark = "1"
			}
			fmt.Fprintf(w, " %7s", mark)
		}
		verdict := "ok"
		switch {
		case r.Missed != "":
			verdict = "injection missed its phase: " + r.Missed
		case r.Weak:
			verdict = fmt.Sprintf("injection too weak (added %.1f ms per tail gap, under %.1f ms)", r.AddedMs, v.MinAddedMs)
		case !r.Correct:
			verdict = "WRONG"
		case r.JudgedShare() < v.MinShare:
			verdict = "LOW"
		}
		if r.StealMs >= 0.05 {
			verdict += fmt.Sprintf(" (hypervisor steal %.1f ms left out)", r.StealMs)
		}
		if note := WritebackNote(r.WritebackMiB); note != "" {
			verdict += " (" + note + ")"
		}
		fmt.Fprintf(w, "  %-10s %5.0f%% %-9s %7.1f ms %5.1f (%+5.1f) %6.1f (%+6.1f) %s\n", r.Injection, r.JudgedShare()*100, sh(r.JudgedTop()), r.AddedMs,
			r.P50ITLMs, r.AddedP50ITLMs, r.P99ITLMs, r.AddedP99ITLMs, verdict)
	}
	unexpl := "no critical path"
	if v.Unexplained >= 0 {
		unexpl = fmt.Sprintf("unexplained %.2f%% of all gap time", v.Unexplained*100)
	}
	weak := ""
	if v.Weak > 0 {
		weak = fmt.Sprintf(", %d too weak to judge", v.Weak)
	}
	fmt.Fprintf(w, "baseline ITL p50 %.1f ms, p99 %.1f ms at %.3g req/s; %d of %d injections named%s (on the critical path, the cause that added most to the slowest 10%% of gaps); %s\n",
		v.BaselineP50, v.BaselineP99, v.RateRPS, v.Correct, len(v.Rows), weak, unexpl)
	if v.FlushedMiB > 0 {
		fmt.Fprintf(w, "before the run the host's %.0f MiB of dirty page cache were written back (%.1f s), so that the kernel's writeback would not land in a phase\n", v.FlushedMiB, v.FlushS)
	}
	if note := WritebackNote(v.BaselineWritebackMiB); note != "" {
		fmt.Fprintf(w, "during the baseline %s: every row is measured against a disturbed baseline\n", note)
	}
	if slices.ContainsFunc(v.Rows, func(r ValidationRow) bool { return WritebackNote(r.WritebackMiB) != "" }) {
		fmt.Fprintf(w, "a row whose phase saw the host write back its page cache was judged on a disk and a CPU the kernel's flusher shared with the server: its truth is not the injection alone (io_block and cpu_runqueue grow)\n")
	}
	if v.HostSteal >= 0.01 {
		fmt.Fprintf(w, "the hypervisor stole %.0f%% of the host's CPU time meanwhile: the rows judge the gaps without the steal the critical path saw on the server's threads, but steal elsewhere (the load generator, the network's softirqs) still moves them; under heavy steal a row is a weaker trial\n", v.HostSteal*100)
	}
}
