// Package testutil holds the helpers the tests share: readiness waits with
// a deadline that replace sleeps used as synchronisation (Eventually, a
// line on a reader, a listening port, a file, a series on /metrics, a
// process blocked in the kernel, a process's BPF links), a free port, the
// median, a Prometheus scrape, and cgroup v2 directories for a test.
// simtest, below it, starts the simulated server.
//
// Only tests import it (internal/layout checks that no other package does).
// It imports nothing of bpfbench, so that every package's tests, llmsim's
// own included, can use it.
package testutil

import (
	"fmt"
	"net"
	"slices"
	"testing"
	"time"
)

// Poll intervals: the first check is immediate, the next after minPoll,
// then twice the previous wait up to maxPoll.
const (
	minPoll = 5 * time.Millisecond
	maxPoll = 200 * time.Millisecond
)

// Until checks cond until it holds or timeout passes, and says whether it
// held. The last check is made at or after the deadline, so a condition
// that holds by then is seen.
func Until(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	wait := minPoll
	for {
		if cond() {
			return true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		time.Sleep(min(wait, left))
		wait = min(2*wait, maxPoll)
	}
}

// Poll checks cond every period (the first at once) until it holds or
// timeout passes, and says whether it held: for a check that costs, such
// as a round of queries against a server.
func Poll(timeout, period time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		time.Sleep(min(period, left))
	}
}

// Succeeds fails t unless f returns nil within timeout, with f's last
// error. msg is as Eventually's.
func Succeeds(t testing.TB, timeout time.Duration, f func() error, msg ...any) {
	t.Helper()
	var err error
	if !Until(timeout, func() bool { err = f(); return err == nil }) {
		t.Fatalf("%s: not within %v: %v", describe(msg, "the condition"), timeout, err)
	}
}

// Eventually fails t unless cond holds within timeout. msg, when given, is
// a format and its arguments saying what was awaited.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msg ...any) {
	t.Helper()
	if !Until(timeout, cond) {
		t.Fatalf("%s: not within %v", describe(msg, "the condition"), timeout)
	}
}

// describe formats msg (a format and its arguments), or returns def.
func describe(msg []any, def string) string {
	if len(msg) == 0 {
		return def
	}
	if f, ok := msg[0].(string); ok {
		return fmt.Sprintf(f, msg[1:]...)
	}
	return fmt.Sprint(msg...)
}

// FreePort is a local TCP port nobody listens on (now: another may take it
// before the test does).
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// FreeAddr is 127.0.0.1:FreePort, none of avoid (ports handed out
// already and perhaps not taken yet).
func FreeAddr(t testing.TB, avoid ...string) string {
	t.Helper()
	for {
		addr := fmt.Sprintf("127.0.0.1:%d", FreePort(t))
		if !slices.Contains(avoid, addr) {
			return addr
		}
	}
}

// Median of xs (0 for none); xs is not reordered.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
