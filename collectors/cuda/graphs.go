package cuda

import (
	"fmt"
	schema "github.com/bpfbench/bpfbench/result"
	"io"

	"github.com/bpfbench/bpfbench/collectors/bpfutil"
)

// CUDA Graph and memory-pool signals, from the per-call counters the
// kernel already keeps (call_counts, per CPU): no map and no record of
// their own.
//
//   - Instantiations are successful calls of cuGraphInstantiate,
//     cuGraphInstantiate_v2, cuGraphInstantiateWithFlags,
//     cuGraphInstantiateWithParams(_ptsz) and the runtime's
//     cudaGraphInstantiate, cudaGraphInstantiateWithFlags and
//     cudaGraphInstantiateWithParams(_ptsz); failed ones are
//     InstantiateErrors. Each has a return probe (return code, duration)
//     and is counted, never streamed.
//   - Launches are cuGraphLaunch(_ptsz) / cudaGraphLaunch(_ptsz) calls.
//     They are launch-rate probes (entry only, under the budget of
//     budget.go): while the budget samples them, the session adds its
//     estimate (EstimatedLaunches) and the rates use it.
//   - ReuseRate is launches per instantiation: Launches (or
//     EstimatedLaunches) / Instantiations, unset without an instantiation
//     in the session (graphs captured before it started).
//   - Pool allocations are the stream-ordered ones: cuMemAllocFromPoolAsync,
//     cudaMallocFromPoolAsync and cuMemAllocAsync / cudaMallocAsync (the
//     device's current pool); PoolAllocFailures are those that returned
//     out of memory (2), and OOMPer1000Launches is 1000 * PoolAllocFailures
//     / launches, unset without a graph launch.
//   - PoolTrims and PoolAttributeSets are successful cuMemPoolTrimTo /
//     cudaMemPoolTrimTo and cuMemPoolSetAttribute / cudaMemPoolSetAttribute
//     calls; PoolTrimKeepBytes sums the trims' minBytesToKeep.
//
// The figures are per API: in a real process the runtime's graph calls
// reach the driver's, so summing the two would count them twice.

// GraphSummary (result.CUDAGraphs) is one API's CUDA Graph and memory-pool figures.
type GraphSummary = schema.CUDAGraphs

// graphCounts are the graph and pool counters of one API.
type graphCounts struct {
	used                                                bool
	instantiations, instantiateErrors, execDestroys     uint64
	launches, poolAllocs, poolOOM, trims, keep, setAttr uint64
}

// graphFigures adds the counters of the calls with a graph role, per API
// (indexed by API).
func graphFigures(counts []Counts) [2]graphCounts {
	var g [2]graphCounts
	for i, c := range counts {
		if i >= len(calls) || calls[i].graph == roleNone || c.Count == 0 {
			continue
		}
		info := calls[i]
		x := &g[info.API&1]
		x.used = true
		ok := c.Count - c.Errors
		switch info.graph {
		case roleInstantiate:
			x.instantiations += ok
			x.instantiateErrors += c.Errors
		case roleExecDestroy:
			x.execDestroys += ok
		case roleGraphLaunch:
			x.launches += c.Count
		case rolePoolAlloc:
			x.poolAllocs += c.Count
			x.poolOOM += c.OutOfMemory
		case rolePoolTrim:
			x.trims += ok
			x.keep += c.Bytes
		case rolePoolAttr:
			x.setAttr += ok
		}
	}
	return g
}

// ReuseRateOf is launches per instantiation (nil without one).
func ReuseRateOf(launches, instantiations uint64) *float64 {
	if instantiations == 0 {
		return nil
	}
	v := float64(launches) / float64(instantiations)
	return &v
}

// OOMPer1000 is out-of-memory returns per 1,000 graph launches (nil without a launch).
func OOMPer1000(failures, launches uint64) *float64 {
	if launches == 0 {
		return nil
	}
	v := 1000 * float64(failures) / float64(launches)
	return &v
}

// graphSummaries builds the session's figures: instNs is the time in
// instantiations per API, estimated the launch estimate per call (0: none).
func graphSummaries(counts []Counts, instNs [2]uint64, estimated func(Call) uint64) []GraphSummary {
	var out []GraphSummary
	for api, g := range graphFigures(counts) {
		if !g.used {
			continue
		}
		s := GraphSummary{
			API: API(api).String(), Instantiations: g.instantiations, InstantiateErrors: g.instantiateErrors,
			InstantiateSeconds: float64(instNs[api]) / 1e9, ExecDestroys: g.execDestroys, Launches: g.launches,
			PoolAllocs: g.poolAllocs, PoolAllocFailures: g.poolOOM, PoolTrims: g.trims, PoolTrimKeepBytes: g.keep,
			PoolAttributeSets: g.setAttr,
		}
		if estimated != nil {
			var est uint64
			for i, info := range calls {
				if info.graph == roleGraphLaunch && int(info.API) == api {
					est += estimated(Call(i))
				}
			}
			if est > s.Launches {
				s.EstimatedLaunches = est
			}
		}
		launches := s.Launches
		if s.EstimatedLaunches > 0 {
			launches = s.EstimatedLaunches
		}
		s.ReuseRate = ReuseRateOf(launches, s.Instantiations)
		s.OOMPer1000Launches = OOMPer1000(s.PoolAllocFailures, launches)
		out = append(out, s)
	}
	return out
}

// writeGraphs writes the summary's graphs block.
func writeGraphs(w io.Writer, gs []GraphSummary) {
	for _, g := range gs {
		launches := fmt.Sprint(g.Launches)
		if g.EstimatedLaunches > 0 {
			launches = fmt.Sprintf("%d counted, ~%d with the sampled estimate", g.Launches, g.EstimatedLaunches)
		}
		reuse, oom := "- (no instantiation in the session)", "-"
		if g.ReuseRate != nil {
			reuse = fmt.Sprintf("%.2f launches per instantiation", *g.ReuseRate)
		}
		if g.OOMPer1000Launches != nil {
			oom = fmt.Sprintf("%.3f", *g.OOMPer1000Launches)
		}
		fmt.Fprintf(w, "  graphs (%s): %d instantiated (%d failed, %s), %d exec destroyed, %s launches; reuse %s\n",
			g.API, g.Instantiations, g.InstantiateErrors, bpfutil.Dur(g.InstantiateSeconds), g.ExecDestroys, launches, reuse)
		fmt.Fprintf(w, "  pools (%s): %d allocations, %d out of memory (%s per 1000 graph launches), %d trims (keeping %d bytes in all), %d attribute sets\n",
			g.API, g.PoolAllocs, g.PoolAllocFailures, oom, g.PoolTrims, g.PoolTrimKeepBytes, g.PoolAttributeSets)
	}
}
