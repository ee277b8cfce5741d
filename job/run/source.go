package run

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/bpfbench/bpfbench/agent"
	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/result"
	"github.com/bpfbench/bpfbench/session"
)

// source follows the server while the load runs and hands what it sees
// to a collectors.Recorder (the run's pipeline): a session on this node
// (localSource) or sessions at the agents of the server's nodes
// (remoteRun, agents.go). Run drives either the same way: start, follow
// a gateway, run until stopped or the target exits, stop, describe.
type source interface {
	// start begins collecting, each span to rec; on an error it has
	// released what it took.
	start(ctx context.Context, rec collectors.Recorder) error
	// follow adds a gateway's processes (and those it forked) to the
	// target and returns them.
	follow(pid int) ([]int, error)
	// run collects until ctx is done.
	run(ctx context.Context) error
	// exited is closed when the target exits (nil: never told).
	exited() <-chan struct{}
	// comm is the target's command name.
	comm() string
	// stop ends collection once run has returned, and waits for what
	// remained to be delivered. close releases what start took, for a run
	// that does not go on; both may be called again.
	stop()
	close()
	// localPid is the target's pid when its /proc is readable here (the
	// manifest, thread names), else 0.
	localPid() int
	// sections are the sections whose counter tracks go into trace.json.
	sections() []collectors.Section
	// describe fills doc's collection, the sections' summaries and the
	// observer's overhead (and the agents).
	describe(doc *result.Document, res *loadgen.Result, st collected)
}

// collected is what the run knows of its collection when it ends.
type collected struct {
	spans, dropped uint64
	corr           *result.Correlation
	// stoppedNs and reason say when and why collection stopped;
	// interrupted is true when the run was.
	stoppedNs   int64
	reason      string
	interrupted bool
}

// newSource is cfg's source: the agents when given, else a session here.
func newSource(cfg RunConfig) source {
	if len(cfg.Agents) > 0 {
		req := agent.StartRequest{Target: cfg.AgentTarget, TCPPort: cfg.AgentTCPPort}
		return &remoteRun{clients: cfg.Agents, req: req, log: cfg.Logger}
	}
	return &localSource{
		opts:      collectors.Options{Pid: cfg.Pid, Roots: cfg.Roots, Interval: time.Second, Logger: cfg.Logger},
		factories: cfg.Sections,
		log:       cfg.Logger.With("component", "run"),
	}
}

// localSource is a session on this node.
type localSource struct {
	opts      collectors.Options
	factories []session.SectionFactory
	log       *slog.Logger
	sess      *session.Session
}

func (l *localSource) start(ctx context.Context, rec collectors.Recorder) error {
	l.opts.Recorder = rec
	sess, err := session.NewSession(l.opts, l.factories)
	if err != nil {
		return err
	}
	if err := sess.Start(ctx); err != nil {
		return err
	}
	l.sess = sess
	return nil
}

func (l *localSource) follow(pid int) ([]int, error) {
	pids, err := l.sess.Follow(pid)
	if len(pids) == 0 {
		return nil, fmt.Errorf("following the gateway: %w", err)
	}
	if err != nil {
		l.log.Warn("following the gateway", "pids", pids, "err", err)
	}
	return pids, nil
}

func (l *localSource) run(ctx context.Context) error { return l.sess.Run(ctx, 0, nil) }
func (l *localSource) exited() <-chan struct{}       { return l.sess.Exited() }
func (l *localSource) comm() string                  { return l.sess.Comm() }
func (l *localSource) stop()                         { l.sess.Close() }
func (l *localSource) localPid() int                 { return l.opts.Pid }

func (l *localSource) sections() []collectors.Section {
	if l.sess == nil {
		return nil
	}
	return l.sess.Sections()
}

func (l *localSource) close() {
	if l.sess != nil {
		l.sess.Close()
	}
}

func (l *localSource) describe(doc *result.Document, res *loadgen.Result, st collected) {
	sess := l.sess
	for _, sec := range sess.Sections() {
		doc.Collectors.Set(sec.Name(), sec.Summary())
	}
	anchor := sess.Anchor()
	doc.Collection = &result.Collection{
		Pid: l.opts.Pid, Comm: sess.Comm(),
		Started: anchor.ToWall(sess.StartNs()), Stopped: anchor.ToWall(st.stoppedNs),
		StartedOffsetS: float64(sess.StartNs()-res.StartNs) / 1e9,
		StoppedOffsetS: float64(st.stoppedNs-res.StartNs) / 1e9,
		StoppedReason:  st.reason, LostEvents: sess.Lost(),
		Spans: st.spans, SpansDropped: st.dropped,
		Unavailable: sess.Unavailable(), Correlation: st.corr,
	}
	ov := sess.Overhead()
	doc.Overhead = &ov
}

// viaComm is the gateway's command name, for the report.
func viaComm(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
