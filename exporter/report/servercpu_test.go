package report

import (
	"strings"
	"testing"

	"github.com/bpfbench/bpfbench/result"
)

// The line states the figure and its bound, the ratio with its bounds,
// and says server_compute is the same tokens costing more CPU only where
// the ratio's lower bound is over 1.1 and server_compute holds a tenth of
// the p99 band's excess.
func TestServerCPULine(t *testing.T) {
	c := &result.ServerCPU{Tokens: 256, Processes: 2, MsPerToken: 2.8, ErrorMs: 0.3, BaselineMsPerToken: 2.1, Ratio: 1.333, RatioLow: 1.2, RatioHigh: 1.5}
	band := func(share float64) *result.CriticalBand {
		return &result.CriticalBand{ExcessMs: 100, ExcessShares: map[string]float64{"server_compute": share}}
	}
	const says = "the same tokens costing more CPU"
	l := ServerCPULine(c, band(0.3))
	for _, want := range []string{"2.80 ms (±0.30 ms", "its 2 processes", "256 tokens", "1.33x the baseline's 2.10 ms (1.20-1.50x)", "server_compute (30% of its excess) is " + says} {
		if !strings.Contains(l, want) {
			t.Errorf("line lacks %q:\n%s", want, l)
		}
	}
	if l := ServerCPULine(c, band(0.05)); strings.Contains(l, says) {
		t.Errorf("server_compute 5%% of the excess, yet: %s", l)
	}
	low := *c
	low.RatioLow = 1.05
	if l := ServerCPULine(&low, band(0.3)); strings.Contains(l, says) {
		t.Errorf("ratio's lower bound 1.05, yet: %s", l)
	}
	if l := ServerCPULine(&result.ServerCPU{Tokens: 5, Processes: 1, MsPerToken: 1, NotCompared: "prompt tokens per generated token 4 here, 8 in the baseline"}, nil); !strings.Contains(l, "not compared with the baseline's: prompt tokens") {
		t.Errorf("not compared: %s", l)
	}
}
