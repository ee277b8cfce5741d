// Package diff compares two runs (`bpfbench diff A B`): the load metrics
// with a significance test on the per-request figures, the attribution per
// cause, the prompt-distribution drift (the first token's entropy clusters
// of runs made with --logprobs: drift.go), and every difference of the two
// runs' manifests, for a terminal and as JSON.
//
// It reads result.json files as `bpfbench run` (and `load`, `demo`,
// `validate`) write them. Runs of different bpfbench versions, and runs
// that lack a part (a `load` result has no attribution, a run written
// before manifests were recorded has none), are compared on what both
// have; what was missing is listed, never a panic.
package diff

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/bpfbench/bpfbench/internal/manifest"
	"github.com/bpfbench/bpfbench/result"
)

// Metrics are the per-request figures a run is compared on, in ms: TTFT,
// TPOT (one per request of more than one token), ITL (every gap between
// chunks) and E2EL (vLLM's end-to-end latency).
var Metrics = []string{"ttft", "tpot", "itl", "e2el"}

// Run is one loaded run.
type Run struct {
	// Path is the result.json read.
	Path string
	Doc  *result.Document
	// Manifest is the run's manifest, nil when it has none.
	Manifest *manifest.Manifest
	// Samples are the per-request figures per metric (Metrics), in ms.
	Samples map[string][]float64
	// SamplesFrom says where they were read: "bpfbench.records" (the raw
	// timestamps) or "ttfts/itls" (vLLM's lists).
	SamplesFrom string
	// Missing lists the parts the file does not have, and what that
	// leaves out of a comparison.
	Missing []string
}

// Version is the bpfbench version that wrote the run, "" when unknown.
func (r *Run) Version() string {
	if r.Manifest == nil {
		return ""
	}
	return r.Manifest.Bpfbench.Version
}

// The keys that make a JSON object a bpfbench result: at least one.
var resultKeys = []string{"completed", "ttfts", "bpfbench", "attribution", "manifest"}

// Load reads a run: a run directory (its result.json) or a result.json.
func Load(path string) (*Run, error) {
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("reading run %s: no such file or directory", path)
		}
		return nil, fmt.Errorf("reading run %s: %w", path, err)
	}
	file := path
	if fi.IsDir() {
		file = filepath.Join(path, "result.json")
		if _, err := os.Stat(file); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("%s is not a run directory: it has no result.json (bpfbench run --out DIR writes one)", path)
			}
			return nil, fmt.Errorf("reading run %s: %w", file, err)
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading run %s: %w", file, err)
	}
	return parse(file, b)
}

func parse(file string, b []byte) (*Run, error) {
	trimmed := bytes.TrimSpace(b)
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("%s is empty: not a bpfbench result", file)
	}
	if trimmed[0] != '{' {
		return nil, fmt.Errorf("%s is not a bpfbench result: it is JSON but not an object", file)
	}
	var doc result.Document
	if err := json.Unmarshal(b, &doc); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line, col := position(b, se.Offset)
			return nil, fmt.Errorf("%s is not valid JSON (line %d, column %d: %v); was it cut short?", file, line, col, err)
		}
		return nil, fmt.Errorf("%s is not a bpfbench result: %w", file, err)
	}
	r := &Run{Path: file, Doc: &doc}
	known := doc.Attribution != nil || doc.Activity != nil || doc.BPFBench != nil || doc.Manifest != nil ||
		len(doc.TTFTs) > 0 || doc.Completed+doc.Failed > 0 || len(doc.Percentiles) > 0
	if !known {
		return nil, fmt.Errorf("%s is not a bpfbench result: it has none of %v", file, resultKeys)
	}
	if doc.Manifest == nil {
		r.Missing = append(r.Missing, "manifest (written by a bpfbench that recorded none): no version, environment or file differences")
	} else {
		r.Manifest = doc.Manifest
	}
	switch {
	case doc.Attribution == nil && doc.Legacy():
		r.Missing = append(r.Missing, "attribution (written by a bpfbench whose attribution was overlapping activity, not the critical path): no attribution deltas")
	case doc.Attribution == nil:
		r.Missing = append(r.Missing, "attribution (not written by bpfbench run): no attribution deltas")
	}
	if err := r.samples(); err != nil {
		r.Missing = append(r.Missing, err.Error())
	}
	return r, nil
}

// position turns a byte offset into a line and column.
func position(b []byte, off int64) (int, int) {
	off = min(max(off, 0), int64(len(b)))
	line := 1 + bytes.Count(b[:off], []byte("\n"))
	col := int(off) - bytes.LastIndexByte(b[:off], '\n')
	return line, col
}

// samples reads the per-request figures: from the raw records when the
// file has them (the same definitions as the load generator's metrics),
// or else from vLLM's ttfts and itls lists, where E2EL is TTFT plus the
// gaps (the last chunk's arrival) and TPOT the gaps over output tokens − 1.
func (r *Run) samples() error {
	s := map[string][]float64{}
	d := r.Doc
	if bb := d.BPFBench; bb != nil && len(bb.Records) > 0 {
		for _, rec := range bb.Records {
			if !rec.Success || rec.Warmup || len(rec.ChunkNs) == 0 {
				continue
			}
			ttft := float64(rec.ChunkNs[0]-rec.StartNs) / 1e6
			s["ttft"] = append(s["ttft"], ttft)
			for j := 1; j < len(rec.ChunkNs); j++ {
				s["itl"] = append(s["itl"], float64(rec.ChunkNs[j]-rec.ChunkNs[j-1])/1e6)
			}
			if rec.LastNs > 0 {
				e2e := float64(rec.LastNs-rec.StartNs) / 1e6
				s["e2el"] = append(s["e2el"], e2e)
				if rec.OutputTokens > 1 {
					s["tpot"] = append(s["tpot"], (e2e-ttft)/float64(rec.OutputTokens-1))
				}
			}
		}
		r.Samples, r.SamplesFrom = s, "bpfbench.records"
		return nil
	}
	ttfts, itls, outLens, errs := d.TTFTs, d.ITLs, d.OutputLens, d.Errors
	if len(ttfts) == 0 {
		return errors.New("per-request figures (no bpfbench.records, and no ttfts): metric values only, no significance test")
	}
	for i, ttft := range ttfts {
		// vLLM writes 0 and no gaps for a failed request.
		if i < len(errs) && errs[i] != "" || i < len(outLens) && outLens[i] == 0 {
			continue
		}
		s["ttft"] = append(s["ttft"], ttft*1e3)
		if i >= len(itls) {
			continue
		}
		sum := 0.0
		for _, g := range itls[i] {
			s["itl"] = append(s["itl"], g*1e3)
			sum += g * 1e3
		}
		s["e2el"] = append(s["e2el"], ttft*1e3+sum)
		if i < len(outLens) && outLens[i] > 1 {
			s["tpot"] = append(s["tpot"], sum/float64(outLens[i]-1))
		}
	}
	r.Samples, r.SamplesFrom = s, "ttfts/itls"
	if itls == nil {
		return errors.New("per-request gaps (itls): ITL, TPOT and E2EL tested on nothing")
	}
	return nil
}

// loadFloat reads a numeric load field; ok is false when it is missing
// (vLLM writes null for a metric it did not compute).
func loadFloat(d *result.Document, key string) (float64, bool) {
	if v, ok := d.Percentiles[key]; ok {
		return v, true
	}
	if !d.Has(key) {
		return 0, false
	}
	return d.Loadgen.Metric(key)
}

func sortedCopy(v []float64) []float64 {
	out := append([]float64(nil), v...)
	sort.Float64s(out)
	return out
}
