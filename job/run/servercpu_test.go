package run

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/bpfbench/bpfbench/loadgen"
)

// The CPU between the two readings over every record's tokens (the
// warm-up's too), with four ticks of error for each process read; none
// without a reading or a token.
func TestServerCPUResult(t *testing.T) {
	proc := t.TempDir()
	const pid = 1 << 30 // no such process here: its tree is itself
	stat := func(utime, stime int) {
		d := filepath.Join(proc, "1073741824")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		line := "1073741824 (engine) S 1 1 1 0 -1 0 0 0 0 0 " + itoa(utime) + " " + itoa(stime) + " 0 0 20 0 4 0 1 0 0\n"
		if err := os.WriteFile(filepath.Join(d, "stat"), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := &serverCPU{proc: proc, pid: pid}
	if s.result(&loadgen.Result{}) != nil {
		t.Fatal("a result before any reading")
	}
	stat(100, 20)
	s.start()
	stat(150, 30) // 60 ticks: 600 ms
	s.end()
	res := &loadgen.Result{
		Records: []loadgen.Record{{OutputTokens: 100, PromptLen: 10}, {OutputTokens: 50, PromptLen: 10}},
		Warmup:  []loadgen.Record{{OutputTokens: 50, PromptLen: 5}},
	}
	c := s.result(res)
	if c == nil || c.Tokens != 200 || c.PromptTokens != 25 || c.Processes != 1 || c.Seconds != 0.6 || c.MsPerToken != 3 || c.ErrorMs != 0.2 {
		t.Fatalf("result: %+v; want 200 tokens, 25 prompt tokens, 1 process, 0.6 s, 3 ms a token ±0.2", c)
	}
	if s.result(&loadgen.Result{}) != nil {
		t.Fatal("a result of no token")
	}
	var none *serverCPU
	none.start()
	none.end()
	if none.result(res) != nil || newServerCPU(0, nil).result(res) != nil {
		t.Fatal("a result without a server here")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
