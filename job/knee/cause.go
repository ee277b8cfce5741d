package knee

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"

	"github.com/bpfbench/bpfbench/correlate/critpath"
	"github.com/bpfbench/bpfbench/job/run"
	"github.com/bpfbench/bpfbench/live"
	"github.com/bpfbench/bpfbench/loadgen/metrics"
	"github.com/bpfbench/bpfbench/loadgen/sweep"
	"github.com/bpfbench/bpfbench/result"
)

// CauseServerQueue is the knee's name for a TTFT's wait for a slot of the
// engine behind other requests (result.json's server_queue): not a cause
// of the critical path, which walks that wait as whatever the engine's
// threads did meanwhile (mostly other requests' compute).
const CauseServerQueue = "server_queue"

// breachBasis is the rule of BreachCause, as sweep.json states it.
const breachBasis = "per cause, the mean excess per interval of the failing run's slowest 10% of the broken metric's intervals " +
	"(the TTFTs, or the token gaps after the first) less the same in the passing run's, floored at 0 and normalised, " +
	"both against the passing run's normal gap and without the hypervisor's steal; for a TTFT, the time the request " +
	"waited for a slot (server_queue) is taken first and the critical path's causes share the rest"

// kneeInterval is one interval of a followed run at the knee: its excess
// per cause (the critical path's, and the queue's in CauseServerQueue's
// column) and its length, both without the hypervisor's steal.
type kneeInterval struct {
	dur int64
	ex  [critpath.NumCauses + 1]float64
}

// queueCol is CauseServerQueue's column in kneeInterval.ex.
const queueCol = int(critpath.NumCauses)

// kneeCauseNames are the columns of kneeInterval.ex.
func kneeCauseNames() []string {
	return append(critpath.CauseNames(), CauseServerQueue)
}

// kneeIntervals reads a run's gaps (its directory's gaps file): the TTFTs
// (ttft) or the later gaps, each as its excess over base, a TTFT's wait
// for a slot (queue, by request index, ns) taken out of its excess first.
func kneeIntervals(dir string, base critpath.Baseline, ttft bool, queue map[int]int64) ([]kneeInterval, error) {
	_, gaps, err := result.ReadGaps(filepath.Join(dir, result.GapsFile))
	if err != nil {
		return nil, err
	}
	var out []kneeInterval
	for _, g := range gaps {
		if (g.Index == 0) != ttft {
			continue
		}
		lg := live.Gap{Request: g.Request, Index: g.Index, Start: g.StartNs, End: g.EndNs, NoArrival: g.NoArrival, Ns: g.Ns}
		// Without the hypervisor's steal, as validate's tails are.
		if d := min(max(g.StealNs, 0), lg.Ns[critpath.CPURunqueue]); d > 0 {
			lg.Ns[critpath.CPURunqueue] -= d
			lg.End -= d
		}
		x := lg.Excess(base)
		var total int64
		for _, v := range x.Ns {
			total += v
		}
		iv := kneeInterval{dur: lg.End - lg.Start}
		q := min(queue[int(g.Request)], total)
		rest := 1.0
		if q > 0 && total > 0 {
			iv.ex[queueCol] = float64(q)
			rest = float64(total-q) / float64(total)
		}
		for c, v := range x.Ns {
			iv.ex[c] = float64(v) * rest
		}
		out = append(out, iv)
	}
	return out, nil
}

// tailOf is the mean excess per cause over the slowest 10% of ivs (at
// least one), and how many that is.
func tailOf(ivs []kneeInterval) ([critpath.NumCauses + 1]float64, int) {
	var mean [critpath.NumCauses + 1]float64
	if len(ivs) == 0 {
		return mean, 0
	}
	s := slices.Clone(ivs)
	sort.SliceStable(s, func(i, j int) bool { return s[i].dur > s[j].dur })
	n := max(len(s)/10, 1)
	for _, iv := range s[:n] {
		for c, v := range iv.ex {
			mean[c] += v / float64(n)
		}
	}
	return mean, n
}

// addedShares is what fail's tail added over pass's per cause (floored at
// 0), normalised, the largest cause and the sum (ns).
func addedShares(pass, fail [critpath.NumCauses + 1]float64) (map[string]float64, string, float64) {
	names := kneeCauseNames()
	var added [critpath.NumCauses + 1]float64
	var sum float64
	for c := range added {
		added[c] = max(fail[c]-pass[c], 0)
		sum += added[c]
	}
	shares := map[string]float64{}
	top, topV := "", 0.0
	for c, v := range added {
		if sum > 0 {
			v /= sum
		}
		shares[names[c]] = v
		if v > topV {
			top, topV = names[c], v
		}
	}
	return shares, top, sum
}

// queueWaits are the fail run's requests' waits for a slot (ns, by
// request index), from its server_queue estimate.
func queueWaits(doc *result.Document) map[int]int64 {
	out := map[int]int64{}
	if q := doc.ServerQueue; q != nil && q.Available {
		for _, r := range q.Requests {
			out[r.Index] = int64(r.QueueMs * 1e6)
		}
	}
	return out
}

// breachedSLO is the SLO the failing run broke that the explanation is
// on, and its metric: "ttft" for a TTFT objective, "itl" for an ITL or a
// TPOT one; another objective (E2EL, goodput) is explained on whichever
// of the p99 TTFT and ITL grew more, relatively, from pass to fail.
func breachedSLO(slos []sweep.SLO, pass, fail *metrics.Metrics) (sweep.SLO, string, bool) {
	var other *sweep.SLO
	for i, s := range slos {
		v, ok := fail.Value(s.Metric)
		if !ok || s.Met(v) {
			continue
		}
		if _, m, ok := metrics.MetricPercentile(s.Metric); ok {
			switch m {
			case "ttft":
				return s, "ttft", true
			case "itl", "tpot":
				return s, "itl", true
			}
		}
		if other == nil {
			other = &slos[i]
		}
	}
	if other == nil {
		return sweep.SLO{}, "", false
	}
	growth := func(name string) float64 {
		f, _ := fail.Value(name)
		if pass == nil {
			return f
		}
		p, _ := pass.Value(name)
		if p <= 0 {
			return f
		}
		return f / p
	}
	if growth("p99_ttft_ms") >= growth("p99_itl_ms") {
		return *other, "ttft", true
	}
	return *other, "itl", true
}

// breachCause is the cause of the breach on the metric that broke: the
// failing run's slowest 10% of that metric's intervals against the
// passing run's (pass may be nil when no level passed: its tail is then
// none), against the passing run's normal gap (else the failing run's).
func breachCause(slos []sweep.SLO, pass, fail *run.RunResult) (*sweep.BreachCause, error) {
	var pm *metrics.Metrics
	if pass != nil && pass.Load != nil {
		pm = pass.Load.Metrics
	}
	if fail == nil || fail.Load == nil || fail.Load.Metrics == nil {
		return nil, fmt.Errorf("the failing run has no measurement")
	}
	slo, metric, ok := breachedSLO(slos, pm, fail.Load.Metrics)
	if !ok {
		return nil, errNoBreach
	}
	baseDoc := fail.Doc
	if pass != nil && pass.Doc != nil && pass.Doc.CriticalPath != nil && pass.Doc.CriticalPath.Gaps > 0 {
		baseDoc = pass.Doc
	}
	if baseDoc.CriticalPath == nil || baseDoc.CriticalPath.Gaps == 0 {
		return nil, fmt.Errorf("the runs have no critical path")
	}
	base := critpath.Baseline{TTFT: normalOf(baseDoc.CriticalPath.NormalTTFTMs), ITL: normalOf(baseDoc.CriticalPath.NormalITLMs)}
	ttft := metric == "ttft"
	bc := &sweep.BreachCause{Metric: metric, SLO: slo.String(), Basis: breachBasis}
	bc.FailValue, _ = fail.Load.Metrics.Value(slo.Metric)
	if pm != nil {
		bc.PassValue, _ = pm.Value(slo.Metric)
	}
	var fq map[int]int64
	if ttft {
		fq = queueWaits(fail.Doc)
		if q := fail.Doc.ServerQueue; q != nil && q.Available {
			bc.Slots = q.Slots
		}
	}
	fivs, err := kneeIntervals(fail.Dir, base, ttft, fq)
	if err != nil {
		return nil, fmt.Errorf("the failing run's gaps: %w", err)
	}
	ftail, n := tailOf(fivs)
	var ptail [critpath.NumCauses + 1]float64
	if pass != nil {
		var pq map[int]int64
		if ttft {
			pq = queueWaits(pass.Doc)
		}
		pivs, err := kneeIntervals(pass.Dir, base, ttft, pq)
		if err != nil {
			return nil, fmt.Errorf("the passing run's gaps: %w", err)
		}
		ptail, _ = tailOf(pivs)
	}
	bc.Tail = n
	bc.Shares, bc.Cause, bc.AddedMs = addedShares(ptail, ftail)
	bc.AddedMs /= 1e6
	bc.Share = bc.Shares[bc.Cause]
	if ttft {
		bc.QueueMs = ftail[queueCol] / 1e6
	}
	return bc, nil
}

// errNoBreach: the failing run failed, but on no SLO (its failed
// requests).
var errNoBreach = errors.New("the failing run broke no SLO")

// normalOf is a normal gap from its per-cause ms (result.json's).
func normalOf(m map[string]float64) critpath.Normal {
	var out critpath.Normal
	for name, v := range m {
		if c, ok := critpath.CauseByName(name); ok {
			out[c] = int64(v * 1e6)
		}
	}
	return out
}
