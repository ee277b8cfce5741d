package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/bpfbench/bpfbench/collectors/bpfutil"
	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/job"
	"github.com/bpfbench/bpfbench/session"

	"github.com/bpfbench/bpfbench/exporter/otlp"
	"github.com/bpfbench/bpfbench/exporter/report"
	"github.com/bpfbench/bpfbench/internal/caps"
	"github.com/bpfbench/bpfbench/job/load"
	"github.com/bpfbench/bpfbench/loadgen"
)

func init() {
	register("run", command{
		summary: "load a server while following its process, then blame each token's latency on its causes",
		run:     runRun,
	})
	register("report", command{
		summary: "re-render report.html and the terminal summary of a run directory",
		run:     runReport,
	})
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

func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run", stderr, "run --target URL (--pid PID | --port PORT) [load options] --out DIR")
	cfg := loadgen.DefaultConfig()
	cfg.RegisterFlags(fs)
	pid := fs.Int("pid", 0, "the server's process id")
	port := fs.Int("port", 0, "find the server as the process listening on this local TCP port (default: the --target URL's port when local)")
	out := fs.String("out", "", "directory for result.json, trace.json and report.html")
	baseITL := fs.Float64("baseline-itl-ms", 0, "a normal inter-token gap in ms (default: the run's median)")
	baseTTFT := fs.Float64("baseline-ttft-ms", 0, "a normal time to first token in ms (default: the run's median)")
	logLevel := fs.String("log-level", "warn", "debug, info, warn or error")
	cpus := cpusFlag(fs)
	var oo otlp.Options
	oo.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if *pid != 0 && *port != 0 {
		return usageError{"give --pid or --port, not both"}
	}
	logger, err := newLogger(stderr, *logLevel, "text")
	if err != nil {
		return usageError{err.Error()}
	}
	if *pid == 0 {
		p := *port
		if p == 0 {
			p = serverPort(cfg.Target)
		}
		if p == 0 {
			return usageError{"give the server's --pid, or --port PORT it listens on here"}
		}
		if *pid, err = session.ListenerPid(p); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "server: pid %d listens on port %d\n", *pid, p)
	}
	if _, err := session.CheckPid(*pid); err != nil {
		return err
	}
	if !caps.CanTrace() {
		return fmt.Errorf("following the server needs privileges: %s", caps.Hint)
	}
	if err := bpfutil.EnsureFilesystems(); err != nil {
		logger.Warn("preparing kernel file systems", "err", err)
	}
	if err := applyCPUs(*cpus); err != nil {
		return err
	}
	var finish func()
	cfg.Progress, finish = load.Progress(stderr)
	res, err := job.Run(ctx, job.RunConfig{
		Load: cfg, Pid: *pid, OutDir: *out, Logger: logger, Sections: sessionSections(),
		BaselineITL:  time.Duration(*baseITL * float64(time.Millisecond)),
		BaselineTTFT: time.Duration(*baseTTFT * float64(time.Millisecond)),
		Readiness:    readinessChecks,
	})
	finish()
	if res != nil {
		if eerr := exportSpans(ctx, oo, res); eerr != nil {
			logger.Warn("exporting spans", "err", eerr)
		}
		report.WriteTerminal(stdout, res.Doc)
		fmt.Fprintf(stdout, "\nwrote %s, %s and %s\n", filepath.Join(res.Dir, "result.json"),
			filepath.Join(res.Dir, "trace.json"), filepath.Join(res.Dir, "report.html"))
	}
	return err
}

// exportSpans sends each request as an OTLP span with its attribution.
func exportSpans(ctx context.Context, oo otlp.Options, res *job.RunResult) error {
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

func runReport(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("report", stderr, "report DIR")
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{"report needs the run directory: bpfbench report DIR"}
	}
	dir := fs.Arg(0)
	doc, err := report.ReadFile(filepath.Join(dir, "result.json"))
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "trace.json")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if doc.Diagnosis == nil {
		doc.Diagnosis = report.Diagnose(doc)
	}
	f, err := os.Create(filepath.Join(dir, "report.html"))
	if err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	if err := report.WriteHTML(f, doc); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	report.WriteTerminal(stdout, doc)
	fmt.Fprintf(stdout, "\nwrote %s\n", filepath.Join(dir, "report.html"))
	return nil
}
