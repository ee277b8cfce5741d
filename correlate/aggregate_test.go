package correlate

import "testing"

// Top names the largest share whichever model's causes the breakdown
// holds: the critical path's server_compute and client too.
func TestTopAnyModel(t *testing.T) {
	for _, c := range []struct {
		b    Breakdown
		want string
	}{
		{Breakdown{"cpu_runqueue": 0.03, "server_compute": 0.84, "client": 0.11, "unexplained": 0.02}, "server_compute"},
		{Breakdown{"cpu_runqueue": 0.4, "io_block": 0.1, "unexplained": 0.5}, "unexplained"},
		{Breakdown{"client": 0.5, "net_backpressure": 0.5}, "client"},
		{Breakdown{}, "unexplained"},
	} {
		if got := Top(c.b); got != c.want {
			t.Errorf("Top(%v) = %s, want %s", c.b, got, c.want)
		}
	}
}
