package job

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
