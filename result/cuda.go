package result

// CUDA is the `cuda` section of `bpfbench attach`.
type CUDA struct {
	Libraries []CUDALibrary `json:"libraries"`
	Calls     []CUDACall    `json:"calls"`
	// Launches are the most common (call, grid, block) combinations.
	Launches    []CUDALaunchDims  `json:"launches,omitempty"`
	CopyBytes   map[string]uint64 `json:"copy_bytes,omitempty"`
	OutOfMemory CUDAOutOfMemory   `json:"out_of_memory"`
	// BlockedSeconds is the time threads spent inside blocking calls.
	BlockedSeconds float64 `json:"blocked_seconds"`
	// LaunchProbes says whether every launch was probed or launches were
	// sampled to keep the probes within their budget.
	LaunchProbes *CUDALaunchProbes `json:"launch_probes,omitempty"`
	// Graphs are the CUDA Graph and memory-pool figures per API that made
	// such calls (graphs.go).
	Graphs []CUDAGraphs `json:"graphs,omitempty"`
}

// CUDALibrary is a CUDA library of a target process.
type CUDALibrary struct {
	// Path is the library's path as the target sees it (in its mount
	// namespace), or the override given by the user.
	Path string `json:"path"`
	// API is "driver" (libcuda) or "runtime" (libcudart), from the name.
	API string `json:"api"`
	// BuildID is the GNU build id, hex, when the library has one.
	BuildID string `json:"build_id,omitempty"`
	// Symbols is the number of symbols probed, Missing those absent from
	// the library (set once attached).
	Symbols int      `json:"symbols"`
	Missing []string `json:"missing,omitempty"`

	// Open is the path this process opens to read the library and attach
	// uprobes: /proc/<pid>/map_files/<range>, else /proc/<pid>/root/<path>.
	Open string `json:"-"`
	// Dev and Inode identify the file (stat of Open).
	Dev   uint64 `json:"-"`
	Inode uint64 `json:"-"`
}

// CUDACall is one call's figures.
type CUDACall struct {
	Name   string `json:"name"`
	API    string `json:"api"`
	Kind   string `json:"kind"`
	Count  uint64 `json:"count"`
	Errors uint64 `json:"errors"`
	Bytes  uint64 `json:"bytes,omitempty"`
	// Duration is set for blocking calls (those with a return probe).
	Duration *CUDALatency `json:"duration_seconds,omitempty"`
	CUDAEstimate
}

// CUDAEstimate marks a launch count taken while the launch probes were
// sampled (CUDALaunchProbes.Mode "sampled"): Count is what the probes
// counted, EstimatedCount adds this count's share of the launches
// estimated while they were detached, EstimateError is the relative error
// bound of EstimatedCount, and LowerBound says some detached launches
// could not be estimated (EstimatedCount is a lower bound of the truth).
// All empty for an exact count.
type CUDAEstimate struct {
	Estimated      bool    `json:"estimated,omitempty"`
	EstimatedCount uint64  `json:"estimated_count,omitempty"`
	EstimateError  float64 `json:"estimate_error,omitempty"`
	LowerBound     bool    `json:"lower_bound,omitempty"`
}

// CUDALatency summarizes the durations of a call in seconds.
type CUDALatency struct {
	Count uint64  `json:"count"`
	P50   float64 `json:"p50"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
	Sum   float64 `json:"sum"`
}

// CUDALaunchDims counts launches of one call with one grid and block.
type CUDALaunchDims struct {
	Call  string    `json:"call"`
	Grid  [3]uint32 `json:"grid"`
	Block [3]uint32 `json:"block"`
	Count uint64    `json:"count"`
	// CUDAEstimate is set while the launch probes were sampled: Count is
	// the launches counted in the probed time only.
	CUDAEstimate
}

// CUDAOutOfMemory lists failed allocations (the first MaxOOMEvents).
type CUDAOutOfMemory struct {
	Count  uint64         `json:"count"`
	Events []CUDAOOMEvent `json:"events,omitempty"`
}

// CUDAOOMEvent is an allocation that failed for lack of device memory.
type CUDAOOMEvent struct {
	Call    string `json:"call"`
	Tid     uint32 `json:"tid"`
	Bytes   uint64 `json:"bytes"`
	StartNs uint64 `json:"start_ns"`
	Code    int32  `json:"code"`
}

// CUDALaunchProbes says how launches were counted.
type CUDALaunchProbes struct {
	// Mode is "full" (every launch probed), "sampled" (probes detached over
	// budget, counts estimated between sample windows) or "none" (no
	// launch symbol in the libraries).
	Mode string `json:"mode"`
	// Reason says why launches were sampled.
	Reason string `json:"reason,omitempty"`
	// HitCostNs is the measured cost of one probe hit on these functions'
	// first instruction (emulated or single-stepped).
	HitCostNs   float64 `json:"hit_cost_ns"`
	BudgetRatio float64 `json:"budget_ratio"`
	// ProbedSeconds and UnprobedSeconds split the session.
	ProbedSeconds   float64 `json:"probed_seconds"`
	UnprobedSeconds float64 `json:"unprobed_seconds"`
	Windows         int     `json:"sample_windows"`
	// MeasuredLaunches were counted by the probes, EstimatedLaunches were
	// not: estimated per launching thread from its synchronizes and its
	// on-CPU time while detached (collectors/cuda/estimate.go).
	MeasuredLaunches  uint64 `json:"measured_launches"`
	EstimatedLaunches uint64 `json:"estimated_launches"`
	// Estimated says the launch counts include an estimate; Method is how
	// it was made ("per_step", "on_cpu" or "per_step+on_cpu") and
	// EstimateError its relative error bound on MeasuredLaunches +
	// EstimatedLaunches.
	Estimated     bool    `json:"estimated"`
	Method        string  `json:"method,omitempty"`
	EstimateError float64 `json:"estimate_error"`
	// LowerBound: some launches while detached could not be estimated
	// (LowerBoundReason says why): the counts are at least this.
	LowerBound       bool    `json:"lower_bound"`
	LowerBoundReason string  `json:"lower_bound_reason,omitempty"`
	MaxRate          float64 `json:"max_launches_per_second"`
	// CostSeconds is the probes' estimated CPU cost to the target.
	CostSeconds float64 `json:"cost_seconds"`
}

// CUDAGraphs is one API's CUDA Graph and memory-pool figures.
type CUDAGraphs struct {
	API                string  `json:"api"`
	Instantiations     uint64  `json:"instantiations"`
	InstantiateErrors  uint64  `json:"instantiate_errors"`
	InstantiateSeconds float64 `json:"instantiate_seconds"`
	ExecDestroys       uint64  `json:"exec_destroys"`
	Launches           uint64  `json:"launches"`
	// EstimatedLaunches is Launches plus the share of the launches
	// estimated while the launch probes were detached; 0 when none were.
	EstimatedLaunches  uint64   `json:"estimated_launches,omitempty"`
	ReuseRate          *float64 `json:"reuse_rate"`
	PoolAllocs         uint64   `json:"pool_allocs"`
	PoolAllocFailures  uint64   `json:"pool_alloc_failures"`
	OOMPer1000Launches *float64 `json:"oom_per_1000_launches"`
	PoolTrims          uint64   `json:"pool_trims"`
	PoolTrimKeepBytes  uint64   `json:"pool_trim_keep_bytes"`
	PoolAttributeSets  uint64   `json:"pool_attribute_sets"`
}
