package run

import (
	"iter"

	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/exporter/report"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/pipeline"
	"github.com/bpfbench/bpfbench/result"
)

// assemble builds the run's result.json document into out.Doc: the load's
// result and manifest, the source's collection, the readiness checks, the
// server's metrics, the timeline, the phases, the critical path and its
// attribution, the gateway, and the diagnosis.
func (r *run) assemble(out *RunResult, res *loadgen.Result, st collected, base correlate.Baseline, blames iter.Seq[correlate.Blame], summary correlate.Summary, percentiles []float64) error {
	cfg, man, checks, sm, marks, pipe, via := r.cfg, r.man, r.checks, r.sm, r.marks, r.pipe, r.via
	doc := &result.Document{SchemaVersion: result.SchemaVersion, Activity: &summary, Collectors: &result.Collectors{}}
	res.Fill(doc)
	if man.Dataset == nil {
		man.Dataset = datasetOf(res.Dataset)
	}
	doc.Manifest = man
	r.src.describe(doc, res, st)
	for _, c := range checks {
		doc.Collection.Readiness = append(doc.Collection.Readiness, result.Check{Status: string(c.Status), Name: c.Name, Detail: c.Detail, Fix: c.Fix})
	}
	doc.ServerMetrics, doc.ServerQueue = sm.report(res)
	doc.Timeline = pipeline.Timeline(res, blames)
	doc.Phases = pipeline.Phases(res, blames, base, marks)
	doc.CriticalPath = pipe.CriticalPath(res, cfg.Prior)
	if cp := doc.CriticalPath; cp != nil {
		cp.ServerCPU = r.cpu.result(res)
		if cfg.Prior != nil {
			cp.ServerCPU.Compare(cfg.Prior.ServerCPU())
		}
	}
	pipe.Attribute(doc, res, percentiles)
	if via != nil {
		doc.Gateway = pipe.Gateway(res, viaComm(cfg.ViaPid), via, sm.result())
	}
	doc.Diagnosis = report.Diagnose(doc)
	out.Doc = doc
	return nil
}
