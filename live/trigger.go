package live

import (
	"fmt"
	"slices"
	"strings"

	"github.com/bpfbench/bpfbench/correlate/critpath"
	"github.com/bpfbench/bpfbench/internal/hist"
	"github.com/bpfbench/bpfbench/result"
)

// Trigger is when a target's live view calls its recent gaps an incident:
// every criterion set holds over the gaps after the first token that
// ended in the last Over, at every check for For. The zero criteria are
// not judged; a rule with none never holds.
type Trigger struct {
	// P99Ms: the recent gaps' p99 above this many ms.
	P99Ms float64
	// P99Times: the recent gaps' p99 at least this many times the normal
	// gap's p99 (the rolling baseline's quiet window).
	P99Times float64
	// Cause and Share: the cause's share of the recent p99 band's excess
	// over the normal gap at least Share (0-1).
	Cause string
	Share float64
	// For is how long the criteria hold before the rule fires (ns;
	// default 30 s), Over the recent gaps judged at each check (ns;
	// default 10 s), MinGaps the fewest recent gaps judged (default 20).
	For, Over int64
	MinGaps   int
}

// DefaultTrigger is what a live target is watched for unconfigured: its
// gaps' p99 at least three times the normal gap's for 30 s.
func DefaultTrigger() Trigger { return Trigger{P99Times: 3, For: 30e9, Over: 10e9, MinGaps: 20} }

// Empty says whether r has no criterion.
func (r Trigger) Empty() bool {
	return r.P99Ms <= 0 && r.P99Times <= 0 && (r.Cause == "" || r.Share <= 0)
}

func (r Trigger) withDefaults() Trigger {
	if r.For <= 0 {
		r.For = 30e9
	}
	if r.Over <= 0 {
		r.Over = 10e9
	}
	if r.MinGaps <= 0 {
		r.MinGaps = 20
	}
	return r
}

// Recent is the recent window a check judges (Over, defaulted).
func (r Trigger) Recent() int64 { return r.withDefaults().Over }

// String is the rule as a log line says it.
func (r Trigger) String() string {
	r = r.withDefaults()
	var parts []string
	if r.P99Ms > 0 {
		parts = append(parts, fmt.Sprintf("gap p99 over %s", msStr(r.P99Ms)))
	}
	if r.P99Times > 0 {
		parts = append(parts, fmt.Sprintf("gap p99 at least %g× the normal p99", r.P99Times))
	}
	if r.Cause != "" && r.Share > 0 {
		parts = append(parts, fmt.Sprintf("%s at least %.0f%% of the p99 gaps' excess", r.Cause, 100*r.Share))
	}
	if len(parts) == 0 {
		return "no criterion"
	}
	return fmt.Sprintf("%s, over %.0fs of gaps, for %.0fs", strings.Join(parts, " and "), float64(r.Over)/1e9, float64(r.For)/1e9)
}

// Validate says what is wrong with r.
func (r Trigger) Validate() error {
	if r.Cause != "" && !slices.Contains(critpath.CauseNames(), r.Cause) {
		return fmt.Errorf("cause %q is not one of %s", r.Cause, strings.Join(critpath.CauseNames(), ", "))
	}
	if r.Share < 0 || r.Share > 1 {
		return fmt.Errorf("share %g is not within 0-1", r.Share)
	}
	if r.P99Ms < 0 || r.P99Times < 0 || r.For < 0 || r.Over < 0 || r.MinGaps < 0 {
		return fmt.Errorf("negative figure in %+v", r)
	}
	return nil
}

// Reading is what one check of a rule read.
type Reading struct {
	At int64
	// Gaps are the recent gaps judged (those walked within the recent
	// window); P99Ns their p99 (of a log-linear histogram: within 1.6%).
	Gaps  int
	P99Ns int64
	// Normal is the normal gap judged against.
	Normal Normal
	// Band is the recent gaps' p99 band against the normal gap.
	Band *result.CriticalBand
	// Holds: every criterion holds now; Since: since when without a
	// break (0: not holding).
	Holds bool
	Since int64
}

// Watch is a rule's state on one target's live view.
type Watch struct {
	Trigger Trigger
	since   int64
	// buckets are the gaps after the first token walked since each of the
	// last checks of the recent window, as histograms (each gap is taken
	// once: seq is the recorder's sequence at the last check); recent is
	// reused for a band.
	buckets []watchBucket
	seq     uint64
	recent  []Gap
	// all is the merge, free the buckets' histograms to reuse.
	all  hist.LogLinear
	free []hist.LogLinear
}

type watchBucket struct {
	at int64
	h  hist.LogLinear
}

// Check judges the gaps rec holds at now against the normal gap (normal
// is asked only when a criterion needs it); it reports whether the rule
// fires (its criteria held for For). The state restarts after a firing,
// so a rule that keeps holding fires again after another For. The recent
// gaps' band (a cause's share) is taken only when the cause is a
// criterion or the others hold.
func (w *Watch) Check(rec *Recorder, normal func() Normal, now int64) (Reading, bool) {
	r := w.Trigger.withDefaults()
	rd := Reading{At: now}
	// The gaps walked since the last check, in a bucket of their own;
	// the buckets of the recent window merged give its p99 (a log-linear
	// histogram's, within 1.6%).
	i := 0
	for i < len(w.buckets) && w.buckets[i].at <= now-r.Over {
		i++
	}
	for _, old := range w.buckets[:i] {
		old.h.Reset()
		w.free = append(w.free, old.h)
	}
	w.buckets = slices.Delete(w.buckets, 0, i)
	b := watchBucket{at: now}
	if n := len(w.free); n > 0 {
		b.h, w.free = w.free[n-1], w.free[:n-1]
	}
	w.seq = rec.since(w.seq, func(g Gap) {
		if g.Index > 1 {
			b.h.Add(uint64(max(g.Duration(), 0)))
		}
	})
	w.buckets = append(w.buckets, b)
	w.all.Reset()
	for k := range w.buckets {
		w.all.Merge(&w.buckets[k].h)
	}
	rd.Gaps = int(w.all.Count())
	if rd.Gaps >= r.MinGaps && !r.Empty() {
		rd.P99Ns = int64(w.all.Quantile(0.99))
		if r.P99Ms <= 0 || Ms(rd.P99Ns) > r.P99Ms {
			rd.Normal = normal()
		}
		if rd.Normal.OK && (r.Cause != "" || w.Trigger.holds(r, rd)) {
			w.recent = w.recent[:0]
			rec.gapsSince(now-r.Over, func(g Gap) {
				if g.Index > 1 {
					w.recent = append(w.recent, g)
				}
			})
			rd.Band = Band(slices.Values(w.recent), rd.Normal.Base, false)
		}
	}
	rd.Holds = w.Trigger.holds(r, rd)
	if !rd.Holds {
		w.since = 0
		return rd, false
	}
	if w.since == 0 {
		w.since = now
	}
	rd.Since = w.since
	if now-w.since < r.For {
		return rd, false
	}
	w.since = 0
	return rd, true
}

func (Trigger) holds(r Trigger, rd Reading) bool {
	if r.Empty() || rd.Gaps < r.MinGaps {
		return false
	}
	if r.P99Ms > 0 && Ms(rd.P99Ns) <= r.P99Ms {
		return false
	}
	if r.P99Times > 0 && (!rd.Normal.OK || rd.Normal.P99Ns <= 0 || float64(rd.P99Ns) < r.P99Times*float64(rd.Normal.P99Ns)) {
		return false
	}
	if r.Cause != "" && r.Share > 0 && (rd.Band == nil || rd.Band.ExcessShares[r.Cause] < r.Share) {
		return false
	}
	return true
}
