// Package loadgen is bpfbench's load generator for OpenAI-compatible
// streaming servers (vLLM, SGLang, TGI, llama.cpp, Ollama). It records the
// arrival of every streamed chunk on CLOCK_MONOTONIC, the clock of the
// kernel's events, and the local TCP port of each request's connection, so
// that a later stage can join client-side token gaps with what the kernel saw.
// Its metrics follow the definitions of vLLM's benchmark client exactly.
package loadgen

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/loadgen/dataset"
	"github.com/bpfbench/bpfbench/loadgen/metrics"
	"github.com/bpfbench/bpfbench/loadgen/transport"
)

// Result is the outcome of a run.
type Result struct {
	Config Config
	// Anchor ties the monotonic timestamps to wall-clock time.
	Anchor Anchor
	// StartNs and EndNs bound the measured run (monotonic ns).
	StartNs, EndNs int64
	Date           time.Time
	// Records are the measured requests in send order; Warmup the warm-up ones.
	Records []Record
	Warmup  []Record
	Metrics *metrics.Metrics
	// Dataset describes the prompts sent, for the run's manifest.
	Dataset dataset.Info
	// ClientCPU is the CPU time (user+system) the whole process used during
	// the measured run, from getrusage.
	ClientCPU time.Duration
}

// DurationS is the run's duration in seconds (vLLM's benchmark_duration).
func (r *Result) DurationS() float64 { return float64(r.EndNs-r.StartNs) / 1e9 }

// Plan is the requests a run of a config sends, read or generated once
// (a trace file is read once for the run and its description): Plan
// makes it before the run, for what needs the send offsets first (the
// pipeline of run.Run in job/run), and RunPlan sends it.
type Plan struct {
	reqs []Request
	info dataset.Info
	// fixed: the requests' offsets are their send times (a trace, Go API
	// requests with offsets), not the arrivals'.
	fixed bool
}

// Plan reads or generates the requests a run of c sends. It returns nil
// for the multiturn dataset, whose requests follow the replies.
func (c Config) Plan() (*Plan, error) {
	if c.isMultiturn() {
		return nil, nil
	}
	return c.plan()
}

// Offsets are the requests' fixed send offsets from the run's start when
// they may be out of order (a trace, Go API requests with offsets); nil
// when the arrivals decide the send times, which then grow with the index.
func (p *Plan) Offsets() []int64 {
	if p == nil || !p.fixed {
		return nil
	}
	offs := make([]int64, len(p.reqs))
	for i, r := range p.reqs {
		offs[i] = max(r.OffsetNs, 0)
	}
	return offs
}

// plan returns the requests, their send offsets (-1: decided online) and
// their description.
func (c *Config) plan() (*Plan, error) {
	sc := &c.Scenario
	switch {
	case len(sc.Requests) > 0:
		reqs := make([]Request, len(sc.Requests))
		copy(reqs, sc.Requests)
		fixed := slices.ContainsFunc(reqs, func(r Request) bool { return r.OffsetNs > 0 })
		return &Plan{reqs: reqs, info: dataset.DescribeRequests(reqs, sc.Seed), fixed: fixed}, nil
	case sc.TracePath != "":
		reqs, info, err := dataset.LoadTrace(sc.TracePath, sc.TraceTimeUnit, sc.Dataset.OutputLen, sc.Seed)
		if err != nil {
			return nil, err
		}
		if sc.NumRequests > 0 && sc.NumRequests < len(reqs) {
			reqs = reqs[:sc.NumRequests]
		}
		return &Plan{reqs: reqs, info: info, fixed: true}, nil
	}
	reqs, err := dataset.Load(sc.Dataset, c.planCount(), sc.Seed)
	if err != nil {
		return nil, err
	}
	return &Plan{reqs: reqs, info: sc.Dataset.Describe(sc.Seed, reqs, nil)}, nil
}

// planCount is the number of requests to generate: --num-requests, or in
// duration mode enough to cycle through.
func (c *Config) planCount() int {
	if c.Scenario.NumRequests == 0 {
		return 1024
	}
	return c.Scenario.NumRequests
}

// DescribeDataset returns the dataset.Info of the prompts a run of c
// sends, without running it (Run puts the same in Result.Dataset).
func (c *Config) DescribeDataset() (dataset.Info, error) {
	if c.isMultiturn() {
		convs, err := dataset.LoadConversations(c.Scenario.Dataset, c.planCount(), c.Scenario.Seed)
		if err != nil {
			return dataset.Info{}, err
		}
		return c.Scenario.Dataset.Describe(c.Scenario.Seed, nil, convs), nil
	}
	p, err := c.plan()
	if err != nil {
		return dataset.Info{}, err
	}
	return p.info, nil
}

func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Run sends the load and measures it. Failed requests are recorded, not
// returned as errors; an error means the run itself could not be made.
func Run(ctx context.Context, cfg Config) (*Result, error) { return RunPlan(ctx, cfg, nil) }

// RunPlan is Run sending plan, cfg's Plan (nil: Run makes it).
func RunPlan(ctx context.Context, cfg Config, plan *Plan) (*Result, error) {
	if err := cfg.prepare(); err != nil {
		return nil, err
	}
	var (
		reqs []Request
		mt   *multiturnRun // the multiturn dataset's conversations
		err  error
	)
	switch {
	case cfg.isMultiturn():
		if mt, err = newMultiturnRun(&cfg); err == nil {
			reqs = mt.reqs
		}
	case plan == nil:
		plan, err = cfg.plan()
	}
	if err != nil {
		return nil, err
	}
	if mt == nil {
		reqs = plan.reqs
	}
	opts := cfg.Target
	opts.NetHTTP = opts.NetHTTP || mt != nil // multiturn needs the replies' text
	client, err := transport.NewClient(opts)
	if err != nil {
		return nil, err
	}
	defer client.Close()

	res := &Result{Config: cfg, Date: time.Now()}
	if mt != nil {
		mt.turns = client.Turns()
		res.Dataset = cfg.Scenario.Dataset.Describe(cfg.Scenario.Seed, nil, mt.convs)
	} else {
		res.Dataset = plan.info
	}
	if cfg.Scenario.Warmup > 0 {
		res.Warmup = warmup(ctx, &cfg, client, &reqs[0])
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	r := newRunner(&cfg, client, reqs, plan.Offsets())
	res.Anchor = NewAnchor()
	cpu0 := cpuTime()
	r.begin()
	res.StartNs = r.start
	if mt != nil {
		mt.run(ctx, r)
	} else {
		r.send(ctx, reqs)
	}
	r.wg.Wait()
	res.EndNs = Mono()
	res.ClientCPU = cpuTime() - cpu0
	res.finish(r.records)
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	return res, nil
}

// prepare fills in what callers of the Go API may leave unset, checks the
// configuration, and settles what it implies: ignore_eos for generated
// prompts, a request id prefix.
func (c *Config) prepare() error {
	if c.Target.Endpoint == "" {
		c.Target.Endpoint = transport.EndpointCompletions
	}
	if c.Scenario.Burstiness == 0 {
		c.Scenario.Burstiness = 1
	}
	if c.Scenario.Rate == 0 {
		c.Scenario.Rate = math.Inf(1)
	}
	if c.Metrics.Percentiles == nil {
		c.Metrics.Percentiles = []float64{50, 90, 99}
	}
	if err := c.Validate(); err != nil {
		return err
	}
	if c.Scenario.Dataset.Synthetic() {
		c.Target.IgnoreEOS = true
	}
	if c.Output.RequestIDPrefix == "" {
		c.Output.RequestIDPrefix = fmt.Sprintf("bench-%08x-", uint32(Mono()^int64(os.Getpid())<<16))
	}
	return nil
}

// warmup sends cfg's warm-up requests, all of them req, before the
// measured run, and returns their records.
func warmup(ctx context.Context, cfg *Config, client *transport.Client, req *Request) []Record {
	recs := make([]Record, cfg.Scenario.Warmup)
	var wg sync.WaitGroup
	limit := make(chan struct{}, max(cfg.Scenario.MaxConcurrency, 1)*4)
	if cfg.Scenario.MaxConcurrency > 0 {
		limit = make(chan struct{}, cfg.Scenario.MaxConcurrency)
	}
	for i := range recs {
		limit <- struct{}{}
		wg.Add(1)
		go func(rec *Record) {
			defer wg.Done()
			defer func() { <-limit }()
			rec.Warmup = true
			rec.Index = -1
			rec.RequestID = cfg.Output.RequestIDPrefix + "warmup-" + strconv.Itoa(i)
			rec.ScheduledNs = Mono()
			client.Do(ctx, req, rec)
			if cfg.Output.OnRecord != nil {
				cfg.Output.OnRecord(rec)
			}
		}(&recs[i])
	}
	wg.Wait()
	return recs
}

// runner is the measured part of a run: the arrivals, the concurrency cap,
// and the records of the requests sent, which its goroutines share.
type runner struct {
	cfg    *Config
	client *transport.Client
	arr    *Arrivals
	// offsets are the send times from start; nil in duration mode, where
	// the arrivals are drawn as the run goes.
	offsets      []int64
	durationMode bool
	total        int           // the requests Progress counts to; 0 in duration mode
	sem          chan struct{} // nil: no concurrency cap

	start, deadline int64 // deadline 0: none

	mu      sync.Mutex
	records []*Record
	wg      sync.WaitGroup
	done    atomic.Int64
}

func newRunner(cfg *Config, client *transport.Client, reqs []Request, fixed []int64) *runner {
	sc := &cfg.Scenario
	r := &runner{cfg: cfg, client: client, records: make([]*Record, 0, len(reqs)),
		arr:          NewArrivals(sc.Rate, sc.Burstiness, sc.Constant, sc.Seed),
		durationMode: sc.Duration > 0 && sc.NumRequests == 0 && sc.TracePath == "" && len(sc.Requests) == 0,
		total:        len(reqs),
	}
	if r.durationMode {
		r.total = 0
	} else {
		// A trace, or Go API requests with offsets, fix the send times
		// (Plan.Offsets).
		r.offsets = fixed
		if r.offsets == nil {
			r.offsets = r.arr.Offsets(len(reqs))
		}
	}
	if sc.MaxConcurrency > 0 {
		r.sem = make(chan struct{}, sc.MaxConcurrency)
	}
	return r
}

// begin starts the measured run's clock.
func (r *runner) begin() {
	r.start = Mono()
	if d := r.cfg.Scenario.Duration; d > 0 {
		r.deadline = r.start + int64(d)
	}
}

// pacer paces the sends of the run from offsets (nil in duration mode).
func (r *runner) pacer(ctx context.Context, offsets []int64) *pacer {
	return &pacer{ctx: ctx, arr: r.arr, offsets: offsets, start: r.start, deadline: r.deadline, durationMode: r.durationMode, sem: r.sem}
}

// newRecord adds the record of a request due at due, its index the next.
func (r *runner) newRecord(due int64) *Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := len(r.records)
	rec := &Record{Index: i, RequestID: r.cfg.Output.RequestIDPrefix + strconv.Itoa(i), ScheduledNs: due}
	r.records = append(r.records, rec)
	return rec
}

// finished tells the run's hooks that rec has ended.
func (r *runner) finished(rec *Record) {
	out := &r.cfg.Output
	if out.OnRecord != nil {
		out.OnRecord(rec)
	}
	n := r.done.Add(1)
	if out.Progress != nil {
		out.Progress(int(n), r.total)
	}
}

// send sends reqs at their times (cycling through them in duration mode)
// until the run is over; the caller waits for r.wg.
func (r *runner) send(ctx context.Context, reqs []Request) {
	p := r.pacer(ctx, r.offsets)
	for i := 0; r.durationMode || i < len(reqs); i++ {
		at, ok := p.wait(i)
		if !ok {
			break
		}
		rec := r.newRecord(at)
		rec.SlotWaitNs = p.slotWait
		req := &reqs[i%len(reqs)]
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.client.Do(ctx, req, rec)
			if r.sem != nil {
				<-r.sem
			}
			r.finished(rec)
		}()
	}
}

// finish keeps the records, in index order, and computes the metrics.
func (res *Result) finish(records []*Record) {
	res.Records = make([]Record, len(records))
	for i, r := range records {
		res.Records[i] = *r
	}
	sort.Slice(res.Records, func(a, b int) bool { return res.Records[a].Index < res.Records[b].Index })
	res.Metrics = metrics.Compute(res.Records, res.DurationS(), res.Config.Metrics)
}
