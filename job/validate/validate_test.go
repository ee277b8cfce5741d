package validate

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/host"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/result"
)

// Stronger is the same injection twice as strong: the kernel time and the
// step work written to their control files doubled, the reader's pause
// doubled; the name and the cause stay.
func TestStrongerInjections(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		inj  func(file string) Injection
		want string
	}{
		{func(f string) Injection { return GPUInjection(f, 20000) }, "80000"},
		{func(f string) Injection { return ComputeInjection(f, 15000) }, "60000"},
	} {
		f := filepath.Join(dir, "control")
		if err := os.WriteFile(f, []byte("2000\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		inj := c.inj(f)
		s := inj.Stronger().Stronger()
		if s.Name != inj.Name || s.Cause != inj.Cause {
			t.Errorf("%s stronger is %s/%s", inj.Name, s.Name, s.Cause)
		}
		stop, err := s.Start(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(f)
		if got := strings.TrimSpace(string(b)); got != c.want {
			t.Errorf("%s twice stronger wrote %s, want %s", inj.Name, got, c.want)
		}
		if said := stop(); !strings.Contains(said, "to "+c.want+" µs") {
			t.Errorf("%s: %q", inj.Name, said)
		}
		if b, _ := os.ReadFile(f); strings.TrimSpace(string(b)) != "2000" {
			t.Errorf("%s: the control file holds %q after the phase, want 2000 back", inj.Name, b)
		}
	}
	if s := ClientInjection(2 * time.Second).Stronger(); s.SlowRead != 4*time.Second || s.Name != "client" {
		t.Errorf("client stronger: %+v", s)
	}
	for _, inj := range []Injection{CPUInjection([]int{0}), IOInjection("/nonexistent"), ClientCPUInjection([]int{0}, -10)} {
		if s := inj.Stronger(); s.Name != inj.Name || s.Cause != inj.Cause || s.Start == nil || s.Stronger == nil {
			t.Errorf("%s stronger: %+v", inj.Name, s)
		}
	}
}

// validate's rows: --skip and --with read as lists of known rows, the
// rows that cannot run as asked are configuration errors, and a
// client-cpu row that would share the server's CPUs is left out with a
// note.
func TestValidateRows(t *testing.T) {
	var ce *loadgen.ConfigError
	if _, err := ParseRowList("skip", "gpu, io,", ValidateRows...); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseRowList("skip", "disk", ValidateRows...); !errors.As(err, &ce) || err.Error() != `--skip "disk": use cpu, io, gpu, compute, client, net or client-cpu` {
		t.Errorf("--skip disk: %v", err)
	}
	self, err := host.AffinityOf(0)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := ParseRowList("skip", strings.Join(ValidateRows, ","), ValidateRows...)
	only := func(keep string) map[string]bool {
		m := map[string]bool{}
		for k := range all {
			m[k] = k != keep
		}
		return m
	}
	pid := os.Getpid()
	if _, _, err := (ValidateRowsConfig{Skip: all}).Injections(pid); !errors.As(err, &ce) {
		t.Errorf("every row skipped: %v", err)
	}
	// client and client-cpu, the busy CPUs bpfbench's own.
	two := only("client")
	two["client-cpu"] = false
	shared := ValidateRowsConfig{Skip: two, BusyCPUs: self, SlowRead: time.Second}
	injs, note, err := shared.Injections(pid)
	if err != nil || len(injs) != 1 || injs[0].Name != "client" || !strings.HasPrefix(note, "no client-cpu row: bpfbench shares CPUs") {
		t.Errorf("client-cpu on the server's CPUs: %v %q %v", injs, note, err)
	}
	shared.With = map[string]bool{"client-cpu": true}
	if _, _, err := shared.Injections(pid); !errors.As(err, &ce) {
		t.Errorf("--with client-cpu on the server's CPUs: %v", err)
	}
	injs, note, err = (ValidateRowsConfig{Skip: only("client"), SlowRead: time.Second}).Injections(pid)
	if err != nil || len(injs) != 1 || injs[0].Name != "client" || note != "" {
		t.Errorf("client only: %v %q %v", injs, note, err)
	}
	with := map[string]bool{"compute": true}
	if _, _, err := (ValidateRowsConfig{Skip: only("client"), With: with}).Injections(pid); !errors.As(err, &ce) {
		t.Errorf("--with compute without a step control file: %v", err)
	}
}

// Validation's verdict: a weak row fails as too weak, a wrong or small
// share as not validated, too much unexplained time as such.
func TestValidationVerdict(t *testing.T) {
	ok := ValidationRow{Injection: "cpu", Correct: true, Share: 0.9}
	for _, c := range []struct {
		v    Validation
		want string
	}{
		{Validation{Rows: []ValidationRow{ok}}, ""},
		{Validation{Rows: []ValidationRow{ok, {Injection: "io", Attributed: "cpu_runqueue", Share: 0.2}}}, "attribution not validated for io (top cpu_runqueue, 20%)"},
		{Validation{Rows: []ValidationRow{{Injection: "gpu", Weak: true, AddedMs: 0.5}}, MinAddedMs: 1}, "injection too weak for gpu (added 0.5 ms per tail gap) (under 1.0 ms"},
		{Validation{Rows: []ValidationRow{ok}, Unexplained: 0.1}, "left 10.0% of the run's gap time unexplained, more than 5%"},
	} {
		err := c.v.Verdict(0.8, 0.05)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v: %v, want %q", c.v.Rows, err, c.want)
		}
	}
}

// The client row's slow reader is a longer request than the others; the
// baseline phase has one as long at the same place in the phase, read at
// once, so that the row's phase differs from the baseline by the stalled
// reads alone.
func TestPlanMatchesTheSlowReadersLength(t *testing.T) {
	cfg := ValidateConfig{Phase: 10 * time.Second, Rate: 4, OutputLen: 32, Injections: []Injection{CPUInjection([]int{0}), ClientInjection(2 * time.Second)}}
	sc, load, err := cfg.plan()
	if err != nil {
		t.Fatal(err)
	}
	reqs := load.Scenario.Requests
	slow := sc.slow[1]
	at := slowOffset(40, 4, cfg.Phase, 2*time.Second)
	if reqs[slow].SlowRead != 2*time.Second || reqs[slow].OutputLen != 200 {
		t.Fatalf("the slow reader (request %d): %+v", slow, reqs[slow])
	}
	if reqs[at].OutputLen != 200 || reqs[at].SlowRead != 0 || at >= 40 {
		t.Errorf("the baseline's request %d: %+v, want one of 200 tokens read at once", at, reqs[at])
	}
	long := 0
	for _, r := range reqs {
		if r.OutputLen != 32 {
			long++
		}
	}
	if long != 2 {
		t.Errorf("%d requests of other than 32 tokens, want 2 (the slow reader and its baseline twin)", long)
	}
}

// A slow reader whose stall ended after its phase (its first token waited
// in the server's queue) missed the phase: the row is not judged, and is
// run once more as it was.
func TestSlowReaderMissedItsPhase(t *testing.T) {
	client := ClientInjection(3 * time.Second)
	sc := &Scenario{injections: []Injection{CPUInjection([]int{0}), client}, slow: []int{0, 62}}
	const s = int64(time.Second)
	doc := &result.Document{Loadgen: result.Loadgen{BPFBench: &result.LoadDetail{StartNs: 100 * s}}}
	phase := result.Phase{Name: "client", StartS: 14, EndS: 20}
	rec := result.Request{Index: 62, Success: true, StartNs: 115 * s, ChunkNs: []int64{121 * s}, PausedNs: &[2]int64{121 * s, 124 * s}}
	doc.BPFBench.Records = []result.Request{rec}
	why := sc.missed(client, phase, doc, 4)
	if !strings.Contains(why, "request 62's stall ended 4.0 s after the phase, its first token 6.0 s after it was sent") {
		t.Errorf("missed: %q", why)
	}
	// Its first token at once: the stall inside the phase.
	doc.BPFBench.Records[0].ChunkNs[0], doc.BPFBench.Records[0].PausedNs = 115*s+s/10, &[2]int64{115*s + s/10, 118*s + s/10}
	if why := sc.missed(client, phase, doc, 4); why != "" {
		t.Errorf("a stall inside its phase missed: %q", why)
	}
	if why := sc.missed(sc.injections[0], phase, doc, 4); why != "" {
		t.Errorf("the cpu injection missed: %q", why)
	}
}
