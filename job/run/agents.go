package run

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bpfbench/bpfbench/result"

	"github.com/bpfbench/bpfbench/agent"
	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/loadgen"
)

// agentStopTimeout bounds each agent's stop after the load.
const agentStopTimeout = 15 * time.Second

// remoteRun is the server followed through the agents of its nodes: one
// session on each, their spans fed into the run's Recorder on the local
// clock, so correlation and the critical path see one timeline.
//
// The attribution never claims a cause for time the clock error could
// have put outside a gap: every remote span is eroded by its agent's
// clock bound in force when it arrived (the widest of that agent's
// estimates so far) at both ends before correlation and the critical path see it (erode);
// a span no longer than twice the bound vanishes and is counted
// (agents[].spans_below_clock_bound).
type remoteRun struct {
	clients []*agent.Client
	req     agent.StartRequest
	log     *slog.Logger
	rec     collectors.Recorder
	remotes []*remote
	stopped bool
	// bound is the widest clock bound of every agent so far (ns):
	// result.json's clock_bound_ns.
	bound atomic.Int64
}

type remote struct {
	c    *agent.Client
	s    *agent.Session
	done chan struct{}
	// received and below count the spans that arrived and those no
	// longer than twice the clock bound (eroded away); eroded is the
	// time taken off the others (ns).
	received, below atomic.Uint64
	eroded          atomic.Int64
	// bound is this agent's widest clock bound so far (ns): its spans'
	// error on the local clock.
	bound atomic.Int64
	col   agent.Collection
	err   error
}

// start starts a session on the target at every agent, fails fast
// (stopping those already started) when one cannot start, and feeds every
// span into rec until the sessions are stopped.
func (rr *remoteRun) start(ctx context.Context, rec collectors.Recorder) error {
	rr.rec = rec
	for _, c := range rr.clients {
		s, err := c.Start(ctx, rr.req)
		if err != nil {
			rr.abort()
			rr.stopped = true
			return fmt.Errorf("starting the session on agent %s: %w", c.Agent(), err)
		}
		r := &remote{c: c, s: s, done: make(chan struct{})}
		rr.widen(r, s.Clock().BoundNs)
		pod := ""
		if s.Info.Pod != nil {
			pod = s.Info.Pod.String()
		}
		rr.log.Info("agent session", "agent", c.Agent(), "session", s.Info.ID, "pid", s.Info.Pid, "comm", s.Info.Comm, "pod", pod,
			"offset_ns", s.Clock().OffsetNs, "bound_ns", s.Clock().BoundNs)
		rr.remotes = append(rr.remotes, r)
		go rr.drain(r)
	}
	return nil
}

// follow is refused: a gateway is followed on this node only.
func (rr *remoteRun) follow(int) ([]int, error) {
	return nil, errors.New("--via-pid/--via-port follow a gateway on this node: not with --agent")
}

// run waits for the run's end: the sessions deliver on their own
// (drain) until stop.
func (rr *remoteRun) run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// exited is never closed: an agent's session that ends says so when
// stopped (its collection).
func (rr *remoteRun) exited() <-chan struct{} { return nil }

func (rr *remoteRun) comm() string {
	if len(rr.remotes) == 0 {
		return ""
	}
	return rr.remotes[0].s.Info.Comm
}

// localPid is 0: the server is on another node, its /proc not here.
func (rr *remoteRun) localPid() int { return 0 }

// sections are none here: the agents' summaries come with their
// collections.
func (rr *remoteRun) sections() []collectors.Section { return nil }

// close stops every session, unless stop did.
func (rr *remoteRun) close() {
	if !rr.stopped {
		rr.stopped = true
		rr.abort()
	}
}

// describe is the run's collection from the agents' sessions, the
// agents[] of result.json and the widest clock bound.
func (rr *remoteRun) describe(doc *result.Document, res *loadgen.Result, st collected) {
	rr.collection(res, doc, st.spans, st.dropped)
	doc.Collection.Correlation = st.corr
	if st.interrupted {
		doc.Collection.StoppedReason = "interrupted; " + doc.Collection.StoppedReason
	}
	doc.Agents = rr.report(res)
	doc.ClockBoundNs = rr.boundNs()
}

// widen raises r's bound, and the run's, to ns when it is wider.
func (rr *remoteRun) widen(r *remote, ns int64) {
	raise(&r.bound, ns)
	raise(&rr.bound, ns)
}

func raise(a *atomic.Int64, ns int64) {
	for {
		cur := a.Load()
		if ns <= cur || a.CompareAndSwap(cur, ns) {
			return
		}
	}
}

// drain reads a session's spans until the stream closes (a stalled reader
// would stall the stream and make the agent drop its oldest spans).
func (rr *remoteRun) drain(r *remote) {
	defer close(r.done)
	n := 0
	for batch := range r.s.Spans() {
		// The clock is re-estimated every few seconds: follow its bound.
		if n++; n%64 == 1 {
			rr.widen(r, r.s.Clock().BoundNs)
		}
		bound := r.bound.Load()
		for _, sp := range batch {
			rr.admit(r, sp, bound)
		}
	}
}

// admit feeds one remote span, eroded by bound, to the run's Recorder.
func (rr *remoteRun) admit(r *remote, sp collectors.Span, bound int64) {
	r.received.Add(1)
	e, ok := erode(sp, bound)
	if !ok {
		r.below.Add(1)
		return
	}
	r.eroded.Add((sp.End - sp.Start) - (e.End - e.Start))
	rr.rec.Record(e)
}

// erode narrows a remote span to the local time it surely covers. Mapped
// with an offset known within ±bound, the span truly lies at
// [Start+d, End+d] on the local clock for some |d| <= bound; the instants
// inside it whatever d is are [Start+bound, End-bound]. Joined with a
// gap (whose ends are local, exact), the eroded span gives a cause at
// most the overlap the span has at every offset within the bound, so no
// cause is given time the clock error could have put outside the gap.
// A span no longer than 2*bound covers no instant surely: ok is false.
// Instants (Start == End: sends, arrivals, forks) claim no time and pass
// unchanged, as does everything when bound is 0; the wakeup of an
// off-CPU span (WakeTs) is kept (the critical path clamps it into the
// span).
func erode(sp collectors.Span, bound int64) (collectors.Span, bool) {
	if bound <= 0 || sp.End == sp.Start {
		return sp, true
	}
	if sp.End-sp.Start <= 2*bound {
		return sp, false
	}
	sp.Start += bound
	sp.End -= bound
	return sp, true
}

// abort stops every session started, for a run that does not go on.
func (rr *remoteRun) abort() {
	for _, r := range rr.remotes {
		ctx, cancel := context.WithTimeout(context.Background(), agentStopTimeout)
		_, _ = r.s.Stop(ctx)
		cancel()
	}
}

// stop ends every session after the load, in parallel, and waits for
// their streams to deliver what remained. A session cut short keeps what
// it delivered; its collection says when it stopped.
func (rr *remoteRun) stop() {
	if rr.stopped {
		return
	}
	rr.stopped = true
	var wg sync.WaitGroup
	for _, r := range rr.remotes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), agentStopTimeout)
			defer cancel()
			r.col, r.err = r.s.Stop(ctx)
			<-r.done
			if r.err != nil {
				var se *agent.StreamError
				if errors.As(r.err, &se) {
					rr.log.Warn("agent session cut short; the load result stays", "agent", r.c.Agent(), "err", r.err)
				} else {
					rr.log.Warn("stopping the agent session", "agent", r.c.Agent(), "err", r.err)
				}
			}
			rr.widen(r, r.s.Clock().BoundNs)
			rr.log.Info("agent spans eroded by the clock bound", "agent", r.c.Agent(), "received", r.received.Load(),
				"vanished", r.below.Load(), "eroded_ns", r.eroded.Load(), "bound_ns", r.bound.Load())
		}()
	}
	wg.Wait()
}

// report is the agents[] of result.json.
func (rr *remoteRun) report(res *loadgen.Result) []result.Agent {
	var out []result.Agent
	for _, r := range rr.remotes {
		a := r.col
		a.StoppedOffsetS = float64(a.StoppedNs-res.StartNs) / 1e9
		a.Received, a.BelowClockBound = r.received.Load(), r.below.Load()
		a.Clock = r.s.Clock()
		if a.Summary == nil { // a session never stopped
			a.Summary = &result.Collectors{}
		}
		if !a.Complete {
			for i := range res.Records {
				if res.Records[i].StartNs > a.StoppedNs {
					a.UncollectedRequests++
				}
			}
		}
		out = append(out, a)
	}
	return out
}

// collection is the run's collection section from the agents' sessions:
// the first agent's target, the earliest start and stop, the sums of
// what was lost and dropped; the sections' summaries go into collectors
// (by section name with one agent, "AGENT/section" with more).
func (rr *remoteRun) collection(res *loadgen.Result, doc *result.Document, spans, dropped uint64) {
	c := &result.Collection{Spans: spans, SpansDropped: dropped, Unavailable: map[string]string{}}
	reasons := ""
	for i, r := range rr.remotes {
		col := r.col
		if i == 0 {
			c.Pid, c.Comm = col.Pid, col.Comm
			c.Started, c.Stopped = r.s.Info.Anchor.ToWall(r.s.Info.StartNs), col.StoppedAt
			c.StartedOffsetS = float64(col.StartNs-res.StartNs) / 1e9
			c.StoppedOffsetS = float64(col.StoppedNs-res.StartNs) / 1e9
		} else if off := float64(col.StoppedNs-res.StartNs) / 1e9; off < c.StoppedOffsetS {
			c.Stopped, c.StoppedOffsetS = col.StoppedAt, off
		}
		c.LostEvents += col.Lost
		c.SpansDropped += col.Dropped
		why := col.Reason
		if !col.Complete {
			why = "collection stopped"
			if col.Error != "" {
				why = col.Error
			}
		}
		if reasons != "" {
			reasons += "; "
		}
		reasons += "agent " + col.Agent + ": " + why
		for k, v := range col.Unavailable {
			if len(rr.remotes) > 1 {
				k = col.Agent + "/" + k
			}
			c.Unavailable[k] = v
		}
		if len(rr.remotes) == 1 {
			// Several agents' sections are each agent's (agents[].summary).
			sum := result.Collectors{}
			if col.Summary != nil {
				sum = *col.Summary
			}
			doc.Collectors = &sum
		}
	}
	c.StoppedReason = reasons
	doc.Collection = c
}

// boundNs is the widest clock bound of the run's agents.
func (rr *remoteRun) boundNs() int64 { return rr.bound.Load() }
