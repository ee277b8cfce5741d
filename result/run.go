package result

import (
	"fmt"
	"time"
)

// Check is one readiness line (as `bpfbench check` prints it).
type Check struct {
	Status string `json:"status"`
	Name   string `json:"name"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// Collection says what the kernel side saw and how complete it is.
type Collection struct {
	Pid  int    `json:"pid"`
	Comm string `json:"comm"`
	// Started and Stopped are wall-clock times of the collection; the
	// offsets are seconds since the load generator's start.
	Started        time.Time `json:"started"`
	Stopped        time.Time `json:"stopped"`
	StartedOffsetS float64   `json:"started_offset_seconds"`
	StoppedOffsetS float64   `json:"stopped_offset_seconds"`
	// StoppedReason says why collection ended ("load finished", "target
	// pid 123 exited 12.5 s into the run", ...).
	StoppedReason string `json:"stopped_reason"`
	LostEvents    uint64 `json:"lost_events"`
	Spans         uint64 `json:"spans"`
	SpansDropped  uint64 `json:"spans_dropped"`
	// Unavailable names sections that could not run, with the reason.
	Unavailable map[string]string `json:"unavailable,omitempty"`
	Readiness   []Check           `json:"readiness,omitempty"`
	Correlation *Correlation      `json:"correlation,omitempty"`
}

// Correlation is when the run's correlation ran. Deferred: what was
// recorded during the load waited in a spool of at most the run's bound
// and was correlated after it, so that correlating took no CPU from the
// server while it was measured; LiveFromOffsetS is when (seconds since
// the load's start) the spool passed its bound and the rest was
// correlated live.
type Correlation struct {
	Deferred            bool     `json:"deferred"`
	SpoolPeakBytes      int64    `json:"spool_peak_bytes"`
	LiveFromOffsetS     *float64 `json:"live_from_offset_seconds,omitempty"`
	AfterLoadSeconds    float64  `json:"after_load_seconds"`
	AfterLoadCPUSeconds float64  `json:"after_load_cpu_seconds"`
}

// Line is the terminal's line on when the correlation ran ("" for none).
func (c *Correlation) Line() string {
	if c == nil {
		return ""
	}
	cost := fmt.Sprintf("%.2f CPU-s in %.2f s after the load", c.AfterLoadCPUSeconds, c.AfterLoadSeconds)
	switch {
	case !c.Deferred:
		return "Correlation: live during the load (--spool-mib 0); " + cost
	case c.LiveFromOffsetS != nil:
		return fmt.Sprintf("Correlation: spooled until %.1f s into the load, when the spool reached its bound (%.0f MiB; raise --spool-mib), then live; %s", *c.LiveFromOffsetS, float64(c.SpoolPeakBytes)/(1<<20), cost)
	default:
		return fmt.Sprintf("Correlation: after the load, from a spool of %.1f MiB (nothing was correlated while the load was measured); %s", float64(c.SpoolPeakBytes)/(1<<20), cost)
	}
}

// TimelinePoint is one second (or bucket) of the run.
type TimelinePoint struct {
	// T is the bucket's start, seconds since the load generator's start.
	T                     float64 `json:"t"`
	OutputTokensPerSecond float64 `json:"output_tokens_per_second"`
	CompletedRequests     int     `json:"completed_requests"`
	P50ITLMs              float64 `json:"p50_itl_ms"`
	P99ITLMs              float64 `json:"p99_itl_ms"`
	P50TTFTMs             float64 `json:"p50_ttft_ms"`
	// CausesMs is the excess latency attributed to each cause (and
	// "unexplained") among intervals ending in this bucket, in ms.
	CausesMs map[string]float64 `json:"causes_ms"`
}

// Phase is one part of a phased scenario (`bpfbench demo`).
type Phase struct {
	Name      string  `json:"name"`
	StartS    float64 `json:"start_seconds"`
	EndS      float64 `json:"end_seconds"`
	Requests  int     `json:"requests"`
	P50ITLMs  float64 `json:"p50_itl_ms"`
	P99ITLMs  float64 `json:"p99_itl_ms"`
	P99TTFTMs float64 `json:"p99_ttft_ms"`
	// TopCause is what the phase changed, on the critical path: the
	// cause that added most to the excess of its slowest 10% of gaps over
	// the first phase's (validate's rule); for the first phase, the top
	// cause of its slowest 1% of gaps. TopCauseBasis says which, TopShare
	// is the cause's share of that.
	TopCause      string  `json:"top_cause"`
	TopCauseBasis string  `json:"top_cause_basis,omitempty"`
	TopShare      float64 `json:"top_share"`
	// AttributedMsPerInterval is the excess given to each cause per
	// interval (TTFTs and gaps) of the phase, in ms.
	AttributedMsPerInterval Breakdown `json:"attributed_ms_per_interval,omitempty"`
	// ITLP99 and TTFT are the shares of excess latency per cause in the
	// phase's slowest 1% of gaps and in its TTFTs.
	ITLP99 Breakdown `json:"itl_p99"`
	ITLAll Breakdown `json:"itl_all"`
	TTFT   Breakdown `json:"ttft"`
	// Injection says what a phased scenario injected in the phase and
	// what it achieved (demo, validate); Expected the cause it should
	// add; Weak that it achieved too little to judge, with Verdict
	// saying so or whether the critical path named Expected.
	Injection string `json:"injection,omitempty"`
	Expected  string `json:"expected_cause,omitempty"`
	Weak      bool   `json:"injection_too_weak,omitempty"`
	Verdict   string `json:"verdict,omitempty"`
}

// Agent is one agent's session of a run: what it collected, when it
// stopped, and how its clock was mapped onto the run's.
type Agent struct {
	Agent   string `json:"agent"`
	Session string `json:"session"`
	Pid     int    `json:"pid"`
	Comm    string `json:"comm"`
	// Complete says the agent sent the end of its session; otherwise
	// Error says how the stream ended and StoppedNs (the run's clock) is
	// when collection was last seen alive.
	Complete       bool      `json:"complete"`
	Reason         string    `json:"reason,omitempty"`
	Error          string    `json:"error,omitempty"`
	StartNs        int64     `json:"start_ns"`
	StoppedNs      int64     `json:"stopped_ns"`
	StoppedAt      time.Time `json:"stopped_at"`
	StoppedOffsetS float64   `json:"stopped_offset_seconds"`
	Lost           uint64    `json:"lost_events"`
	Dropped        uint64    `json:"dropped_spans"`
	// Spans is what the agent sent; Received what reached the run, and
	// BelowClockBound those of them shorter than the clock bound (not
	// attributed).
	Spans           uint64            `json:"spans"`
	Received        uint64            `json:"spans_received"`
	BelowClockBound uint64            `json:"spans_below_clock_bound"`
	Unavailable     map[string]string `json:"unavailable,omitempty"`
	Summary         *Collectors       `json:"summary,omitempty"`
	// UncollectedRequests are the measured requests that started after
	// collection stopped (an agent that died mid-run).
	UncollectedRequests int        `json:"uncollected_requests"`
	Clock               AgentClock `json:"clock"`
}

// AgentClock maps an agent's CLOCK_MONOTONIC onto the run's:
// local = agent - OffsetNs, within ±BoundNs.
type AgentClock struct {
	Agent     string          `json:"agent"`
	OffsetNs  int64           `json:"offset_ns"`
	BoundNs   int64           `json:"bound_ns"`
	DriftPPM  float64         `json:"drift_ppm"`
	Estimates []ClockEstimate `json:"estimates"`
}

// ClockEstimate is one clock exchange with an agent.
type ClockEstimate struct {
	AtNs     int64     `json:"at_ns"`
	Wall     time.Time `json:"wall"`
	OffsetNs int64     `json:"offset_ns"`
	BoundNs  int64     `json:"bound_ns"`
	RTTMinNs int64     `json:"rtt_min_ns"`
	Samples  int       `json:"samples"`
	Used     int       `json:"used"`
}

// ServerMetrics is what the scrapes of the server's /metrics saw.
type ServerMetrics struct {
	URL string `json:"url"`
	// Found is false when the endpoint was looked for and not found (the
	// target's /metrics by default); Note says what was tried.
	Found bool   `json:"found"`
	Note  string `json:"note,omitempty"`
	// Engine is vllm, sglang, tgi, llamacpp or unknown.
	Engine string `json:"engine,omitempty"`
	// VocabularyMatched is false for an engine whose names the vocabulary
	// does not know: the samples then hold RawSeries.
	VocabularyMatched bool    `json:"vocabulary_matched"`
	PeriodMs          float64 `json:"period_ms,omitempty"`
	Scrapes           int     `json:"scrapes"`
	ScrapeFailures    int     `json:"scrape_failures"`
	FirstError        string  `json:"first_error,omitempty"`
	LastError         string  `json:"last_error,omitempty"`
	// Sources names the engine's metric behind each vocabulary name.
	Sources          map[string]string `json:"sources,omitempty"`
	RawSeries        []string          `json:"raw_series,omitempty"`
	RawSeriesDropped int               `json:"raw_series_dropped,omitempty"`
	// Overall holds the vocabulary over the whole scrape: the counters'
	// increase, the interval values (queue time, prefix-cache hit rate)
	// over the span, the gauges' last values.
	Overall map[string]float64 `json:"overall,omitempty"`
	// Peaks are the gauges' highest values over the samples.
	Peaks   map[string]float64 `json:"peaks,omitempty"`
	Samples []ServerSample     `json:"samples"`
}

// ServerSample is one scrape: seconds since the load generator's start,
// and the values by vocabulary name (by series name when unmatched).
type ServerSample struct {
	T      float64            `json:"t_s"`
	Values map[string]float64 `json:"values"`
}

// ServerQueue is the time requests waited in the engine's queue before a
// slot took them (an estimate; Rule says how it is made).
type ServerQueue struct {
	Rule      string `json:"rule"`
	Available bool   `json:"available"`
	Reason    string `json:"reason,omitempty"`
	Slots     int    `json:"slots,omitempty"`
	// RequestsQueued counts the measured requests with a wait;
	// Unconfirmed the waits the replay found and the engine did not
	// report, counted as none.
	RequestsQueued int `json:"requests_queued"`
	Unconfirmed    int `json:"unconfirmed,omitempty"`
	// ShareOfTTFT is the queue time over the TTFT, summed over the
	// measured requests.
	ShareOfTTFT float64 `json:"share_of_ttft"`
	TotalMs     float64 `json:"total_ms"`
	TTFTMs      float64 `json:"ttft_ms"`
	MeanMs      float64 `json:"mean_queued_ms,omitempty"`
	MaxMs       float64 `json:"max_ms,omitempty"`
	// EngineMeanMs is the engine's own mean queue time over the run, when
	// it exports one, to compare with.
	EngineMeanMs *float64 `json:"engine_mean_ms,omitempty"`
	// WaitingError is the mean absolute difference between the replay's
	// waiting requests and the engine's gauge over the samples.
	WaitingError float64 `json:"waiting_error"`
	// Requests lists the requests that waited.
	Requests []QueuedRequest `json:"requests,omitempty"`
}

// QueuedRequest is one request that waited in the engine's queue.
type QueuedRequest struct {
	Index   int     `json:"index"`
	QueueMs float64 `json:"server_queue_ms"`
	TTFTMs  float64 `json:"ttft_ms"`
}
