package pipeline

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"path/filepath"
	"slices"

	"github.com/bpfbench/bpfbench/result"

	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/correlate/critpath"
	"github.com/bpfbench/bpfbench/internal/atomicfile"
)

// GapsFile is the run directory's file of every walked gap, compactly
// (one JSON array a line, gzip): what `report DIR --baseline DIR2`
// recomputes the critical path's excess from, and what a later run's
// `--baseline DIR` takes its tail from.
const GapsFile = "gaps.jsonl.gz"

// gapsHeader is the gaps file's first line.
type gapsHeader struct {
	Format     string      `json:"format"`
	Causes     []string    `json:"causes"`
	RunStartNs int64       `json:"run_start_ns"`
	Phases     []gapsPhase `json:"phases,omitempty"`
}

type gapsPhase struct {
	Name   string `json:"name"`
	FromNs int64  `json:"from_ns"`
	ToNs   int64  `json:"to_ns"`
}

// gapsFormat names the line layout: request, index, start and end (ns),
// no_arrival (0 or 1), then each cause's ns in Causes order.
const gapsFormat = "bpfbench-gaps/2: [request, index, start_ns, end_ns, no_arrival, ns per cause..., hypervisor_steal_ns]"

// gapsFormat1 is the layout before the steal column (read as steal 0).
const gapsFormat1 = "bpfbench-gaps/1: [request, index, start_ns, end_ns, no_arrival, ns per cause...]"

// writeGaps writes dir/GapsFile, atomically.
func writeGaps(dir string, runStart int64, phases []critPhase, gaps iter.Seq[critGap]) error {
	return atomicfile.Write(filepath.Join(dir, GapsFile), 0o644, func(bw *bufio.Writer) error {
		return encodeGaps(bw, runStart, phases, gaps)
	})
}

func encodeGaps(bw *bufio.Writer, runStart int64, phases []critPhase, gaps iter.Seq[critGap]) error {
	// BestSpeed: a tenth of a run's own CPU went to compressing this at
	// the default level.
	zw, _ := gzip.NewWriterLevel(bw, gzip.BestSpeed)
	enc := json.NewEncoder(zw)
	h := gapsHeader{Format: gapsFormat, Causes: critpath.CauseNames(), RunStartNs: runStart}
	for _, p := range phases {
		h.Phases = append(h.Phases, gapsPhase{p.name, p.from, p.to})
	}
	if err := enc.Encode(h); err != nil {
		return err
	}
	row := make([]int64, 6+critpath.NumCauses)
	for g := range gaps {
		row[0], row[1], row[2], row[3], row[4] = int64(g.request), int64(g.index), g.start, g.end, 0
		if g.noArrival {
			row[4] = 1
		}
		copy(row[5:], g.ns[:])
		row[len(row)-1] = g.steal
		if err := enc.Encode(row); err != nil {
			return err
		}
	}
	return zw.Close()
}

// readGaps reads a run directory's GapsFile.
func readGaps(dir string) (gapsHeader, []critGap, error) {
	var h gapsHeader
	p := filepath.Join(dir, GapsFile)
	f, err := os.Open(p)
	if err != nil {
		return h, nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(bufio.NewReader(f))
	if err != nil {
		return h, nil, fmt.Errorf("%s: %w", p, err)
	}
	dec := json.NewDecoder(zr)
	if err := dec.Decode(&h); err != nil {
		return h, nil, fmt.Errorf("%s: its header: %w", p, err)
	}
	extra := 1 // the steal column
	switch h.Format {
	case gapsFormat:
	case gapsFormat1:
		extra = 0
	default:
		return h, nil, fmt.Errorf("%s is in format %q; this bpfbench reads %q", p, h.Format, gapsFormat)
	}
	// The causes by name: a file from a version with other causes maps
	// what it can and refuses what it cannot.
	idx := make([]critpath.Cause, len(h.Causes))
	for i, name := range h.Causes {
		c, ok := critpath.CauseByName(name)
		if !ok {
			return h, nil, fmt.Errorf("%s names a cause this bpfbench does not know: %q", p, name)
		}
		idx[i] = c
	}
	var out []critGap
	for line := 2; ; line++ {
		var row []int64
		if err := dec.Decode(&row); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return h, out, fmt.Errorf("%s line %d: %w (the %d gaps before it are kept)", p, line, err, len(out))
		}
		if len(row) != 5+len(idx)+extra {
			return h, out, fmt.Errorf("%s line %d: %d fields, want %d", p, line, len(row), 5+len(idx)+extra)
		}
		g := critGap{request: int32(row[0]), index: int32(row[1]), start: row[2], end: row[3], noArrival: row[4] != 0}
		for i, c := range idx {
			g.ns[c] = row[5+i]
		}
		if extra > 0 {
			g.steal = row[5+len(idx)]
		}
		out = append(out, g)
	}
	return h, out, nil
}

// Prior is another run taken as the baseline (`run --baseline DIR`,
// `report DIR --baseline DIR2`): a quiet run recorded earlier, so that a
// run contended from start to end is still compared with normal.
type Prior struct {
	// Dir is the run directory (or result.json) it was read from.
	Dir string
	// Union is its attribution's baseline (zero when it had none).
	Union correlate.Baseline
	// Crit is its critical path's normal gap, per cause.
	Crit critpath.Baseline
	// tail is the mean excess per cause of its slowest 10% of gaps
	// (validate's rule), when its gaps file was there.
	tail     tailMeans
	haveTail bool
}

// Name is how result.json names the baseline: "run DIR".
func (p *Prior) Name() string { return "run " + p.Dir }

// LoadPrior reads the baseline of a run directory (or its result.json).
func LoadPrior(path string) (*Prior, error) {
	dir, file := path, filepath.Join(path, "result.json")
	if fi, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("the baseline run %s: %w", path, err)
	} else if !fi.IsDir() {
		dir, file = filepath.Dir(path), path
	}
	doc, err := result.Load(file)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("the baseline %s is not a run directory: it has no result.json (bpfbench run --out DIR writes one)", path)
		}
		return nil, fmt.Errorf("the baseline run: %w", err)
	}
	p := &Prior{Dir: path}
	if a := doc.Activity; a != nil {
		p.Union.ITLNs = int64(a.BaselineITLMs * 1e6)
		p.Union.TTFTNs = int64(a.BaselineTTFTMs * 1e6)
		for c := correlate.Cause(0); c < correlate.NumCauses; c++ {
			p.Union.Rate[c] = a.BaselineRates[c.String()]
		}
	}
	cp := doc.CriticalPath
	if cp == nil || cp.Gaps == 0 {
		return nil, fmt.Errorf("the baseline run %s has no critical path (a run of a bpfbench without it, or a run that walked no gap): record the quiet run again with bpfbench run", path)
	}
	p.Crit = critpath.Baseline{TTFT: nsOf(cp.NormalTTFTMs), ITL: nsOf(cp.NormalITLMs)}
	if _, gaps, err := readGaps(dir); err == nil && len(gaps) > 0 {
		p.tail, p.haveTail = tailMean(slices.Values(gaps), p.Crit), true
	}
	return p, nil
}

func nsOf(m map[string]float64) [critpath.NumCauses]int64 {
	var out [critpath.NumCauses]int64
	for name, v := range m {
		if c, ok := critpath.CauseByName(name); ok {
			out[c] = int64(v * 1e6)
		}
	}
	return out
}

// rebase computes the parts of out that depend on the baseline and on
// every gap: the normal gaps, the p99 bands and the phases' added tail
// shares. base is the normal gap; baseTail, when given, the
// tail to subtract from each phase's (else the first phase's own).
func rebase(out *result.CriticalPath, gaps iter.Seq[critGap], phases []critPhase, base critpath.Baseline, baseTail *tailMeans) {
	out.NormalITLMs, out.NormalTTFTMs = causesMs(base.ITL), causesMs(base.TTFT)
	out.ITLP99 = band(gaps, base, false)
	out.TTFTP99 = band(gaps, base, true)
	out.Phases = nil
	if len(phases) == 0 {
		return
	}
	var bt tailMeans
	if baseTail != nil {
		bt = *baseTail
	} else {
		bt = tailMean(slices.Values(inPhase(gaps, phases[0])), base)
	}
	for _, p := range phases {
		gs := inPhase(gaps, p)
		cp := result.CriticalPhase{Name: p.name, Gaps: len(gs), ITLP99: band(slices.Values(gs), base, false)}
		tail := tailMean(slices.Values(gs), base)
		// The tails are of gaps without the hypervisor's steal (unstolen):
		// the kernel says who held the CPU, and no injection steals. The
		// steal the phase's tail had beyond the first phase's is told
		// apart.
		var added [critpath.NumCauses]float64
		var sum float64
		for k := range added {
			added[k] = max(tail.ns[k]-bt.ns[k], 0)
			sum += added[k]
		}
		cp.TailStealMs = max(tail.steal-bt.steal, 0) / 1e6
		cp.TailAddedShares = map[string]float64{}
		for k, v := range added {
			if sum > 0 {
				v /= sum
			}
			cp.TailAddedShares[critpath.Cause(k).String()] = v
		}
		cp.TailTop = topOf(cp.TailAddedShares)
		cp.TailAddedMs = sum / 1e6
		out.Phases = append(out.Phases, cp)
	}
}

// Rebase recomputes a recorded run's critical-path excess against prior
// (report DIR --baseline DIR2): dir's gaps file gives its gaps, doc (its
// result.json) is changed in place: the critical path, and the
// attribution, timeline and phases built from it. The activity model
// stays as it was recorded: its intervals are not kept.
func Rebase(doc *result.Document, dir string, prior *Prior) error {
	if doc.CriticalPath == nil {
		return fmt.Errorf("%s has no critical path to compare", dir)
	}
	h, gaps, err := readGaps(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s has no %s (runs of this bpfbench write one): its gaps cannot be compared with another baseline", dir, GapsFile)
		}
		return err
	}
	var phases []critPhase
	for _, p := range h.Phases {
		phases = append(phases, critPhase{name: p.Name, from: p.FromNs, to: p.ToNs})
	}
	var bt *tailMeans
	if prior.haveTail {
		bt = &prior.tail
	}
	cp := doc.CriticalPath
	cp.Baseline = prior.Name()
	rebase(cp, slices.Values(gaps), phases, prior.Crit, bt)
	var ps []float64
	if a := doc.Activity; a != nil {
		ps = bandPercentiles(a)
	}
	attribute(doc, slices.Values(gaps), phases, prior.Crit, h.RunStartNs, ps)
	// The slowest gaps' excess, from the per-cause times they list.
	for i := range cp.Slowest {
		s := &cp.Slowest[i]
		g := critpath.Gap{Read: critpath.Read{Index: s.Index, End: int64(s.DurationMs * 1e6)}, Ns: nsOf(s.CausesMs)}
		s.ExcessMs = ms(g.Excess(prior.Crit).ExcessNs)
	}
	return nil
}
