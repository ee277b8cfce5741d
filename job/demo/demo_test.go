package demo

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDemoSettings(t *testing.T) {
	// 4 req/s, 5 s phases: 1.67 s of settling after three of them, the
	// last phase from 25 s on.
	if got := DemoSlowReaders(4, 5*time.Second); !slices.Equal(got, []int{105, 110}) {
		t.Errorf("slow readers of 5 s phases at 4 req/s: %v", got)
	}
	if got := DemoRequests(4, 5*time.Second); got != 120 {
		t.Errorf("requests of 5 s phases at 4 req/s: %d, want 120", got)
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
