package live

import (
	"fmt"
	"slices"
	"strings"

	"github.com/bpfbench/bpfbench/correlate/critpath"
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
	// Gaps are the recent gaps judged; P99Ns their p99.
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
}

// Check judges the gaps rec holds at now against n; it reports whether
// the rule fires (its criteria held for For). The state restarts after a
// firing, so a rule that keeps holding fires again after another For.
func (w *Watch) Check(rec *Recorder, n Normal, now int64) (Reading, bool) {
	r := w.Trigger.withDefaults()
	rd := Reading{At: now, Normal: n}
	var recent []Gap
	rec.gapsSince(now-r.Over, func(g Gap) {
		if g.Index > 1 {
			recent = append(recent, g)
		}
	})
	rd.Gaps = len(recent)
	if len(recent) > 0 {
		durs := make([]int64, len(recent))
		for i, g := range recent {
			durs[i] = g.Duration()
		}
		slices.Sort(durs)
		rd.P99Ns = Quantile(durs, 0.99)
		if n.OK {
			rd.Band = Band(slices.Values(recent), n.Base, false)
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
