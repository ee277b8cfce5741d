package job

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDemoSettings(t *testing.T) {
	if got := DemoSlowReaders(20); !slices.Equal(got, []int{85, 90}) {
		t.Errorf("slow readers of 20-request phases: %v", got)
	}
	for _, tc := range []struct{ in, want float64 }{{math.Inf(1), DefaultPhaseRate}, {0, DefaultPhaseRate}, {2.5, 2.5}} {
		if got := PhaseRate(tc.in); got != tc.want {
			t.Errorf("PhaseRate(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
	if err := CheckDemo(4, 10*time.Second); err != nil {
		t.Errorf("the default demo: %v", err)
	}
	if err := CheckDemo(4, time.Second); err == nil || !strings.Contains(err.Error(), "at least 2s") {
		t.Errorf("a 1 s phase: %v", err)
	}
	if err := CheckDemo(1, 3*time.Second); err == nil || !strings.Contains(err.Error(), "give at least 4") {
		t.Errorf("3 requests a phase: %v", err)
	}
}
