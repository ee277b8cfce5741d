package result

// Breakdown is the share of excess latency per cause name (including
// "unexplained"), summing to 1 when there was excess.
type Breakdown map[string]float64

// Band aggregates intervals whose duration lies in a percentile band.
type Band struct {
	// FromMs and ToMs bound the band's interval durations (ToMs is +Inf
	// for the top band, encoded as 0 in JSON by omission).
	FromMs    float64   `json:"from_ms"`
	ToMs      float64   `json:"to_ms,omitempty"`
	Intervals int       `json:"intervals"`
	ExcessMs  float64   `json:"excess_ms"`
	Shares    Breakdown `json:"shares"`
}

// RequestBlame is one request's attribution.
type RequestBlame struct {
	Request       int       `json:"request"`
	TTFTMs        float64   `json:"ttft_ms"`
	TTFTShares    Breakdown `json:"ttft"`
	ITLExcessMs   float64   `json:"itl_excess_ms"`
	ITLShares     Breakdown `json:"itl"`
	TopCause      string    `json:"top_cause"`
	TotalExcessMs float64   `json:"total_excess_ms"`
}

// Summary is the `attribution` object of a run's result: per band,
// request and phase, the share of the excess latency each cause took.
// Model names the model whose causes these are: ModelCriticalPath (the
// critical path's causes, what `run` writes since the critical path became
// the attribution) or ModelActivity (the union of overlapping activity,
// correlate's own causes; what older result.json files hold under
// "attribution" with no model, and newer ones under "activity").
type Summary struct {
	Model          string  `json:"model,omitempty"`
	BaselineITLMs  float64 `json:"baseline_itl_ms"`
	BaselineTTFTMs float64 `json:"baseline_ttft_ms"`
	// BaselineRates are each cause's normal active fraction of an interval
	// (the activity model's).
	BaselineRates Breakdown `json:"baseline_active_rates,omitempty"`
	TTFT          Breakdown `json:"ttft"`
	// ITL maps "pXX" to the shares of the intervals at or above the XX-th
	// percentile and below the next percentile listed ("all": every one).
	ITL      map[string]Breakdown `json:"itl"`
	ITLBands map[string]Band      `json:"itl_bands"`
	Requests []RequestBlame       `json:"requests"`
	// TopCause is the cause with the largest share of all excess.
	TopCause string `json:"top_cause"`
}

// The models of a Summary.
const (
	ModelCriticalPath = "critical_path"
	ModelActivity     = "activity"
)
