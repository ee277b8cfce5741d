package result

import "time"

// Incident is an incident bundle's own section: what triggered the
// daemon's flight recorder on a live target, the window it kept around
// the trigger, and the normal gap the window was judged against. The
// bundle's critical_path is the window's gaps' (its slowest with their
// steps), its diagnosis leads with Verdict.
type Incident struct {
	// Target is the daemon's target; Pid the live session's process.
	Target string `json:"target"`
	Pid    int    `json:"pid"`
	// Trigger is what asked for it: "rule" (the target's trigger rule,
	// Rule its text), "api" (`bpfbench capture`) or "signal" (SIGUSR1).
	Trigger string `json:"trigger"`
	Rule    string `json:"rule,omitempty"`
	// At is the trigger's wall-clock time; HeldSeconds how long the rule's
	// criteria had held when it fired (0 for a request).
	At          time.Time `json:"at"`
	HeldSeconds float64   `json:"held_seconds"`
	// WindowStartS and WindowEndS bound the gaps kept, in seconds from the
	// trigger (negative before it); FromNs, ToNs and TriggerNs are the
	// same on CLOCK_MONOTONIC.
	WindowStartS float64 `json:"window_start_seconds"`
	WindowEndS   float64 `json:"window_end_seconds"`
	FromNs       int64   `json:"from_ns"`
	ToNs         int64   `json:"to_ns"`
	TriggerNs    int64   `json:"trigger_ns"`
	// Gaps are the gaps kept in the window, Paths those of them kept with
	// their steps (the slow ones: above the session's PathQuantile when
	// walked, the p90 unless the paths did not fit the recorder's bytes
	// with its window; PathsShed the paths it dropped for that); Evicted
	// the gaps the recorder's byte bound dropped before its window ended
	// (a window shorter than asked: the diagnosis says so).
	Gaps         int     `json:"gaps"`
	Paths        int     `json:"paths"`
	PathQuantile float64 `json:"path_quantile"`
	PathsShed    uint64  `json:"paths_shed"`
	Evicted      uint64  `json:"evicted"`
	// P99Ms is the p99 of the gaps after the first token over the rule's
	// recent window at the trigger; NormalP99Ms and NormalMedianMs the
	// normal gap's (Baseline names it).
	P99Ms          float64 `json:"p99_ms"`
	NormalP99Ms    float64 `json:"normal_p99_ms"`
	NormalMedianMs float64 `json:"normal_median_ms"`
	Baseline       string  `json:"baseline"`
	// BreachStartS is when the breach's gaps begin, in seconds from the
	// trigger: the rule's recent window when its criteria began to hold
	// (a request's: the 10 s before it). BreachNeighbours are the
	// processes that held the server's CPUs on those gaps' critical paths,
	// most time first (critical_path.noisy_neighbours are the whole
	// window's).
	BreachStartS     float64          `json:"breach_start_seconds"`
	BreachNeighbours []NoisyNeighbour `json:"breach_neighbours"`
	// Verdict is the incident in one line: the p99 against the normal,
	// how long, the top cause's share of the slowest gaps' excess and the
	// neighbour behind it.
	Verdict string `json:"verdict"`
}
