package metrics

import (
	"math"
	"testing"

	"github.com/bpfbench/bpfbench/loadgen/transport"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9*math.Max(1, math.Abs(b)) }

func TestPercentileLikeNumpy(t *testing.T) {
	xs := []float64{1, 2, 3, 4}
	for _, c := range []struct{ p, want float64 }{{0, 1}, {50, 2.5}, {90, 3.7}, {99, 3.97}, {100, 4}} {
		if got := Percentile(xs, c.p); !near(got, c.want) {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	d := NewDist([]float64{2, 4, 4, 4, 5, 5, 7, 9}, []float64{99})
	if d.Mean != 5 || d.Std != 2 || d.Median != 4.5 {
		t.Errorf("dist %+v", d)
	}
}

func TestComputeVLLMDefinitions(t *testing.T) {
	ms := int64(1e6)
	recs := []transport.Record{
		// TTFT 100 ms, chunks at 100, 120, 150 ms; 3 tokens from usage.
		{Index: 0, Success: true, PromptLen: 10, StartNs: 0, ChunkNs: []int64{100 * ms, 120 * ms, 150 * ms}, LastNs: 150 * ms, OutputTokens: 3},
		// TTFT 50 ms, one chunk carrying 4 tokens (usage): TPOT over 3.
		{Index: 1, Success: true, PromptLen: 20, StartNs: 1000 * ms, ChunkNs: []int64{1050 * ms}, LastNs: 1110 * ms, OutputTokens: 4},
		{Index: 2, Success: false, Failure: transport.FailCut, PromptLen: 30},
	}
	g, err := ParseGoodput("ttft:80,tpot:25")
	if err != nil {
		t.Fatal(err)
	}
	m := Compute(recs, 2.0, Options{Percentiles: []float64{50, 99}, Goodput: g})
	if m.Completed != 2 || m.Failed != 1 || m.TotalInput != 30 || m.TotalOutput != 7 || m.Failures[transport.FailCut] != 1 {
		t.Fatalf("%+v", m)
	}
	if !near(m.RequestThroughput, 1) || !near(m.OutputThroughput, 3.5) || !near(m.TotalTokenThroughput, 18.5) {
		t.Errorf("throughputs %v %v %v", m.RequestThroughput, m.OutputThroughput, m.TotalTokenThroughput)
	}
	if !near(m.TTFT.Mean, 75) || !near(m.E2EL.Mean, 130) {
		t.Errorf("ttft %v e2el %v", m.TTFT.Mean, m.E2EL.Mean)
	}
	// TPOT: (150-100)/2 = 25 and (110-50)/3 = 20.
	if !near(m.TPOT.Mean, 22.5) || m.TPOT.N != 2 {
		t.Errorf("tpot %+v", m.TPOT)
	}
	// ITL pooled over requests: 20 and 30.
	if !near(m.ITL.Mean, 25) || !near(m.ITL.Median, 25) || m.ITL.N != 2 {
		t.Errorf("itl %+v", m.ITL)
	}
	// Goodput: request 1 meets ttft 80 and tpot 25; request 0 misses ttft.
	if !near(m.RequestGoodput, 0.5) {
		t.Errorf("goodput %v", m.RequestGoodput)
	}
	f := m.Fields()
	for _, k := range []string{"completed", "failed", "request_throughput", "output_throughput", "mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms", "p50_itl_ms", "p99_tpot_ms", "p99_e2el_ms", "request_goodput", "max_output_tokens_per_s", "max_concurrent_requests"} {
		if _, ok := f[k]; !ok {
			t.Errorf("field %s missing", k)
		}
	}
	if v, ok := m.Value("p99_itl_ms"); !ok || !near(v, 20+0.99*10) {
		t.Errorf("p99_itl_ms = %v", v)
	}
	if p, name, ok := MetricPercentile("p99.9_ttft_ms"); !ok || p != 99.9 || name != "ttft" {
		t.Errorf("MetricPercentile: %v %v %v", p, name, ok)
	}
	if _, err := ParseGoodput("ttft=3"); err == nil {
		t.Error("bad goodput accepted")
	}
}
