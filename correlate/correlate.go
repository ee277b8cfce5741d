// Package correlate joins the load generator's token intervals with the
// collectors' activity on one CLOCK_MONOTONIC timeline and attributes each
// interval's excess latency to causes.
//
// The model (docs/architecture.md, "Attribution model"): for a token interval
// [a, b] (the first one is the TTFT, from send to first token), each cause's
// active time inside [a, b] is the measure of the union of its activity
// spans for the target, so several threads waiting at once count once.
// Network spans only count for the request whose client port they carry.
// The interval's excess over a baseline is split over the causes in
// proportion to their active time, capped at the excess; what no cause
// covers is unexplained.
//
// Refinement (measured, see the notes of the correlation issue): a cause
// that is active during normal intervals too (a server's threads wait a
// little for a CPU at every step) would otherwise soak up every excess,
// and process-wide activity would pile up on every long interval (a
// request stalled by its own slow-reading client for 3 s overlaps 3 s of
// the server's ordinary run-queue waits). The engine therefore subtracts
// each cause's baseline activity, the interval's length times the cause's
// normal active fraction, before splitting: only activity above normal
// explains latency above normal.
package correlate

import (
	"fmt"
	"sort"
)

// Cause is one reason a token can be late.
type Cause uint8

// The causes.
const (
	CPURunqueue     Cause = iota // server threads runnable, not running
	IOBlock                      // block IO in flight, or threads in uninterruptible sleep
	GPUSync                      // server threads inside a blocking CUDA call
	NetBackpressure              // the request's connection window- or buffer-limited, or retransmitting
	NumCauses
)

// Unexplained indexes the unexplained share after the causes.
const Unexplained = int(NumCauses)

var causeNames = [...]string{"cpu_runqueue", "io_block", "gpu_sync", "net_backpressure", "unexplained"}

func (c Cause) String() string {
	if int(c) < len(causeNames) {
		return causeNames[c]
	}
	return fmt.Sprintf("cause(%d)", c)
}

// CauseNames lists the causes and "unexplained", in share order.
func CauseNames() []string { return causeNames[:] }

// Activity is a span during which a cause was active for the target.
type Activity struct {
	Cause      Cause
	Start, End int64  // CLOCK_MONOTONIC ns
	Tid        uint32 // thread, when known
	// Port is the client port of the connection, for NetBackpressure
	// (0: the whole process, which no request claims alone).
	Port uint16
}

// Interval is one token interval seen by the client.
type Interval struct {
	Request    int   // request index
	Index      int   // 0 is the TTFT (send to first token), then each gap
	Start, End int64 // CLOCK_MONOTONIC ns
	Port       uint16
}

// Duration is End-Start in ns.
func (iv Interval) Duration() int64 { return iv.End - iv.Start }

// Blame is the attribution of one interval.
type Blame struct {
	Interval
	BaselineNs int64
	ExcessNs   int64
	// Active is each cause's union active time inside the interval.
	Active [NumCauses]int64
	// AttributedNs is the excess given to each cause and, last, to
	// unexplained; it sums to ExcessNs.
	AttributedNs [NumCauses + 1]int64
}

// Shares are the fractions of the excess per cause and unexplained; they
// sum to 1 when there is an excess and are all 0 otherwise.
func (b Blame) Shares() [NumCauses + 1]float64 {
	var s [NumCauses + 1]float64
	if b.ExcessNs <= 0 {
		return s
	}
	for i, v := range b.AttributedNs {
		s[i] = float64(v) / float64(b.ExcessNs)
	}
	return s
}

// Baseline is what a normal interval looks like.
type Baseline struct {
	TTFTNs int64 // a normal time to first token
	ITLNs  int64 // a normal inter-token gap
	// Rate is each cause's normal active fraction of an interval (0..1).
	Rate [NumCauses]float64
}

// Measurement is what the attribution of one interval needs from the
// activity: the interval and each cause's union active time inside it. A
// baseline turns it into a Blame (Attribute), so a run can measure its
// intervals while it goes, forget the activity, and attribute at the end
// once the baseline (the run's medians) is known.
type Measurement struct {
	Interval
	Active [NumCauses]int64
}

// Engine attributes intervals as activity arrives, keeping only what
// pending intervals can still overlap: memory is bounded by the activity
// within the longest pending interval, and each interval costs
// O(log n + overlapping spans).
type Engine struct {
	base    Baseline
	acts    [NumCauses][]Activity // sorted by Start
	maxDur  [NumCauses]int64
	pending []Interval
	dropped uint64
	// floor is a lower bound of the Start of intervals not added yet
	// (SetFloor); activity ending before it, and before every pending
	// interval, is forgotten.
	floor int64
	// measured is the latest End of a measured interval: activity starting
	// before it arrived too late for intervals already measured.
	measured int64
	late     uint64
}

// NewEngine returns an engine for base.
func NewEngine(base Baseline) *Engine {
	return &Engine{base: base, floor: maxNs, measured: minNs}
}

const (
	maxNs = int64(^uint64(0) >> 1)
	minNs = -maxNs - 1
)

// AddActivity adds a span; spans may arrive out of order.
func (e *Engine) AddActivity(a Activity) {
	if a.End <= a.Start || a.Cause >= NumCauses {
		e.dropped++
		return
	}
	if a.Start < e.measured {
		e.late++
	}
	s := e.acts[a.Cause]
	i := len(s)
	if i > 0 && s[i-1].Start > a.Start {
		i = sort.Search(len(s), func(j int) bool { return s[j].Start > a.Start })
	}
	s = append(s, Activity{})
	copy(s[i+1:], s[i:])
	s[i] = a
	e.acts[a.Cause] = s
	if d := a.End - a.Start; d > e.maxDur[a.Cause] {
		e.maxDur[a.Cause] = d
	}
}

// Dropped counts activity spans rejected as malformed.
func (e *Engine) Dropped() uint64 { return e.dropped }

// Late counts activity spans that started before the end of an interval
// already measured: they arrived after the watermark passed them, and the
// intervals measured before they came do not count them.
func (e *Engine) Late() uint64 { return e.late }

// AddInterval queues an interval until the watermark passes its end.
func (e *Engine) AddInterval(iv Interval) { e.pending = append(e.pending, iv) }

// SetFloor promises that every interval added from now on starts at or
// after ns, so that activity ending before it (and before every pending
// interval and the watermark) can be forgotten. Without a floor the
// engine assumes every interval has been added before Advance or Measure.
func (e *Engine) SetFloor(ns int64) { e.floor = ns }

// Advance attributes every pending interval that ends at or before
// watermark (all activity up to it has been added) and forgets activity
// no pending interval can overlap.
func (e *Engine) Advance(watermark int64) []Blame {
	var out []Blame
	e.Measure(watermark, func(m Measurement) { out = append(out, Attribute(m, e.base)) })
	return out
}

// Measure measures every pending interval that ends at or before
// watermark (all activity up to it has been added), hands each to fn, and
// forgets activity that neither a pending interval nor a later one (see
// SetFloor) can overlap. It returns that horizon: no interval measured
// from now on starts before it.
func (e *Engine) Measure(watermark int64, fn func(Measurement)) (horizon int64) {
	keep := e.pending[:0]
	for _, iv := range e.pending {
		if iv.End <= watermark {
			fn(e.measure(iv))
			e.measured = max(e.measured, iv.End)
		} else {
			keep = append(keep, iv)
		}
	}
	clear(e.pending[len(keep):])
	e.pending = keep
	horizon = min(watermark, e.floor)
	for _, iv := range e.pending {
		if iv.Start < horizon {
			horizon = iv.Start
		}
	}
	e.prune(horizon)
	return horizon
}

// Flush attributes every pending interval.
func (e *Engine) Flush() []Blame { return e.Advance(maxNs) }

// prune drops spans that end before horizon.
func (e *Engine) prune(horizon int64) {
	for c := range e.acts {
		s := e.acts[c]
		// Spans starting before horizon-maxDur all end before horizon.
		cut := sort.Search(len(s), func(j int) bool { return s[j].Start >= horizon-e.maxDur[c] })
		kept := s[:0]
		for _, a := range s[:cut] {
			if a.End > horizon {
				kept = append(kept, a)
			}
		}
		if len(kept) == cut {
			continue
		}
		n := copy(s[len(kept):], s[cut:])
		kept = s[:len(kept)+n]
		// Let the backing array shrink once it is mostly empty.
		if cap(kept) > 1024 && len(kept) < cap(kept)/4 {
			kept = append(make([]Activity, 0, 2*len(kept)), kept...)
		}
		e.acts[c] = kept
	}
}

// Pending is the number of intervals waiting for the watermark.
func (e *Engine) Pending() int { return len(e.pending) }

// Retained is the number of activity spans held.
func (e *Engine) Retained() int {
	n := 0
	for _, s := range e.acts {
		n += len(s)
	}
	return n
}

// union returns the measure of the union of cause c's spans inside [a, b]
// (only those of port, for network spans).
func (e *Engine) union(c Cause, a, b int64, port uint16) int64 {
	s := e.acts[c]
	i := sort.Search(len(s), func(j int) bool { return s[j].Start >= a-e.maxDur[c] })
	var total, curS, curE int64
	open := false
	for ; i < len(s) && s[i].Start < b; i++ {
		x := s[i]
		if c == NetBackpressure && x.Port != port {
			continue
		}
		st, en := max(x.Start, a), min(x.End, b)
		if en <= st {
			continue
		}
		// Spans come sorted by Start, so clipped starts are non-decreasing.
		if open && st <= curE {
			curE = max(curE, en)
			continue
		}
		if open {
			total += curE - curS
		}
		curS, curE, open = st, en, true
	}
	if open {
		total += curE - curS
	}
	return total
}

// measure is each cause's union active time inside iv.
func (e *Engine) measure(iv Interval) Measurement {
	m := Measurement{Interval: iv}
	for c := Cause(0); c < NumCauses; c++ {
		m.Active[c] = e.union(c, iv.Start, iv.End, iv.Port)
	}
	return m
}

// Attribute splits a measured interval's excess over base among the
// causes: each cause's activity above its normal level for an interval
// this long, in proportion, capped at the excess; the rest is unexplained.
func Attribute(m Measurement, base Baseline) Blame {
	iv := m.Interval
	b := Blame{Interval: iv, BaselineNs: base.ITLNs, Active: m.Active}
	if iv.Index == 0 {
		b.BaselineNs = base.TTFTNs
	}
	d := iv.Duration()
	b.ExcessNs = max(0, d-b.BaselineNs)
	var above [NumCauses]float64
	var sum float64
	for c := Cause(0); c < NumCauses; c++ {
		// Activity above what an interval this long shows normally: a
		// cause active at its usual rate all along explains nothing.
		normal := base.Rate[c] * float64(d)
		above[c] = max(0, float64(b.Active[c])-normal)
		sum += above[c]
	}
	if b.ExcessNs == 0 {
		return b
	}
	explained := min(sum, float64(b.ExcessNs))
	var given int64
	for c := range above {
		if sum > 0 {
			v := int64(above[c] / sum * explained)
			b.AttributedNs[c] = v
			given += v
		}
	}
	b.AttributedNs[Unexplained] = b.ExcessNs - given
	return b
}
