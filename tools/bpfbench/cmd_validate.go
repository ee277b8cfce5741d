package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/collectors/bpfutil"
	"github.com/bpfbench/bpfbench/job"
	"github.com/bpfbench/bpfbench/session"

	"github.com/bpfbench/bpfbench/internal/caps"
	"github.com/bpfbench/bpfbench/job/load"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/perturb"
)

func init() {
	register("validate", command{
		summary: "check the attribution by intervention: inject each cause in turn under one load and print the confusion matrix",
		run:     runValidate,
	})
}

// affinityOf returns the CPUs pid may run on.
func affinityOf(pid int) ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(pid, &set); err != nil {
		return nil, fmt.Errorf("reading the CPUs of pid %d: %w", pid, err)
	}
	var out []int
	for i := 0; i < 1024; i++ {
		if set.IsSet(i) {
			out = append(out, i)
		}
	}
	return out, nil
}

// reniceSelf sets the nice level of every thread of this process (the
// threads it creates later inherit it).
func reniceSelf(nice int) error {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, e := range ents {
		var tid int
		fmt.Sscan(e.Name(), &tid)
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil {
			return fmt.Errorf("setting nice %d on thread %d: %w", nice, tid, err)
		}
	}
	return nil
}

func runValidate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("validate", stderr, "validate (--sim | --target URL --pid PID) [--io-file F] [--cuda-control F] [--net-iface I --net-rate R] [--phase 6s] [--rate 4] [--out DIR]")
	useSim := fs.Bool("sim", false, "start bin/llmsim with the CUDA stub and validate against it (as make validate does)")
	target := fs.String("target", "", "the server's base URL")
	pid := fs.Int("pid", 0, "the server's process id")
	port := fs.Int("port", 0, "find the server as the process listening on this local TCP port")
	out := fs.String("out", "bpfbench-validate", "run directory: result.json, trace.json, report.html and validation.json")
	phase := fs.Duration("phase", 6*time.Second, "length of the baseline and of each injection")
	rate := fs.Float64("rate", 4, "requests per second, fixed for the whole run")
	outLen := fs.Int("output-len", 64, "output tokens per request")
	model := fs.String("model", "", "model name to ask for (default: the first the server lists)")
	endpoint := fs.String("endpoint", loadgen.EndpointCompletions, "completions or chat")
	ioFile := fs.String("io-file", "", "file to read with O_DIRECT for the io injection (default: a file the server has open with O_DIRECT)")
	cpus := fs.String("cpus", "", "CPUs to keep busy for the cpu injection (default: those the server may run on)")
	control := fs.String("cuda-control", "", "the CUDA stub's control file (CUDASTUB_CONTROL_FILE) for the gpu injection; without it, no gpu row")
	gpuUS := fs.Int("gpu-kernel-us", 20000, "the stub's kernel time during the gpu injection, µs")
	slowRead := fs.Duration("slow-read", 3*time.Second, "how long the client injection's request stops reading")
	netIface := fs.String("net-iface", "", "shape this interface with tbf for a net row (the server's egress towards the client; never lo unless nothing else uses it)")
	netNS := fs.String("net-netns", "", "named network namespace of --net-iface")
	netRate := fs.String("net-rate", "2mbit", "the net injection's rate")
	skip := fs.String("skip", "", "injections to leave out, e.g. gpu,io")
	selfNice := fs.Int("self-nice", -10, "nice level of bpfbench itself during the validation (the server and the injections stay at theirs)")
	minShare := fs.Float64("min-share", 0.6, "exit 1 unless every injected cause is the top cause with at least this share of the excess it added to the slowest 10% of gaps")
	logLevel := fs.String("log-level", "warn", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if *useSim == (*target != "") {
		return usageError{"give --sim, or the server's --target URL with --pid or --port"}
	}
	if *phase < 2*time.Second || *rate <= 0 {
		return usageError{"--phase must be at least 2s and --rate positive"}
	}
	skipped := map[string]bool{}
	for _, s := range strings.Split(*skip, ",") {
		if s = strings.TrimSpace(s); s != "" {
			if !map[string]bool{"cpu": true, "io": true, "gpu": true, "client": true, "net": true}[s] {
				return usageError{fmt.Sprintf("--skip %q: use cpu, io, gpu, client or net", s)}
			}
			skipped[s] = true
		}
	}
	cpuList, err := cpuList(*cpus)
	if err != nil {
		return usageError{err.Error()}
	}
	logger, err := newLogger(stderr, *logLevel, "text")
	if err != nil {
		return usageError{err.Error()}
	}
	if !caps.CanTrace() {
		return fmt.Errorf("validation follows the server with eBPF: %s", caps.Hint)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return fmt.Errorf("cannot create --out %s: %w", *out, err)
	}
	if err := bpfutil.EnsureFilesystems(); err != nil {
		logger.Warn("preparing kernel file systems", "err", err)
	}
	// Isolation: the load generator and the collectors run at a higher
	// priority than the server and the busy threads (nice 0), so that the
	// cpu injection delays the server and not the client's clock.
	if err := reniceSelf(*selfNice); err != nil {
		logger.Warn("raising bpfbench's priority", "err", err)
	}
	if *useSim {
		var simCPUs []int
		simLog, err := os.Create(filepath.Join(*out, "llmsim.log"))
		if err != nil {
			return fmt.Errorf("cannot write to --out %s: %w", *out, err)
		}
		defer simLog.Close()
		sim, err := startSimOn(ctx, *out, simLog, simCPUs)
		if err != nil {
			return err
		}
		defer sim.stop()
		defer os.Remove(sim.ioFile)
		*target, *pid = sim.url, sim.cmd.Process.Pid
		if *ioFile == "" {
			*ioFile = sim.ioFile
		}
		if *control == "" {
			*control = sim.control
		}
		fmt.Fprintf(stdout, "bpfbench validate: llmsim (pid %d, CPUs %v) at %s with the CUDA stub\n", *pid, simCPUs, sim.url)
	} else {
		if *pid != 0 && *port != 0 {
			return usageError{"give --pid or --port, not both"}
		}
		if *pid == 0 {
			p := *port
			if p == 0 {
				p = serverPort(*target)
			}
			if p == 0 {
				return usageError{"give the server's --pid, or --port PORT it listens on here"}
			}
			if *pid, err = session.ListenerPid(p); err != nil {
				return err
			}
		}
		if _, err := session.CheckPid(*pid); err != nil {
			return err
		}
	}
	if len(cpuList) == 0 {
		if cpuList, err = affinityOf(*pid); err != nil {
			return err
		}
	}
	var injs []job.Injection
	if !skipped["cpu"] {
		injs = append(injs, job.CPUInjection(cpuList))
	}
	if !skipped["io"] {
		if *ioFile == "" {
			if *ioFile, err = job.ServerIOFile(*pid); err != nil {
				return fmt.Errorf("%w (or --skip io)", err)
			}
		}
		injs = append(injs, job.IOInjection(*ioFile))
	}
	if !skipped["gpu"] && *control != "" {
		injs = append(injs, job.GPUInjection(*control, *gpuUS))
	}
	if !skipped["client"] {
		injs = append(injs, job.ClientInjection(*slowRead))
	}
	if !skipped["net"] && *netIface != "" {
		n := perturb.Net{Iface: *netIface, Netns: *netNS}
		if n.Rate, err = perturb.ParseRate(*netRate); err != nil {
			return usageError{"--net-" + err.Error()}
		}
		if err := n.Validate(); err != nil {
			return usageError{err.Error()}
		}
		injs = append(injs, job.NetInjection(n))
	}
	if len(injs) == 0 {
		return usageError{"every injection is skipped"}
	}
	lc := loadgen.DefaultConfig()
	lc.Target = *target
	lc.Endpoint = *endpoint
	if *model != "" {
		lc.Model = *model
	}
	var finish func()
	progress, finish := load.Progress(stderr)
	names := make([]string, len(injs))
	for i, inj := range injs {
		names[i] = inj.Name
	}
	fmt.Fprintf(stdout, "validating pid %d at %.3g req/s: baseline, then %s, %v each\n", *pid, *rate, strings.Join(names, ", "), *phase)
	v, res, err := job.Validate(ctx, job.ValidateConfig{
		Load: lc, Pid: *pid, OutDir: *out, Phase: *phase, Rate: *rate, OutputLen: *outLen,
		Injections: injs, Sections: sessionSections(), Readiness: readinessChecks, Logger: logger, Progress: progress,
	})
	finish()
	if v == nil {
		if res != nil {
			fmt.Fprintf(stdout, "the run is in %s\n", res.Dir)
		}
		return err
	}
	fmt.Fprintln(stdout, "\nWhat each injection achieved:")
	for _, r := range v.Rows {
		fmt.Fprintf(stdout, "  - %s: %s\n", r.Injection, r.Achieved)
	}
	fmt.Fprintln(stdout, "\nConfusion matrix (injected cause × top cause of the excess added to the slowest 10% of gaps):")
	v.WriteMatrix(stdout)
	if res != nil && res.Doc != nil && res.Doc.Overhead != nil {
		fmt.Fprintf(stdout, "\n%s\n", res.Doc.Overhead.Line())
		for _, w := range res.Doc.Overhead.Warnings {
			fmt.Fprintf(stdout, "  warning: %s\n", w)
		}
	}
	fmt.Fprintf(stdout, "\nwrote %s/{validation.json,result.json,trace.json,report.html}\n", *out)
	if err != nil {
		return err
	}
	var bad []string
	for _, r := range v.Rows {
		if !r.Correct || r.Share < *minShare {
			bad = append(bad, fmt.Sprintf("%s (top %s, %.0f%%)", r.Injection, r.Attributed, r.Share*100))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("attribution not validated for %s: want each injected cause on top with at least %.0f%% of the tail excess", strings.Join(bad, ", "), *minShare*100)
	}
	return nil
}
