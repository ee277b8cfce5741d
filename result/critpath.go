package result

import (
	"fmt"

	"github.com/bpfbench/bpfbench/result/cause"
)

// CriticalPath is result.json's "critical_path": each token gap's critical
// path (correlate/critpath), from which the attribution is built.
// Every gap's parts sum to the gap; times are ms, shares fractions.
type CriticalPath struct {
	// Rule says how the gaps were walked and what the excess is over.
	Rule string `json:"rule"`
	// Baseline names the normal gap's source: "run" (the medians of the
	// run's gaps) or the first phase's name.
	Baseline string   `json:"baseline"`
	Causes   []string `json:"causes"`
	// Gaps counts the gaps walked (TTFTs included), GapMs their time.
	Gaps  int     `json:"gaps"`
	GapMs float64 `json:"gap_ms"`
	// TotalsMs is each cause's time over every gap.
	TotalsMs map[string]float64 `json:"totals_ms"`
	// UnexplainedFraction is unexplained time over all gap time.
	UnexplainedFraction float64 `json:"unexplained_fraction"`
	// NormalITLMs and NormalTTFTMs are the baseline's normal gap, per cause.
	NormalITLMs  map[string]float64 `json:"normal_itl_ms"`
	NormalTTFTMs map[string]float64 `json:"normal_ttft_ms"`
	// ITLP99 and TTFTP99 are the slowest 1% of the gaps after the first
	// token, and of the TTFTs.
	ITLP99  *CriticalBand `json:"itl_p99,omitempty"`
	TTFTP99 *CriticalBand `json:"ttft_p99,omitempty"`
	// NoisyNeighbours are the processes outside the server that held a CPU
	// while a thread on a critical path waited for it, most time first;
	// SelfContention the server's own processes that did (its threads
	// waiting for each other: more threads than CPUs).
	NoisyNeighbours []NoisyNeighbour `json:"noisy_neighbours"`
	SelfContention  []NoisyNeighbour `json:"server_self_contention,omitempty"`
	// ClientReadDelay is c(k) - r(k) over the gaps whose arrival was seen:
	// how long a chunk waited in the load generator's socket before it
	// read it, the client's own timing error.
	ClientReadDelay *Distribution `json:"client_read_delay,omitempty"`
	// Slowest are the slowest gaps after the first token, each with its
	// critical path.
	Slowest []CriticalGap   `json:"slowest"`
	Phases  []CriticalPhase `json:"phases,omitempty"`
	Stats   CriticalStats   `json:"stats"`
	// ServerCPU is what a token cost the server in CPU over the load,
	// against which server_compute's growth is read.
	ServerCPU *ServerCPU `json:"server_cpu,omitempty"`
}

// ServerCPU is the CPU time the kernel charged the server's processes
// over the load (their user and system time and that of the children
// they reaped, /proc/PID/stat) per generated token. With a baseline run
// that measured its own, Ratio compares them: server_compute that grew
// with the ratio is the same tokens costing more CPU (more work a token,
// or a CPU that ran it slower: a shared core's caches, a sibling
// hyperthread, its clock), not the server waiting.
type ServerCPU struct {
	Seconds float64 `json:"seconds"`
	// Tokens are the tokens generated, PromptTokens the prompts' (every
	// request sent within the readings, the warm-up's too).
	Tokens       int     `json:"tokens"`
	PromptTokens int     `json:"prompt_tokens"`
	Processes    int     `json:"processes"`
	MsPerToken   float64 `json:"ms_per_token"`
	// ErrorMs bounds MsPerToken: the kernel counts in ticks of 10 ms,
	// so two readings of each process are off by less than four.
	ErrorMs float64 `json:"error_ms"`
	// BaselineMsPerToken is the baseline run's, Ratio this run's over
	// it, RatioLow and RatioHigh its bounds from both ErrorMs (the
	// kernel's grain; two quiet runs of one server differ more).
	BaselineMsPerToken float64 `json:"baseline_ms_per_token,omitempty"`
	Ratio              float64 `json:"ratio,omitempty"`
	RatioLow           float64 `json:"ratio_low,omitempty"`
	RatioHigh          float64 `json:"ratio_high,omitempty"`
	// NotCompared says why a baseline's figure was not compared.
	NotCompared string `json:"not_compared,omitempty"`
}

// Compare sets the baseline's figures from base (its own ServerCPU):
// nothing when either has no CPU or no tokens, and only a reason when
// their prompts per generated token differ by more than a tenth (a
// prefill's CPU is in the figure: another mix costs another amount).
func (s *ServerCPU) Compare(base *ServerCPU) {
	if s == nil {
		return
	}
	s.BaselineMsPerToken, s.Ratio, s.RatioLow, s.RatioHigh, s.NotCompared = 0, 0, 0, 0, ""
	if base == nil || s.MsPerToken <= 0 || base.MsPerToken <= 0 || s.Tokens <= 0 || base.Tokens <= 0 {
		return
	}
	mix, bmix := float64(s.PromptTokens)/float64(s.Tokens), float64(base.PromptTokens)/float64(base.Tokens)
	if d := mix - bmix; d > 0.1*bmix || d < -0.1*bmix {
		s.NotCompared = fmt.Sprintf("prompt tokens per generated token %.3g here, %.3g in the baseline", mix, bmix)
		return
	}
	s.BaselineMsPerToken = base.MsPerToken
	s.Ratio = s.MsPerToken / base.MsPerToken
	s.RatioLow = max(s.MsPerToken-s.ErrorMs, 0) / (base.MsPerToken + base.ErrorMs)
	if d := base.MsPerToken - base.ErrorMs; d > 0 {
		s.RatioHigh = (s.MsPerToken + s.ErrorMs) / d
	}
}

// CriticalBand is a band of gaps: those at least FromMs long.
type CriticalBand struct {
	FromMs   float64            `json:"from_ms"`
	Gaps     int                `json:"gaps"`
	TotalsMs map[string]float64 `json:"totals_ms"`
	// ExcessMs is the band's time over the baseline's normal gaps, and
	// ExcessShares each cause's share of it (they sum to 1 when there is
	// an excess); Top the largest.
	ExcessMs     float64            `json:"excess_ms"`
	ExcessShares map[string]float64 `json:"excess_shares"`
	Top          string             `json:"top_cause"`
	// Unwalked are the band's gaps the live view's walk left out (over
	// its ceiling, or sampled: below the running p99's interval when
	// they came): their durations are in from_ms, their causes are not
	// in the totals and shares (Gaps does not count them).
	Unwalked int `json:"unwalked,omitempty"`
	// ExcessOver, when set, says the excess is over the baseline run's
	// own p99 band, not its normal gap: each cause's time per gap above
	// that band's (the p99 band of `run --baseline DIR`).
	ExcessOver string `json:"excess_over,omitempty"`
}

// NoisyNeighbour is a process that held the CPU of a critical-path thread.
type NoisyNeighbour struct {
	Process string `json:"process"` // "comm[pid]"
	Pid     uint32 `json:"pid"`
	Comm    string `json:"comm"`
	// Ms is the run-queue time it caused on critical paths, Share that
	// over all gap time, Gaps the gaps it delayed.
	Ms    float64 `json:"ms"`
	Share float64 `json:"share"`
	Gaps  int     `json:"gaps"`
	// Target: it is one of the followed processes (the server's own
	// threads waiting for each other's CPU, another process of the
	// server), not an outside neighbour.
	Target bool `json:"target,omitempty"`
}

// Label is the process, "(the server)" after a followed one, and what
// its time was counted as where that is not cpu_runqueue.
func (nb NoisyNeighbour) Label() string {
	switch {
	case nb.Target:
		return nb.Process + " (the server)"
	case cause.BlockWorker(nb.Comm):
		return nb.Process + " (the block layer's worker: io_block)"
	}
	return nb.Process
}

// Distribution is a few quantiles of a duration, ms.
type Distribution struct {
	Count int     `json:"count"`
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

// CriticalGap is one gap's critical path.
type CriticalGap struct {
	Request int    `json:"request"`
	Index   int    `json:"index"`
	Port    uint16 `json:"port"`
	// StartS is the gap's start, seconds since the load generator's start.
	StartS     float64 `json:"start_seconds"`
	DurationMs float64 `json:"duration_ms"`
	ExcessMs   float64 `json:"excess_ms"`
	// SentMs and ArrivedMs are s(k) and r(k), ms after the gap's start.
	SentMs    float64 `json:"sent_ms"`
	ArrivedMs float64 `json:"arrived_ms"`
	NoSend    bool    `json:"no_send,omitempty"`
	NoArrival bool    `json:"no_arrival,omitempty"`
	Guessed   bool    `json:"guessed,omitempty"`
	// CausesMs is each cause's time in the gap.
	CausesMs map[string]float64 `json:"causes_ms"`
	Steps    []CriticalStep     `json:"steps"`
	// StepsOmitted counts the shortest steps left out of Steps.
	StepsOmitted int `json:"steps_omitted,omitempty"`
}

// CriticalStep is a part of a gap's critical path.
type CriticalStep struct {
	// StartMs is ms after the gap's start.
	StartMs    float64 `json:"start_ms"`
	DurationMs float64 `json:"duration_ms"`
	// Thread is "comm[tid]" of the thread whose state this is ("" for the
	// network, the client, holes); Tid its id.
	Thread string `json:"thread,omitempty"`
	Tid    uint32 `json:"tid,omitempty"`
	State  string `json:"state"`
	Cause  string `json:"cause"`
	// Detail names the holder, the waker, the CUDA call or a note.
	Detail string `json:"detail,omitempty"`
	// Depth is the wakeup edges followed from the sending thread.
	Depth int `json:"depth,omitempty"`
}

// CriticalPhase is the critical path over a phase's gaps (those ending
// in it), against the first phase's normal gaps.
type CriticalPhase struct {
	Name   string        `json:"name"`
	Gaps   int           `json:"gaps"`
	ITLP99 *CriticalBand `json:"itl_p99,omitempty"`
	// TailAddedShares: per cause, the mean excess per gap of the phase's
	// slowest 10% less the same in the first phase's, floored at 0 and
	// normalised (validate's rule); TailTop the largest. The gaps are
	// taken without the hypervisor's steal (their cpu_runqueue held by
	// "hypervisor (steal)"), which no injection causes: TailStealMs says
	// how much of it the phase's tail had beyond the first phase's.
	TailAddedShares map[string]float64 `json:"tail_added_shares"`
	TailTop         string             `json:"tail_top_cause"`
	// TailAddedMs is what the phase added per gap of its slowest 10%
	// over the first phase's, every cause's addition summed (ms): how
	// much there was to attribute.
	TailAddedMs float64 `json:"tail_added_ms"`
	// TailStealMs is the hypervisor's steal per gap of the phase's tail
	// beyond the first phase's (ms): cpu_runqueue measured on the
	// critical path and left out of the shares above.
	TailStealMs float64 `json:"tail_steal_ms,omitempty"`
}

// CriticalStats count what the engine saw, guessed and lost.
type CriticalStats struct {
	// Spans fed to the engine; Dropped over the bound of spans held.
	Spans   uint64 `json:"spans"`
	Dropped uint64 `json:"spans_dropped"`
	// Events added to the engine; the rest mirror critpath.Stats.
	Events        uint64 `json:"events"`
	Malformed     uint64 `json:"malformed"`
	Late          uint64 `json:"late"`
	BeforeHorizon uint64 `json:"before_horizon"`
	Pruned        uint64 `json:"pruned"`
	// NoArrival, NoSend, Guessed, NoThread: the gaps that fell back
	// (DESIGN.md, "Fallbacks").
	NoArrival    uint64 `json:"no_arrival"`
	NoSend       uint64 `json:"no_send"`
	Guessed      uint64 `json:"guessed"`
	NoThread     uint64 `json:"no_thread"`
	DepthLimited uint64 `json:"depth_limited"`
	// Hops: sleeps woken by a network receive that the walk followed to
	// another target thread's send on an upstream connection (a gateway
	// woken by the engine's chunk).
	Hops   uint64 `json:"hops"`
	Cycles uint64 `json:"cycles"`
	// DataEdgesFollowed: walks of a sending thread that followed the data
	// its process read last (a unix socket) to the thread that wrote it;
	// DataEdges: the reads of such data added.
	DataEdgesFollowed uint64 `json:"data_edges_followed"`
	// SiblingWaits: stretches of a thread's running given to another
	// thread of its process that waited for a CPU held outside the
	// targets (a pool at a barrier spins while one of it is preempted).
	SiblingWaits uint64 `json:"sibling_waits"`
	// BehindTarget: run-queue waits behind a thread of the targets (the
	// server's own work), followed through that thread's states.
	BehindTarget uint64 `json:"behind_target,omitempty"`
	// Owed: parts of such waits that repaid the CPU time an outside
	// holder took during the same wait, counted as that outsider's
	// cpu_runqueue.
	Owed uint64 `json:"owed_to_outsiders,omitempty"`
	// BatchMovedMs: server_compute the batch rule gave to what kept the
	// other requests in flight, in BatchGaps gaps; NormalInFlight is the
	// rule's normal number of requests in flight (0: the rule was off).
	BatchMovedMs   float64 `json:"batch_moved_ms,omitempty"`
	BatchGaps      uint64  `json:"batch_gaps,omitempty"`
	NormalInFlight float64 `json:"normal_in_flight,omitempty"`
	// BatchElasticity is how a decode step's server_compute grew with the
	// requests being decoded in the baseline (as k^e, within [0, 1]; the
	// slope over the batch sizes it had), by which the batch rule splits
	// a bigger batch's compute: 1 a step's cost grows with every token, 0
	// the batch is free. BatchElasticityMeasured false: the baseline had
	// too few batch sizes to tell, and 1 was assumed. Absent when the rule
	// was off.
	BatchElasticity         *float64 `json:"batch_elasticity,omitempty"`
	BatchElasticityMeasured bool     `json:"batch_elasticity_measured,omitempty"`
	// PrefillMovedMs: server_compute the prefill rule gave to what
	// delayed the requests whose prefill ran in a decode gap, in
	// PrefillGaps gaps.
	PrefillMovedMs float64 `json:"prefill_moved_ms,omitempty"`
	PrefillGaps    uint64  `json:"prefill_gaps,omitempty"`
	// NormalLateMs is how late the load generator normally started a
	// request against its schedule (the baseline's median; its own
	// queue time, not a wait for a slot under --max-concurrency): the two
	// rules count a request started later than that as a client reason
	// for the batch and the prefills it then shared.
	NormalLateMs float64 `json:"normal_late_ms,omitempty"`
	// Interrupts: running steps that gave a part of their time to the block
	// or network interrupts that ran on the thread's CPU meanwhile.
	Interrupts uint64 `json:"interrupts"`
	// Steals: running steps that gave a part to the hypervisor's steal
	// (cpu_runqueue, held by "hypervisor (steal)").
	Steals uint64 `json:"steals,omitempty"`
	// Stopped: steps of a thread stopped by a signal or a tracer, or
	// frozen (server_stopped).
	Stopped uint64 `json:"stopped,omitempty"`
	// NoEdgeSleeps: sleeps of a critical-path thread with no wakeup edge to
	// follow (a timer, a timeout, an outside waker), given the states of
	// the server's other threads meanwhile (DESIGN.md, "Timed waits and
	// polling threads").
	NoEdgeSleeps uint64 `json:"no_edge_sleeps"`
	// Folded: running steps that gave a part of their time to the short
	// naps and waits off the CPU that the scheduler collector folded
	// inside the thread's running stretch (DESIGN.md, "Timed waits and polling threads").
	Folded    uint64 `json:"folded,omitempty"`
	DataEdges uint64 `json:"data_edges"`
	// Sends, Arrivals, Segments, CUDACalls, Holds, Reads: what was added
	// (Holds: the connections' blocking TCP episodes, zero windows, loss
	// recovery and retransmissions, DESIGN.md "Held connections").
	Holds     uint64 `json:"holds"`
	Sends     uint64 `json:"sends"`
	Arrivals  uint64 `json:"arrivals"`
	Segments  uint64 `json:"segments"`
	CUDACalls uint64 `json:"cuda_calls"`
	Reads     uint64 `json:"reads"`
	// InlineSends are sends stamped after their own arrival (a receive
	// run inside the sendmsg, over loopback or a veth), taken to leave
	// when they arrived.
	InlineSends uint64 `json:"inline_sends"`
	// ClientSpans are the load generator's own scheduler spans; its run-queue
	// waits are fed (a chunk in flight meanwhile is the client's), the rest
	// only counted.
	ClientSpans uint64 `json:"client_spans"`
}
