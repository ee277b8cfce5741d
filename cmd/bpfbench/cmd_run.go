package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"github.com/bpfbench/bpfbench/result"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/attribute"

	"github.com/bpfbench/bpfbench/agent"
	"github.com/bpfbench/bpfbench/collectors/bpfutil"
	"github.com/bpfbench/bpfbench/correlate"
	runjob "github.com/bpfbench/bpfbench/job/run"
	"github.com/bpfbench/bpfbench/loadgen/dataset"
	"github.com/bpfbench/bpfbench/loadgen/transport"

	"github.com/bpfbench/bpfbench/exporter/otlp"
	"github.com/bpfbench/bpfbench/exporter/report"
	"github.com/bpfbench/bpfbench/internal/caps"
	"github.com/bpfbench/bpfbench/job/load"
	"github.com/bpfbench/bpfbench/session"
)

func init() {
	register(newRunCmd)
	register(newReportCmd)
}

// serverPort returns the port of a local target URL, or 0.
func serverPort(target string) int {
	u, err := url.Parse(target)
	if err != nil {
		return 0
	}
	host, ps, err := net.SplitHostPort(u.Host)
	if err != nil {
		return 0
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return 0
	}
	p, _ := strconv.Atoi(ps)
	return p
}

// runFlags are the flags of run, as the command line gave them.
type runFlags struct {
	opts              *load.Options
	server            serverFlags
	sm                *serverMetricsFlags
	out               string
	baseITL, baseTTFT float64
	baseline          string
	logs              logFlags
	cpus              *string
	agents            agentFlags
	via               viaFlags
	spoolMiB          int
}

func newRunCmd() *cobra.Command {
	f := runFlags{opts: load.NewOptions(), sm: &serverMetricsFlags{}}
	cmd := &cobra.Command{
		Use:   "run --target URL (--pid PID | --port PORT | --cgroup PATH) --out DIR [load options]",
		Short: "Load a server while following its process, then blame each token's latency on its causes",
		Long: `Finds the server (its pid, or the process listening on --port, or on the
target URL's port when it is local), starts every collector on it, runs the
load, then walks each token gap back from the client's read along its
critical path: the chunk in the client's socket (client) or in flight
(net_backpressure, with that connection's zero-window and retransmission
episodes), and before the send the server's threads, following what woke
them: running (server_compute), runnable behind another task (cpu_runqueue),
in uninterruptible IO (io_block), in a blocking CUDA call (gpu_sync), asleep
with nothing of the server running or runnable (server_sleep), stopped by a
signal, a debugger or a freezer (server_stopped); what no event covers is
unexplained. The parts sum to each gap; the excess over the normal gap is split over them. Writes
DIR/result.json, DIR/trace.json and DIR/report.html and prints a summary.
It takes every load option of bpfbench load.`,
		Example:     `  bpfbench run --target http://127.0.0.1:8000 --port 8000 --num-requests 200 --rate 8 --out run1`,
		Args:        noArgs,
		Annotations: map[string]string{memoryBound: "true", planned: "true"},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRun(cmd, f)
		},
	}
	fs := cmd.Flags()
	f.opts.AddFlags(fs)
	f.server.add(fs)
	f.server.addCgroup(fs)
	f.sm.add(fs)
	fs.StringVar(&f.out, "out", "", "run `DIR` for result.json, trace.json and report.html (required)")
	fs.Float64Var(&f.baseITL, "baseline-itl-ms", 0, "a normal inter-token gap in ms for the activity model (default: the run's median); the attribution's normal gap, per cause, comes from the run or --baseline DIR")
	fs.Float64Var(&f.baseTTFT, "baseline-ttft-ms", 0, "a normal time to first token in ms for the activity model (default: the run's median); the attribution's comes from the run or --baseline DIR")
	fs.StringVar(&f.baseline, "baseline", "", "a quiet run recorded earlier (its `DIR` or result.json): the attribution and the critical path compare with its normal gaps, not this run's medians, so a run contended from start to end is still explained")
	fs.IntVar(&f.spoolMiB, "spool-mib", runjob.DefaultSpoolBytes>>20, "`MiB` that what is recorded during the load may take before it is correlated: correlation waits for the load's end, taking no CPU from the server while it is measured, unless this fills first (then it goes live; 0: live from the start)")
	f.logs.add(fs, "warn", true)
	f.cpus = cpusFlag(fs)
	f.agents.add(fs)
	f.via.add(fs)
	_ = cmd.MarkFlagDirname("out")
	loadCompletions(cmd)
	return cmd
}

// runRun finds the server, runs the load while following it and prints
// what the run found.
func runRun(cmd *cobra.Command, f runFlags) error {
	ctx, stdout, stderr := cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr()
	cfg := f.opts.Config
	prior, err := f.check()
	if err != nil {
		return err
	}
	logger, err := f.logs.logger(cmd)
	if err != nil {
		return err
	}
	clients, err := f.agents.clients(logger)
	if err != nil {
		return err
	}
	var pid int
	var target agent.Target
	if len(clients) > 0 {
		pid, target, err = f.agentServer(cfg.Target.URL)
	} else {
		pid, err = f.localServer(cmd, cfg.Target.URL, logger)
	}
	if err != nil {
		return err
	}
	viaPid, err := f.via.resolve(cmd)
	if err != nil {
		return err
	}
	if viaPid != 0 && len(clients) > 0 {
		return usageError{"--via-pid and --via-port follow a gateway on this node: not with --agent"}
	}
	if err := applyCPUs(*f.cpus); err != nil {
		return err
	}
	if err := load.ResolveModel(ctx, &cfg); err != nil {
		return err
	}
	var finish func()
	cfg.Output.Progress, finish = f.opts.Progress(stderr)
	res, err := runjob.Run(ctx, runjob.RunConfig{
		Load: cfg, Pid: pid, Roots: f.server.roots, OutDir: f.out, Logger: logger, Sections: sessionSections(),
		BaselineITL:   time.Duration(f.baseITL * float64(time.Millisecond)),
		BaselineTTFT:  time.Duration(f.baseTTFT * float64(time.Millisecond)),
		Prior:         prior,
		Readiness:     readinessChecks,
		ServerMetrics: f.sm.url, ServerMetricsPeriod: f.sm.period, Manifest: runManifest(),
		Agents: clients, AgentTarget: target, AgentTCPPort: target.Port,
		ViaPid: viaPid, SpoolBytes: spoolBytes(f.spoolMiB),
	})
	finish()
	if res != nil {
		err = f.printResult(ctx, stdout, res, err, logger)
	}
	return err
}

// check checks the load options and the flags of run alone, and reads
// the quiet run of --baseline (nil when none is given).
func (f *runFlags) check() (*runjob.Prior, error) {
	if err := f.opts.Validate(); err != nil {
		return nil, err
	}
	if err := f.sm.check(); err != nil {
		return nil, err
	}
	for _, b := range []struct {
		flag string
		v    float64
	}{{"baseline-itl-ms", f.baseITL}, {"baseline-ttft-ms", f.baseTTFT}} {
		if b.v < 0 || math.IsNaN(b.v) {
			return nil, usageError{fmt.Sprintf("--%s %v: give 0 (the run's median) or more", b.flag, b.v)}
		}
	}
	if f.spoolMiB < 0 {
		return nil, usageError{fmt.Sprintf("--spool-mib %d: give 0 (correlate live) or more", f.spoolMiB)}
	}
	if f.baseline == "" {
		return nil, nil
	}
	p, err := runjob.LoadPrior(f.baseline)
	if err != nil {
		return nil, usageError{"--baseline: " + err.Error()}
	}
	return p, nil
}

// agentServer returns the server the agents follow on their node: its
// pid there (0 when not given) and their target, from --pid, --port,
// --agent.pod or the port of targetURL.
func (f *runFlags) agentServer(targetURL string) (int, agent.Target, error) {
	// The server is on the agents' node: --pid or --port are its
	// there, or the target URL's port; nothing is checked or traced here.
	server := f.server
	if server.cgroup != "" {
		return 0, agent.Target{}, usageError{"--cgroup selects processes of this node: with --agent, give the server's --pid, --port or --agent.pod"}
	}
	if server.pid != 0 && server.port != 0 {
		return 0, agent.Target{}, usageError{"give --pid or --port, not both"}
	}
	pid, target := server.pid, agent.Target{Pid: server.pid, Port: server.port}
	if f.agents.pod != "" {
		if server.given() {
			return 0, agent.Target{}, usageError{"give --agent.pod or the server's --pid/--port on the agent's node, not both"}
		}
		ref, err := agent.ParsePodRef(f.agents.pod)
		if err != nil {
			return 0, agent.Target{}, usageError{"--agent.pod: " + err.Error()}
		}
		target = agent.Target{Pod: &ref}
	} else if target.Pid == 0 && target.Port == 0 {
		if target.Port = urlPort(targetURL); target.Port == 0 {
			return 0, agent.Target{}, usageError{"with --agent, give the server's --pid or --port on the agent's node, or its --agent.pod"}
		}
	}
	return pid, target, nil
}

// localServer finds the server on this node (its roots in f.server),
// checks that it can be traced and prepares the kernel's file systems.
func (f *runFlags) localServer(cmd *cobra.Command, targetURL string, logger *slog.Logger) (int, error) {
	if f.via.given() && !f.server.given() {
		return 0, usageError{"with --via-pid or --via-port the target URL's port is the gateway's: give the server's --pid or --port"}
	}
	pid, err := f.server.resolve(targetURL, cmd)
	if err != nil {
		return 0, err
	}
	if !caps.CanTrace() {
		return 0, fmt.Errorf("following the server needs privileges: %s", caps.Hint)
	}
	if err := bpfutil.EnsureFilesystems(); err != nil {
		logger.Warn("preparing kernel file systems", "err", err)
	}
	return pid, nil
}

// printResult exports the run's spans, prints its summary and the files
// it wrote, and, when the run itself went well (err nil), fails on the
// share of failed requests.
func (f *runFlags) printResult(ctx context.Context, stdout io.Writer, res *runjob.RunResult, err error, logger *slog.Logger) error {
	if eerr := exportSpans(ctx, f.opts.OTLP, res); eerr != nil {
		logger.Warn("exporting spans", "err", eerr)
	}
	report.WriteTerminal(stdout, res.Doc)
	// Only the files written whole: a full disk names the one it
	// could not write in the error.
	fmt.Fprintln(stdout)
	printWritten(stdout, res.Written)
	if err == nil && ctx.Err() == nil {
		err = load.CheckFailed(res.Load, f.opts.MaxFailedRatio)
	}
	return err
}

// loadCompletions completes the load options' enumerations.
func loadCompletions(cmd *cobra.Command) {
	fixed := func(name string, values ...string) {
		_ = cmd.RegisterFlagCompletionFunc(name, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
	}
	fixed("endpoint", transport.EndpointCompletions, transport.EndpointChat)
	fixed("dataset", dataset.Random, "jsonl", "sharegpt", "rag", "multiturn")
	fixed("trace-time-unit", "s", "ms")
	fixed("otlp-protocol", "grpc", "http/protobuf")
}

// exportSpans sends each request as an OTLP span with its attribution.
func exportSpans(ctx context.Context, oo otlp.Options, res *runjob.RunResult) error {
	if !oo.Enabled() {
		return nil
	}
	exp, err := otlp.New(ctx, oo)
	if err != nil || exp == nil {
		return err
	}
	byReq := map[int]correlate.RequestBlame{}
	if a := res.Doc.Attribution; a != nil {
		for _, r := range a.Requests {
			byReq[r.Request] = r
		}
	}
	for i := range res.Load.Records {
		r := &res.Load.Records[i]
		var extra []attribute.KeyValue
		if b, ok := byReq[r.Index]; ok {
			extra = append(extra, attribute.String("bpfbench.attribution.top_cause", b.TopCause),
				attribute.Float64("bpfbench.attribution.itl_excess_ms", b.ITLExcessMs))
			for name, v := range b.ITLShares {
				extra = append(extra, attribute.Float64("bpfbench.attribution.itl."+name, v))
			}
			for name, v := range b.TTFTShares {
				extra = append(extra, attribute.Float64("bpfbench.attribution.ttft."+name, v))
			}
		}
		exp.ExportWith(&res.Load.Config, r, extra...)
	}
	return exp.Shutdown(ctx)
}

// viaFlags are run's --via-pid and --via-port: a gateway (a proxy) between
// the load and the server, followed with it.
type viaFlags struct{ pid, port int }

func (v *viaFlags) add(fs *pflag.FlagSet) {
	fs.IntVar(&v.pid, "via-pid", 0, "a gateway in front of the server (nginx, any proxy the --target goes through): follow this `PID` and the processes it forked too, and report the time per hop (client → gateway → engine and back)")
	fs.IntVar(&v.port, "via-port", 0, "find the gateway as the process listening on this local TCP `PORT` (as --port finds the server)")
}

func (v *viaFlags) given() bool { return v.pid != 0 || v.port != 0 }

// resolve returns the gateway's pid, or 0 without --via-pid/--via-port.
func (v *viaFlags) resolve(cmd *cobra.Command) (int, error) {
	if v.pid != 0 && v.port != 0 {
		return 0, usageError{"give --via-pid or --via-port, not both"}
	}
	if v.port != 0 {
		pid, err := session.ListenerPid(v.port)
		if err != nil {
			return 0, fmt.Errorf("--via-port: %w", err)
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "gateway: pid %d listens on port %d\n", pid, v.port)
		return pid, nil
	}
	if v.pid != 0 {
		if _, err := session.CheckPid(v.pid); err != nil {
			return 0, fmt.Errorf("--via-pid: %w", err)
		}
	}
	return v.pid, nil
}

// agentFlags are run's --agent options: the bpfbench daemons that follow
// the server on its node.
type agentFlags struct {
	addrs                      []string
	user, passwordFile, caFile string
	pod                        string
}

func (a *agentFlags) add(fs *pflag.FlagSet) {
	fs.StringSliceVar(&a.addrs, "agent", nil, "follow the server through the bpfbench daemon on its node (agent.enabled): `HOST:PORT` or https://HOST:PORT (repeatable, comma-separated); --pid/--port are then the server's on that node")
	fs.StringVar(&a.user, "agent.user", "", "basic auth user of the agents' web configuration")
	fs.StringVar(&a.passwordFile, "agent.password-file", "", "`FILE` holding the agents' basic auth password")
	fs.StringVar(&a.caFile, "agent.ca-file", "", "`FILE` of the CA that signed the agents' TLS certificates")
	fs.StringVar(&a.pod, "agent.pod", "", "follow the server as a Kubernetes pod of the agents' node: `NAMESPACE/POD[/CONTAINER]` (the container may be left out when the pod has one), resolved by each agent from its node's pod list to the root process of that container; instead of --pid/--port")
}

// clients builds a client per --agent (none without it).
func (a *agentFlags) clients(logger *slog.Logger) ([]*agent.Client, error) {
	if len(a.addrs) == 0 {
		if a.user != "" || a.passwordFile != "" || a.caFile != "" || a.pod != "" {
			return nil, usageError{"--agent.user, --agent.password-file, --agent.ca-file and --agent.pod need --agent HOST:PORT"}
		}
		return nil, nil
	}
	httpc, pass, err := a.http()
	if err != nil {
		return nil, err
	}
	var out []*agent.Client
	for _, addr := range a.addrs {
		if addr = strings.TrimSpace(addr); addr == "" {
			continue
		}
		out = append(out, agent.NewClient(addr, agent.ClientOptions{HTTP: httpc, Username: a.user, Password: pass, Logger: logger}))
	}
	return out, nil
}

// http is the client of the daemons' API (--agent.ca-file) and the basic
// auth password (--agent.password-file).
func (a *agentFlags) http() (*http.Client, string, error) {
	tr := &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute}
	if a.caFile != "" {
		pem, err := os.ReadFile(a.caFile)
		if err != nil {
			return nil, "", fmt.Errorf("reading --agent.ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, "", usageError{"--agent.ca-file " + a.caFile + " holds no PEM certificate"}
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	}
	pass := ""
	if a.passwordFile != "" {
		b, err := os.ReadFile(a.passwordFile)
		if err != nil {
			return nil, "", fmt.Errorf("reading --agent.password-file: %w", err)
		}
		pass = strings.TrimSpace(string(b))
	}
	return &http.Client{Transport: tr}, pass, nil
}

// urlPort is the port of a target URL, local or not.
func urlPort(target string) int {
	u, err := url.Parse(target)
	if err != nil {
		return 0
	}
	p, _ := strconv.Atoi(u.Port())
	return p
}

func newReportCmd() *cobra.Command {
	var baseline, out string
	cmd := &cobra.Command{
		Use:   "report DIR [--baseline DIR2 [--out DIR3]]",
		Short: "Re-render report.html and the terminal summary of a run directory, or compare its critical path with another run's baseline",
		Long: `Reads DIR/result.json (written by run, demo, validate or sweep --pid), writes
DIR/report.html again (one self-contained page) and prints the run's
terminal summary.

With --baseline DIR2, the critical path's excess is computed again against
the normal gaps of DIR2, a quiet run recorded earlier (from DIR's
gaps.jsonl.gz): the p99 bands, the slowest gaps' excess and the phases'
added shares. The union-of-activity attribution stays as recorded (its
intervals are not kept). The result goes to --out (default DIR/vs-NAME,
NAME being DIR2's base name): result.json and report.html; DIR is left as
it was.`,
		Example: `  bpfbench report bpfbench-demo
  bpfbench report contended --baseline quiet`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{"report needs the run directory: bpfbench report DIR"}
			}
			return nil
		},
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return nil, cobra.ShellCompDirectiveFilterDirs
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if out != "" && baseline == "" {
				return usageError{"--out goes with --baseline (without it, report writes DIR/report.html)"}
			}
			return runReport(cmd.OutOrStdout(), args[0], baseline, out)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&baseline, "baseline", "", "a quiet run recorded earlier (its `DIR` or result.json) whose normal gaps the critical path is compared with")
	fs.StringVar(&out, "out", "", "with --baseline, the `DIR` for the compared result.json and report.html (default DIR/vs-NAME)")
	_ = cmd.MarkFlagDirname("baseline")
	_ = cmd.MarkFlagDirname("out")
	return cmd
}

func runReport(stdout io.Writer, dir, baseline, out string) error {
	doc, err := result.Load(filepath.Join(dir, "result.json"))
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "trace.json")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if doc.Legacy() {
		// Written when the activity model was the attribution: the
		// critical path's gaps rebuild it; without them, the activity
		// model's causes leave the timeline and phases.
		if err := runjob.RebuildAttribution(doc, dir); err != nil {
			fmt.Fprintf(os.Stderr, "bpfbench report: %s was written by an older bpfbench whose attribution was overlapping activity; %v: the attribution shows the critical path's figures only\n", dir, err)
			doc.ForgetActivityCauses()
		}
	}
	outDir := dir
	if baseline != "" {
		prior, err := runjob.LoadPrior(baseline)
		if err != nil {
			return usageError{"--baseline: " + err.Error()}
		}
		if err := runjob.Rebase(doc, dir, prior); err != nil {
			return err
		}
		if outDir = out; outDir == "" {
			outDir = filepath.Join(dir, "vs-"+filepath.Base(filepath.Clean(strings.TrimSuffix(baseline, "result.json"))))
		}
		if err := os.MkdirAll(outDir, 0o755); err != nil {
			return fmt.Errorf("creating --out %s: %w", outDir, err)
		}
		doc.Diagnosis = report.Diagnose(doc)
		if err := doc.WriteFile(filepath.Join(outDir, "result.json")); err != nil {
			return err
		}
	}
	if doc.Diagnosis == nil {
		doc.Diagnosis = report.Diagnose(doc)
	}
	if err := report.WriteHTMLFile(filepath.Join(outDir, "report.html"), doc); err != nil {
		return err
	}
	report.WriteTerminal(stdout, doc)
	if baseline != "" {
		fmt.Fprintf(stdout, "\ncritical path compared with the baseline of %s\nwrote %s and %s\n", baseline,
			filepath.Join(outDir, "result.json"), filepath.Join(outDir, "report.html"))
		return nil
	}
	fmt.Fprintf(stdout, "\nwrote %s\n", filepath.Join(outDir, "report.html"))
	return nil
}

// spoolBytes is --spool-mib for runjob.RunConfig.SpoolBytes (0: live).
func spoolBytes(mib int) int64 {
	if mib == 0 {
		return -1
	}
	return int64(mib) << 20
}
