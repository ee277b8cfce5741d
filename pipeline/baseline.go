package pipeline

import (
	"bufio"
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
	"github.com/bpfbench/bpfbench/live"
)

// GapsFile is the run directory's file of every walked gap
// (result.GapsFile).
const GapsFile = result.GapsFile

// gapsHeader is the gaps file's first line.
type gapsHeader = result.GapsHeader

// gapsFormat and gapsFormat1 are the gaps file's line layouts, this
// version's and the one before the steal column.
const (
	gapsFormat  = result.GapsFormat
	gapsFormat1 = result.GapsFormat1
)

// writeGaps writes dir/GapsFile, atomically.
func writeGaps(dir string, runStart int64, phases []critPhase, gaps iter.Seq[critGap]) error {
	return atomicfile.Write(filepath.Join(dir, GapsFile), 0o644, func(bw *bufio.Writer) error {
		return encodeGaps(bw, runStart, phases, gaps)
	})
}

func encodeGaps(bw *bufio.Writer, runStart int64, phases []critPhase, gaps iter.Seq[critGap]) error {
	var ps []result.GapsPhase
	for _, p := range phases {
		ps = append(ps, result.GapsPhase{Name: p.name, FromNs: p.from, ToNs: p.to})
	}
	gw, err := result.NewGapsWriter(bw, runStart, ps)
	if err != nil {
		return err
	}
	for g := range gaps {
		if err := gw.Write(g.record()); err != nil {
			return err
		}
	}
	return gw.Close()
}

// readGaps reads a run directory's GapsFile. On a bad line it returns the
// gaps before it with the error.
func readGaps(dir string) (gapsHeader, []critGap, error) {
	r, err := result.OpenGaps(filepath.Join(dir, GapsFile))
	if err != nil {
		return gapsHeader{}, nil, err
	}
	defer r.Close()
	var out []critGap
	for {
		g, err := r.Next()
		if errors.Is(err, io.EOF) {
			return r.Header, out, nil
		}
		if err != nil {
			return r.Header, out, err
		}
		out = append(out, critGapOf(g))
	}
}

// record is g as the gaps file holds it.
func (g critGap) record() result.Gap {
	return result.Gap{Request: g.request, Index: g.index, StartNs: g.start, EndNs: g.end, NoArrival: g.noArrival, Ns: g.ns, StealNs: g.steal}
}

// critGapOf is the gap a gaps file's record holds.
func critGapOf(r result.Gap) critGap {
	return critGap{request: r.Request, index: r.Index, start: r.StartNs, end: r.EndNs, noArrival: r.NoArrival, ns: r.Ns, steal: r.StealNs}
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
	// inFlight is the normal number of its requests in flight (the batch
	// rule's n0), from its gaps file (0: none, the rule is off).
	inFlight float64
	// elasticity is how its decode steps grew with the batch (the batch
	// rule's e), from its gaps file.
	elasticity stepElasticity
	// late is how late its load generator normally started a request
	// (the rules' normal lateness), from its records.
	late int64
	// itlP99 is its p99 gap band (live.MatchBand compares a run's with it).
	itlP99 *result.CriticalBand
	// cpu is its server's CPU a token (nil: it measured none).
	cpu *result.ServerCPU
}

// ServerCPU is its server's CPU a token (nil when it measured none).
func (p *Prior) ServerCPU() *result.ServerCPU { return p.cpu }

// Band is its p99 gap band (nil when it had none).
func (p *Prior) Band() *result.CriticalBand { return p.itlP99 }

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
	p.itlP99, p.cpu = cp.ITLP99, cp.ServerCPU
	if _, gaps, err := readGaps(dir); err == nil && len(gaps) > 0 {
		p.tail, p.haveTail = tailMean(slices.Values(gaps), p.Crit), true
		p.inFlight, p.elasticity = normalInFlight(gaps), batchElasticity(gaps)
	}
	if b := doc.BPFBench; b != nil {
		p.late = medianLate(b.Records)
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
	live.MatchBand(cp.ITLP99, prior.itlP99, prior.Name())
	cp.ServerCPU.Compare(prior.cpu)
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
