package result

import (
	"math"
	"strings"
	"testing"
)

// The ratio and its bounds from both errors; another prompt mix is not
// compared (and says why); a second comparison starts afresh.
func TestServerCPUCompare(t *testing.T) {
	base := &ServerCPU{Tokens: 100, PromptTokens: 400, MsPerToken: 2, ErrorMs: 0.1}
	s := &ServerCPU{Tokens: 200, PromptTokens: 820, MsPerToken: 3, ErrorMs: 0.05}
	s.Compare(base)
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if !near(s.Ratio, 1.5) || !near(s.RatioLow, 2.95/2.1) || !near(s.RatioHigh, 3.05/1.9) || s.BaselineMsPerToken != 2 || s.NotCompared != "" {
		t.Fatalf("compared: %+v", s)
	}
	other := &ServerCPU{Tokens: 100, PromptTokens: 800, MsPerToken: 2, ErrorMs: 0.1}
	s.Compare(other)
	if s.Ratio != 0 || s.BaselineMsPerToken != 0 || !strings.Contains(s.NotCompared, "prompt tokens per generated token 4.1 here, 8 in the baseline") {
		t.Fatalf("another mix: %+v", s)
	}
	s.Compare(nil)
	if s.NotCompared != "" || s.Ratio != 0 {
		t.Fatalf("no baseline: %+v", s)
	}
	var none *ServerCPU
	none.Compare(base) // a run that measured none
}
