package job

import (
	"encoding/json"
	"fmt"
	"iter"

	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/exporter/report"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/pipeline"
)

// assemble builds the run's result.json document into out.Doc: the load's
// result and manifest, the source's collection, the readiness checks, the
// server's metrics, the timeline, the phases, the critical path and its
// attribution, the gateway, and the diagnosis.
func (r *run) assemble(out *RunResult, res *loadgen.Result, st collected, base correlate.Baseline, blames iter.Seq[correlate.Blame], summary correlate.Summary, percentiles []float64) error {
	cfg, man, checks, sm, marks, pipe, via := r.cfg, r.man, r.checks, r.sm, r.marks, r.pipe, r.via
	doc := &report.Document{Activity: &summary, Collectors: map[string]json.RawMessage{}}
	// Each field on its own: one encoding of the load result in memory,
	// not a second copy of it all (the per-token lists of a long run are
	// large).
	doc.Load = map[string]json.RawMessage{}
	for k, v := range res.JSON() {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("encoding the load result: %w", err)
		}
		doc.Load[k] = b
	}
	if man.Dataset == nil {
		man.Dataset = datasetOf(res.Dataset)
	}
	if b, err := json.Marshal(man); err == nil {
		doc.Load["manifest"] = b
	}
	r.src.describe(doc, res, st)
	for _, c := range checks {
		doc.Collection.Readiness = append(doc.Collection.Readiness, report.Check{Status: string(c.Status), Name: c.Name, Detail: c.Detail, Fix: c.Fix})
	}
	doc.ServerMetrics, doc.ServerQueue = sm.report(res)
	doc.Timeline = pipeline.Timeline(res, blames)
	doc.Phases = pipeline.Phases(res, blames, base, marks)
	doc.CriticalPath = pipe.CriticalPath(res, cfg.Prior)
	pipe.Attribute(doc, res, percentiles)
	if via != nil {
		doc.Gateway = pipe.Gateway(res, viaComm(cfg.ViaPid), via, sm.result())
	}
	doc.Diagnosis = report.Diagnose(doc)
	out.Doc = doc
	return nil
}
