package run

import (
	"github.com/bpfbench/bpfbench/pipeline"
	"github.com/bpfbench/bpfbench/result"
)

// The run directory's baseline and gaps file are the pipeline's; the
// commands reach them through the jobs.

// Prior is another run taken as the baseline (`run --baseline DIR`).
type Prior = pipeline.Prior

// DefaultSpoolBytes is the spool's bound unless RunConfig.SpoolBytes is set.
const DefaultSpoolBytes = pipeline.DefaultSpoolBytes

// GapsFile is the run directory's file of every walked gap.
const GapsFile = result.GapsFile

// LoadPrior reads the baseline of a run directory (or its result.json).
func LoadPrior(path string) (*Prior, error) { return pipeline.LoadPrior(path) }

// RebuildAttribution rebuilds a recorded run's attribution from its gaps
// file (pipeline.RebuildAttribution).
func RebuildAttribution(doc *result.Document, dir string) error {
	return pipeline.RebuildAttribution(doc, dir)
}

// Rebase compares a recorded run's critical path with prior's
// (pipeline.Rebase).
func Rebase(doc *result.Document, dir string, prior *Prior) error {
	return pipeline.Rebase(doc, dir, prior)
}
