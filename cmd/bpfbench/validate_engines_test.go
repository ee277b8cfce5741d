package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/internal/engine"
	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/result"
)

// `bpfbench validate --target URL --pid PID` on the real engines, each in a
// network namespace of its own behind a veth pair (so that the net row
// shapes the engine's egress towards the client, --net-iface and
// --net-netns), pinned to CPU 0, bpfbench on CPU 1: the rows that apply
// to a CPU engine, cpu, client, net and client-cpu, each named on top,
// with at least 80% of the excess it added. No io row: neither engine reads a file while it serves
// (llama-server maps its model; the PyTorch engine's weights are in
// memory). A validation that misses runs once more (a shared host's steal
// can spoil a phase); the confusion matrix is logged.
func TestValidateRealEngines(t *testing.T) {
	privtest.Require(t)
	if runtime.NumCPU() < 2 {
		privtest.SkipOptional(t, "needs 2 CPUs (the server's and bpfbench's), have %d", runtime.NumCPU())
	}
	taskset := privtest.RequireTool(t, "taskset", "apt-get install util-linux")
	privtest.RequireTool(t, "ip", "apt-get install iproute2")
	privtest.RequireTool(t, "tc", "apt-get install iproute2")
	t.Run("pytorch", func(t *testing.T) {
		paths, err := engine.FindTorch()
		if err != nil {
			privtest.SkipOptional(t, "%v", err)
		}
		ns, peer, host := engineNetns(t, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		srv, err := engine.StartTorch(ctx, engine.TorchOptions{Paths: paths, Threads: 2, Slots: 4, CPUs: "0", Netns: ns, Host: host, Port: 8000})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Stop)
		validateEngine(t, taskset, srv, "torch-tiny", ns, peer)
	})
	t.Run("llama-server", func(t *testing.T) {
		paths, err := engine.Find()
		if err != nil {
			privtest.SkipOptional(t, "%v", err)
		}
		ns, peer, host := engineNetns(t, 2)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		srv, err := engine.Start(ctx, engine.Options{Paths: paths, Threads: 1, Slots: 4, CtxSize: 4096, CPUs: "0", Netns: ns, Host: host, Port: 8000})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Stop)
		validateEngine(t, taskset, srv, "tiny-llama", ns, peer)
	})
}

// engineNetns makes a network namespace joined to the host by a veth pair
// (10.79.X.1 on the host, 10.79.X.2 in the namespace, X from n on, see
// newHostVeth) and returns its name, its side of the pair and its address.
func engineNetns(t *testing.T, n int) (ns, peer, addr string) {
	t.Helper()
	v := newHostVeth(t, "bbv", 79, n)
	return v.Netns, v.Peer, v.Addr
}

// validateEngine runs validate on srv (cpu, client, net, client-cpu) and
// fails t unless every row names its injected cause on top with at least
// 80% of the excess it added, once more after a miss.
func validateEngine(t *testing.T, taskset string, srv *engine.Server, model, ns, peer string) {
	var problems []string
	for attempt := 1; attempt <= 2; attempt++ {
		dir := filepath.Join(t.TempDir(), "validate")
		cmd := exec.Command(taskset, "--cpu-list", "1", os.Args[0], "validate", "--target", srv.URL, "--pid", strconv.Itoa(srv.Pid),
			"--model", model, "--skip", "gpu,io,compute", "--net-iface", peer, "--net-netns", ns, "--min-share", "0", "--no-progress", "--out", dir)
		cmd.Env = append(os.Environ(), envCLI+"=1")
		out, err := cmd.CombinedOutput()
		rows := validationRows(t, dir)
		var shares []string
		for _, r := range rows {
			shares = append(shares, r.Injection+": "+matrixShares(r.Shares))
		}
		t.Logf("attempt %d: %v\n%s\ntail shares: %s; %s", attempt, err, validationMatrix(string(out)), strings.Join(shares, "; "), batchElasticityOf(dir))
		problems = nil
		if err != nil {
			problems = append(problems, fmt.Sprintf("validate: %v\n%s", err, out))
		}
		for _, want := range []string{"cpu", "client", "net", "client-cpu"} {
			r, ok := rows[want]
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("no %s row in the validation", want))
			case r.Top != r.Injected:
				problems = append(problems, fmt.Sprintf("%s row: top %s, want %s", want, r.Top, r.Injected))
			case r.Share < 0.8:
				problems = append(problems, fmt.Sprintf("%s row: %s %.2f of the tail's added excess, want at least 0.80", want, r.Top, r.Share))
			}
		}
		if len(problems) == 0 {
			return
		}
		t.Logf("attempt %d missed: %s", attempt, strings.Join(problems, "; "))
	}
	t.Error(strings.Join(problems, "\n"))
}

// validationMatrix is the confusion matrix validate printed (from its
// heading to the line after the table).
func validationMatrix(out string) string {
	i := strings.Index(out, "Confusion matrix")
	if i < 0 {
		return out
	}
	out = out[i:]
	if j := strings.Index(out, "\n\n"); j > 0 {
		out = out[:j]
	}
	return out
}

// validationRow is one row of DIR/validation.json.
type validationRow struct {
	Injection string             `json:"injection"`
	Injected  string             `json:"injected_cause"`
	Top       string             `json:"attributed_top_cause"`
	Share     float64            `json:"injected_share_of_tail_excess"`
	Shares    map[string]float64 `json:"tail_added_shares"`
}

// validationRows reads DIR/validation.json's rows by injection.
// batchElasticityOf says how the run in dir measured its decode steps'
// growth with the batch (result.json's critical_path.stats), for the log.
func batchElasticityOf(dir string) string {
	doc, err := result.Load(filepath.Join(dir, "result.json"))
	if err != nil || doc.CriticalPath == nil || doc.CriticalPath.Stats.BatchElasticity == nil {
		return "no batch elasticity"
	}
	st := doc.CriticalPath.Stats
	return fmt.Sprintf("batch elasticity %.2f (measured %v, normal in flight %.1f, %.0f ms moved)", *st.BatchElasticity, st.BatchElasticityMeasured, st.NormalInFlight, st.BatchMovedMs)
}

func validationRows(t *testing.T, dir string) map[string]validationRow {
	out := map[string]validationRow{}
	b, err := os.ReadFile(filepath.Join(dir, "validation.json"))
	if err != nil {
		t.Logf("no validation.json: %v", err)
		return out
	}
	var v struct {
		Rows []validationRow `json:"rows"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("validation.json: %v", err)
	}
	for _, r := range v.Rows {
		out[r.Injection] = r
	}
	return out
}
