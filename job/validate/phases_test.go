package validate

import (
	"math"
	"testing"
	"time"
)

// TestPhaseSettings: the disk injection's depth from the calibration, and
// the rate of a phased job (demo, validate).
func TestPhaseSettings(t *testing.T) {
	if got := ioDepth(11 * time.Millisecond); got != ioMinDepth {
		t.Errorf("a disk at 11 ms a read: depth %d", got)
	}
	if got := ioDepth(2 * time.Millisecond); got != 40 {
		t.Errorf("a disk at 2 ms a read: depth %d, want 40", got)
	}
	if got := ioDepth(100 * time.Microsecond); got != ioMaxDepth {
		t.Errorf("a disk at 0.1 ms a read: depth %d", got)
	}
	for _, tc := range []struct{ in, want float64 }{{math.Inf(1), DefaultPhaseRate}, {0, DefaultPhaseRate}, {2.5, 2.5}} {
		if got := PhaseRate(tc.in); got != tc.want {
			t.Errorf("PhaseRate(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
