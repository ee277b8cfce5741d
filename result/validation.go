package result

import (
	"reflect"
)

// ValidationFile is the file a `validate` run writes in its run directory
// (and in result.json under "validation"): a Validation.
// docs/validation.schema.json is its schema.
const ValidationFile = "validation.json"

// ValidationRow is one injected cause and what the critical path named.
type ValidationRow struct {
	Injection string `json:"injection"`
	Injected  string `json:"injected_cause"`
	// Retry is the retry that judged the row (0: the first run), its run
	// in RetryDir; Earlier are what the weaker injections achieved.
	Retry    int      `json:"retry,omitempty"`
	RetryDir string   `json:"retry_dir,omitempty"`
	Earlier  []string `json:"earlier_attempts,omitempty"`
	// Attributed is the top cause of the excess the injection added to
	// the phase's tail, its slowest 10% of gaps, on the critical path:
	// per cause, the mean excess per gap of the tail, less the same in the
	// baseline phase's tail, so that contention the host had anyway
	// (other work on the machine) cancels out. The slowest 1% of a phase
	// of a few seconds is a handful of gaps, which one stray event can
	// swing; the slowest 10% is still the tail and holds about a hundred.
	Attributed string `json:"attributed_top_cause"`
	// Share is the injected cause's share of that added excess;
	// AddedShares every cause's; AddedMs the excess added per tail gap,
	// every cause summed.
	Share       float64            `json:"injected_share_of_tail_excess"`
	AddedShares map[string]float64 `json:"tail_added_shares"`
	AddedMs     float64            `json:"tail_added_ms"`
	// StealMs is the hypervisor's steal per gap of the phase's tail
	// beyond the baseline phase's: measured by the kernel, caused by no
	// injection; the tail is taken without it (AddedShares, AddedMs).
	StealMs float64 `json:"tail_steal_ms,omitempty"`
	// WritebackMiB is the host's page-cache writeback during the phase
	// (/proc/vmstat nr_written, MiB; buffered writes only): the kernel's
	// flusher sharing the disk and a CPU with the server, which no
	// injection does. From a few MiB on, the row's truth is not its
	// injection alone.
	WritebackMiB float64 `json:"host_writeback_mib,omitempty"`
	// RawShare is the injected cause's share of the excess of the phase's
	// slowest 1% over the run's baseline, RawTop that band's top cause;
	// ShareAll the share of every gap's excess.
	RawShare  float64   `json:"injected_share_of_p99_raw_excess"`
	RawTop    string    `json:"raw_top_cause"`
	ShareAll  float64   `json:"injected_share_of_all_excess"`
	P99Shares Breakdown `json:"p99_shares"`
	Requests  int       `json:"requests"`
	P50ITLMs  float64   `json:"p50_itl_ms"`
	P99ITLMs  float64   `json:"p99_itl_ms"`
	// AddedP50ITLMs and AddedP99ITLMs are the phase's ITL over the
	// baseline phase's: what the perturbation costs the server.
	AddedP50ITLMs float64 `json:"added_p50_itl_ms"`
	AddedP99ITLMs float64 `json:"added_p99_itl_ms"`
	Achieved      string  `json:"achieved,omitempty"`
	// Weak: the injection added less than MinAddedMs to the tail's gaps,
	// too little to judge: the row is "injection too weak", not a miss.
	Weak bool `json:"injection_too_weak,omitempty"`
	// Missed says why the injection took effect outside its phase (with
	// Weak: nothing of it to judge there), e.g. a slow reader whose first
	// token waited in the server's queue until the phase was over.
	Missed string `json:"injection_missed_its_phase,omitempty"`
	// Correct: the top cause is the injected one.
	Correct bool `json:"correct"`
}

// JudgedShare is the injected cause's share of the added tail excess.
func (r ValidationRow) JudgedShare() float64 { return r.Share }

// JudgedTop is the critical path's top added cause.
func (r ValidationRow) JudgedTop() string { return r.Attributed }

// Validation is the confusion matrix of injected × attributed causes.
type Validation struct {
	Target      string  `json:"target"`
	Pid         int     `json:"pid"`
	RateRPS     float64 `json:"rate_req_s"`
	PhaseS      float64 `json:"phase_seconds"`
	BaselineP50 float64 `json:"baseline_p50_itl_ms"`
	BaselineP99 float64 `json:"baseline_p99_itl_ms"`
	// Causes orders the matrix's rows and columns.
	Causes []string `json:"causes"`
	// Matrix[injected][attributed] counts the phases.
	Matrix map[string]map[string]int `json:"matrix"`
	Rows   []ValidationRow           `json:"rows"`
	// Correct counts the rows whose top cause is the injected one; Weak
	// the rows whose injection added less than MinAddedMs per tail gap
	// (too weak to judge: neither right nor wrong).
	Correct    int     `json:"correct"`
	Weak       int     `json:"injection_too_weak"`
	MinAddedMs float64 `json:"min_added_ms"`
	// MinShare is the share of its tail excess an injected cause must
	// have (validate's --min-share; 0: not judged): job's WriteMatrix
	// marks the rows below it LOW.
	MinShare float64 `json:"min_share,omitempty"`
	// Unexplained is the critical path's unexplained time over all gap
	// time of the run, every phase included (-1: no critical path).
	Unexplained float64 `json:"unexplained_fraction"`
	// HostSteal is the share of the host's CPU time its hypervisor stole
	// during the validation (/proc/stat, every CPU; -1: unknown). The
	// rows judge gaps without the steal the critical path measured on the
	// server's threads, but steal elsewhere (the load generator, the
	// network's softirqs, the injections' own processes) still moves
	// them: a validation under heavy steal is a weaker trial.
	HostSteal float64 `json:"host_steal_fraction"`
	// FlushedMiB is the host's dirty page cache written back before the
	// run (sync(2), so that its writeback would not land in a phase), and
	// FlushS how long that took; BaselineWritebackMiB the writeback during
	// the baseline phase, which every row is measured against.
	FlushedMiB           float64 `json:"host_flushed_mib,omitempty"`
	FlushS               float64 `json:"host_flush_seconds,omitempty"`
	BaselineWritebackMiB float64 `json:"baseline_host_writeback_mib,omitempty"`
	Dir                  string  `json:"run_dir"`
}

// ValidationSchemaID is the $id of validation.json's JSON Schema
// (docs/validation.schema.json).
const ValidationSchemaID = "https://github.com/bpfbench/bpfbench/docs/validation.schema.json"

// ValidationSchema is the JSON Schema (draft 2020-12) of validation.json,
// reflected from Validation as result.json's is from Document.
func ValidationSchema() ([]byte, error) {
	r := &reflector{defs: map[string]any{}}
	t := reflect.TypeFor[Validation]()
	root := r.object(t, fieldsOf(t, nil, false))
	root["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	root["$id"] = ValidationSchemaID
	root["title"] = "bpfbench validation.json"
	root["description"] = "A validate run's confusion matrix: per injected cause, what the critical path named as the top cause of what the injection added to its phase's tail."
	root["$defs"] = r.defs
	return encodeSchema(root)
}
