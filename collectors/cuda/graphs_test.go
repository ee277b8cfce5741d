package cuda

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/bpfbench/bpfbench/internal/privtest"
)

// graphResult is the --graphs/--exhaust part of cudastub-driver's JSON.
type graphResult struct {
	result
	Instantiations    uint64 `json:"instantiations"`
	InstantiateErrors uint64 `json:"instantiate_errors"`
	GraphLaunches     uint64 `json:"graph_launches"`
	ExecDestroys      uint64 `json:"exec_destroys"`
	Exhaustions       uint64 `json:"exhaustions"`
	PoolAllocs        uint64 `json:"pool_allocs"`
	PoolOOM           uint64 `json:"pool_oom"`
	PoolOOMFragmented uint64 `json:"pool_oom_fragmented"`
	PoolTrims         uint64 `json:"pool_trims"`
	PoolAttributeSets uint64 `json:"pool_attribute_sets"`
}

func (d *driver) graphResult(t *testing.T) graphResult {
	t.Helper()
	r := graphResult{result: d.result(t)}
	if err := json.Unmarshal(d.stdout.Bytes(), &r); err != nil {
		t.Fatalf("decoding cudastub-driver's JSON: %v", err)
	}
	return r
}

// startHost follows pid from a daemon collector under slot 5 ("llm").
func startHost(t *testing.T, pid int) *Host {
	t.Helper()
	h := NewHost(nil, func() map[uint32]string { return map[uint32]string{0: "host", 5: "llm"} })
	if err := h.Start(context.Background()); err != nil {
		t.Fatalf("start: %+v", err)
	}
	progs := h.ProgramIDs()
	t.Cleanup(func() {
		links := h.LinkIDs()
		if err := h.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		privtest.AssertReleased(t, progs, links)
	})
	if err := h.SetTarget(uint32(pid), 5); err != nil {
		t.Fatal(err)
	}
	return h
}

// scrape gathers h and returns the value of each counter by name and api label.
func scrape(t *testing.T, h *Host) map[string]map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(h)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gathering: %v", err)
	}
	out := map[string]map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "bpfbench_cuda_graph_") && !strings.HasPrefix(mf.GetName(), "bpfbench_cuda_pool_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["target"] != "llm" {
				t.Errorf("%s for target %q", mf.GetName(), labels["target"])
			}
			if mf.GetType() != dto.MetricType_COUNTER {
				t.Errorf("%s is a %v", mf.GetName(), mf.GetType())
			}
			if out[mf.GetName()] == nil {
				out[mf.GetName()] = map[string]float64{}
			}
			out[mf.GetName()][labels["api"]] = m.GetCounter().GetValue()
		}
	}
	return out
}

func graphsOf(t *testing.T, sum Summary, api string) GraphSummary {
	t.Helper()
	if len(sum.Graphs) != 1 || sum.Graphs[0].API != api {
		t.Fatalf("graphs %+v, want one for the %s API", sum.Graphs, api)
	}
	return sum.Graphs[0]
}

// TestGraphsMatchTheDriver: the stub's driver program instantiates N
// graphs (each instantiate call in turn, and one that fails), launches
// them M times, exhausts a pool K times (an out-of-memory return and a
// trim each) and sets one pool attribute. The session's graphs block and
// the daemon's counters, both following the process, say exactly that,
// and the rates are M/N and 1000*K/M.
func TestGraphsMatchTheDriver(t *testing.T) {
	privtest.Require(t)
	const n, m, k = 4, 60, 3
	names := map[string]struct{ alloc, inst, launch string }{
		"driver":  {"cuMemAllocFromPoolAsync", "cuGraphInstantiateWithParams", "cuGraphLaunch"},
		"runtime": {"cudaMallocFromPoolAsync", "cudaGraphInstantiateWithParams", "cudaGraphLaunch"},
	}
	for _, api := range []string{"driver", "runtime"} {
		t.Run(api, func(t *testing.T) {
			d := startDriver(t, api, "--graphs", fmt.Sprint(n), "--fail-instantiate", "--launches", fmt.Sprint(m), "--syncs", "3",
				"--kernel-us", "200", "--exhaust", fmt.Sprint(k), "--pool-bytes", "4194304", "--alloc-bytes", "1048576")
			h := startHost(t, d.pid())
			s, stop := runSection(t, d.pid(), SectionConfig{})
			d.release(t)
			r := d.graphResult(t)
			stop()
			if r.Instantiations != n || r.InstantiateErrors != 1 || r.GraphLaunches != m || r.ExecDestroys != n || r.PoolOOM != k || r.PoolTrims != k || r.PoolAttributeSets != 1 {
				t.Fatalf("the driver did not do what was asked: %+v", r)
			}
			sum := s.Aggregate()
			js, _ := json.Marshal(s.Summary())
			t.Logf("summary: %s", js)

			// Every probed call, with its errors.
			for name, c := range r.Calls {
				id, ok := CallByName(name)
				if !ok {
					continue
				}
				got, _ := findCall(sum, name)
				if got.Count != c {
					t.Errorf("%s: count %d, the driver made %d", name, got.Count, c)
				}
				if id.Info().returns() && got.Errors != r.Errors[name] {
					t.Errorf("%s: errors %d, the driver saw %d", name, got.Errors, r.Errors[name])
				}
			}
			if c, _ := findCall(sum, names[api].inst); c.Kind != "graph" || c.Count == 0 {
				t.Errorf("%s: %+v, want graph calls", names[api].inst, c)
			}

			g := graphsOf(t, sum, api)
			want := GraphSummary{
				API: api, Instantiations: n, InstantiateErrors: 1, InstantiateSeconds: g.InstantiateSeconds, ExecDestroys: n,
				Launches: m, PoolAllocs: r.PoolAllocs, PoolAllocFailures: k, PoolTrims: k, PoolTrimKeepBytes: k << 20,
				PoolAttributeSets: 1, ReuseRate: ReuseRateOf(m, n), OOMPer1000Launches: OOMPer1000(k, m),
			}
			if fmt.Sprintf("%+v", deref(g)) != fmt.Sprintf("%+v", deref(want)) {
				t.Errorf("graphs\n got %+v\nwant %+v", deref(g), deref(want))
			}
			if *g.ReuseRate != 15 || *g.OOMPer1000Launches != 50 {
				t.Errorf("reuse %v, out of memory per 1000 launches %v; want 15 and 50", *g.ReuseRate, *g.OOMPer1000Launches)
			}
			if g.InstantiateSeconds <= 0 || g.InstantiateSeconds > 0.1 {
				t.Errorf("%.6fs in %d instantiations", g.InstantiateSeconds, n+1)
			}
			if lp := s.LaunchProbes(); lp.Mode != "full" {
				t.Errorf("launch probes %+v, want full", lp)
			}
			// The JSON section and the text.
			var doc struct {
				Graphs []map[string]any `json:"graphs"`
			}
			if err := json.Unmarshal(js, &doc); err != nil || len(doc.Graphs) != 1 || doc.Graphs[0]["reuse_rate"] != 15.0 ||
				doc.Graphs[0]["oom_per_1000_launches"] != 50.0 || doc.Graphs[0]["pool_trims"] != float64(k) {
				t.Errorf("JSON graphs %v (%v)", doc.Graphs, err)
			}
			var text bytes.Buffer
			s.WriteSummary(&text)
			for _, line := range []string{
				fmt.Sprintf("graphs (%s): %d instantiated (1 failed, ", api, n),
				fmt.Sprintf("%d exec destroyed, %d launches; reuse 15.00 launches per instantiation", n, m),
				fmt.Sprintf("pools (%s): %d allocations, %d out of memory (50.000 per 1000 graph launches), %d trims (keeping %d bytes in all), 1 attribute sets", api, r.PoolAllocs, k, k, k<<20),
			} {
				if !strings.Contains(text.String(), line) {
					t.Errorf("summary lacks %q:\n%s", line, text.String())
				}
			}
			// Out-of-memory returns of the pool are events, with their size.
			if sum.OutOfMemory.Count != k || len(sum.OutOfMemory.Events) != k {
				t.Errorf("out of memory %+v, want %d events", sum.OutOfMemory, k)
			}
			for _, e := range sum.OutOfMemory.Events {
				if e.Call != names[api].alloc || e.Bytes != 1<<20 || e.Code != 2 {
					t.Errorf("out-of-memory event %+v, want %s of 1 MiB", e, names[api].alloc)
				}
			}

			// The daemon's counters, for the same process.
			got := scrape(t, h)
			for name, v := range map[string]float64{
				"bpfbench_cuda_graph_instantiations_total": n, "bpfbench_cuda_graph_exec_destroys_total": n,
				"bpfbench_cuda_graph_launches_total": m, "bpfbench_cuda_pool_alloc_failures_total": k,
				"bpfbench_cuda_pool_trims_total": k, "bpfbench_cuda_pool_attribute_sets_total": 1,
			} {
				if len(got[name]) != 1 || got[name][api] != v {
					t.Errorf("%s = %v, want %v for api %s only", name, got[name], v, api)
				}
			}
			// The documented PromQL ratios, on the scraped values.
			if r := got["bpfbench_cuda_graph_launches_total"][api] / got["bpfbench_cuda_graph_instantiations_total"][api]; r != *g.ReuseRate {
				t.Errorf("reuse from the metrics %v, the session says %v", r, *g.ReuseRate)
			}
			if r := 1000 * got["bpfbench_cuda_pool_alloc_failures_total"][api] / got["bpfbench_cuda_graph_launches_total"][api]; r != *g.OOMPer1000Launches {
				t.Errorf("out of memory per 1000 launches from the metrics %v, the session says %v", r, *g.OOMPer1000Launches)
			}
		})
	}
}

// deref prints the rates by value.
func deref(g GraphSummary) string {
	f := func(p *float64) string {
		if p == nil {
			return "nil"
		}
		return fmt.Sprint(*p)
	}
	r, o := f(g.ReuseRate), f(g.OOMPer1000Launches)
	g.ReuseRate, g.OOMPer1000Launches = nil, nil
	return fmt.Sprintf("%+v reuse=%s oom/1000=%s", g, r, o)
}

// TestPoolFragmentationCounted: with CUDASTUB_POOL_FRAGMENTATION=1 the
// stub's pool refuses two blocks' worth when every other block is free:
// smaller than the free total, yet out of memory. The collector counts
// each such failure (an event of that size), and without the knob the
// same request succeeds and nothing more is counted.
func TestPoolFragmentationCounted(t *testing.T) {
	privtest.Require(t)
	const k = 2
	for _, frag := range []uint64{0, 1} {
		t.Run(fmt.Sprintf("fragmentation=%d", frag), func(t *testing.T) {
			d := startDriverWith(t, []string{fmt.Sprintf("CUDASTUB_POOL_FRAGMENTATION=%d", frag)},
				[]string{"--api", "driver", "--lib", libPath("driver"), "--wait-start", "--graphs", "1", "--launches", "20", "--syncs", "1",
					"--kernel-us", "100", "--exhaust", fmt.Sprint(k), "--fragment", "--pool-bytes", "8388608", "--alloc-bytes", "1048576"})
			s, stop := runSection(t, d.pid(), SectionConfig{})
			d.release(t)
			r := d.graphResult(t)
			stop()
			if r.PoolOOM != k+k*frag || r.PoolOOMFragmented != k*frag {
				t.Fatalf("the driver saw %d out of memory, %d with the free total enough", r.PoolOOM, r.PoolOOMFragmented)
			}
			sum := s.Aggregate()
			g := graphsOf(t, sum, "driver")
			if g.PoolAllocFailures != r.PoolOOM || g.PoolAllocs != r.PoolAllocs {
				t.Errorf("%d of %d pool allocations failed, the driver saw %d of %d", g.PoolAllocFailures, g.PoolAllocs, r.PoolOOM, r.PoolAllocs)
			}
			if c, _ := findCall(sum, "cuMemAllocFromPoolAsync"); c.Errors != r.PoolOOM || c.Count != r.PoolAllocs {
				t.Errorf("cuMemAllocFromPoolAsync %+v", c)
			}
			var fragmented uint64
			for _, e := range sum.OutOfMemory.Events {
				if e.Bytes == 2<<20 {
					fragmented++
				}
			}
			if fragmented != r.PoolOOMFragmented || sum.OutOfMemory.Count != r.PoolOOM {
				t.Errorf("%d failed 2 MiB allocations of %d out of memory, the driver saw %d of %d", fragmented, sum.OutOfMemory.Count, r.PoolOOMFragmented, r.PoolOOM)
			}
			if want := OOMPer1000(r.PoolOOM, 20); *g.OOMPer1000Launches != *want {
				t.Errorf("out of memory per 1000 launches %v, want %v", *g.OOMPer1000Launches, *want)
			}
		})
	}
}
