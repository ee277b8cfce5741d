package loadgen

import (
	"context"

	"github.com/bpfbench/bpfbench/loadgen/sweep"
)

// Sweep runs the SLO search sc (package sweep) with load as the base of
// every step: its target, dataset and arrival shape; the search sets each
// step's rate, concurrency and number of requests, and the rate search
// keeps load's concurrency cap.
func Sweep(ctx context.Context, load Config, sc sweep.Config) (*sweep.Result, error) {
	sc.Concurrency = load.Scenario.MaxConcurrency
	return sweep.Search(ctx, sc, func(ctx context.Context, l sweep.Load) (*sweep.Outcome, error) {
		cfg := load
		cfg.Scenario.NumRequests = l.Requests
		cfg.Scenario.Duration = 0
		cfg.Scenario.Rate = l.Rate
		cfg.Scenario.MaxConcurrency = l.Concurrency
		cfg.Output.Progress = nil
		cfg.Output.OnRecord = chain(cfg.Output.OnRecord, l.OnRecord)
		r, err := Run(ctx, cfg)
		if r == nil {
			return nil, err
		}
		return &sweep.Outcome{Metrics: r.Metrics, Requests: len(r.Records)}, err
	})
}

// chain calls a, then b, for every record; nil ones are left out.
func chain(a, b func(*Record)) func(*Record) {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return func(r *Record) {
		a(r)
		b(r)
	}
}
