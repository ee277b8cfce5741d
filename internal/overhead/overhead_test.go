package overhead

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestSwitchesSince(t *testing.T) {
	then := Switches{1: 10, 2: 5, 3: 7}
	now := Switches{1: 15, 2: 5, 4: 3} // 3 exited, 4 was born
	if got := now.Since(then); got != 5+0+3 {
		t.Errorf("Since = %d, want 8", got)
	}
	merged := Switches{}
	merged.merge(then)
	merged.merge(now)
	if got := merged.Since(then); got != 8 {
		t.Errorf("merged Since = %d, want 8 (an exited thread keeps its count)", got)
	}
}

func TestInvoluntarySwitchesOfThisProcess(t *testing.T) {
	s := InvoluntarySwitches(os.Getpid())
	if len(s) == 0 {
		t.Fatal("no thread of this process found")
	}
	if len(InvoluntarySwitches(0)) != 0 {
		t.Error("pid 0 has threads")
	}
}

func TestWarnings(t *testing.T) {
	before := 100.0
	r := Report{Seconds: 10, CollectorCPU: 0.05, Lost: 3, SelfPreemptions: 1000, TargetSwitchesBefore: &before, TargetSwitchesDuring: 900}
	w := strings.Join(warnings(r), "\n")
	for _, want := range []string{"5.0% of a CPU", "3 events lost", "100 times a second", "from 100/s to 900/s"} {
		if !strings.Contains(w, want) {
			t.Errorf("warnings lack %q:\n%s", want, w)
		}
	}
	quiet := Report{Seconds: 10, CollectorCPU: 0.001, TargetSwitchesBefore: &before, TargetSwitchesDuring: 120}
	if w := warnings(quiet); len(w) != 0 {
		t.Errorf("a cheap session warns: %v", w)
	}
	idle := 0.0
	if w := warnings(Report{Seconds: 10, TargetSwitchesBefore: &idle, TargetSwitchesDuring: 900}); len(w) != 0 {
		t.Errorf("a target idle before bpfbench attached warns: %v", w)
	}
	if !strings.Contains(r.Line(), "100/s before, 900/s during") {
		t.Errorf("line: %s", r.Line())
	}
}

// The scan reads each thread's count as the status file states it: a
// long file (grown past the buffer), the count on its last lines, and the
// process's own threads against a plain reading of their files.
func TestInvoluntarySwitchesReadsStatus(t *testing.T) {
	dir := t.TempDir()
	long := filepath.Join(dir, "status")
	body := strings.Repeat("Padding:\tx\n", 1000) + "voluntary_ctxt_switches:\t7\nnonvoluntary_ctxt_switches:\t42\n"
	if err := os.WriteFile(long, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if x, ok := nonvoluntary(long, &buf); !ok || x != 42 {
		t.Errorf("a %d-byte status file: %d %v, want 42", len(body), x, ok)
	}
	if _, ok := nonvoluntary(filepath.Join(dir, "gone"), &buf); ok {
		t.Error("a missing file read as a count")
	}
	got := InvoluntarySwitches(os.Getpid())
	if len(got) == 0 {
		t.Fatal("no thread of this process read")
	}
	for tid, x := range got {
		b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/status", tid))
		if err != nil {
			continue // exited since
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "nonvoluntary_ctxt_switches:"); ok {
				if y, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64); y < x {
					t.Errorf("thread %d: %d read, %d in its file afterwards", tid, x, y)
				}
			}
		}
	}
}

// BenchmarkInvoluntarySwitches is one scan of this process's threads
// (ns/thread: what a target of N threads costs N times a scan).
func BenchmarkInvoluntarySwitches(b *testing.B) {
	threads := 0
	for b.Loop() {
		threads += len(InvoluntarySwitches(os.Getpid()))
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(max(threads, 1)), "ns/thread")
}
