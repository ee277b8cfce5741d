package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/bpfbench/bpfbench/internal/hist"
	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testutil"
)

// seriesBudget is the most series a node's /metrics may hold in the
// classic (text) exposition with budgetTargets pid targets and the host
// (docs/daemon.md, "Series budget").
const (
	seriesBudget  = 1500
	budgetTargets = 8
)

const protoAccept = "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"

// The daemon on the real collectors, following 8 processes and the
// host: its text exposition stays within the series budget and passes
// promtool; a protobuf scrape gets native histograms with their classic
// buckets beside them; OpenMetrics is negotiated.
func TestDaemonSeriesBudget(t *testing.T) {
	privtest.Require(t)
	promtool := privtest.RequireTool(t, "promtool", "apt-get install prometheus")
	d := startBudgetDaemon(t)
	scrape := func(accept string) (string, []byte) { t.Helper(); return scrapeAs(t, d, accept) }
	// Every target has its process (a refresh assigned the slots) and its
	// live view (a session started on it: live.enabled is the default).
	if !testutil.Until(30*time.Second, func() bool { _, text := scrape(""); return allTargetsLive(text) }) {
		t.Fatalf("the %d targets have no process or no live view in /metrics after 30 s\n%s", budgetTargets, d.logs)
	}
	// Some scheduling on the host: the histograms have observations.
	testutil.Until(10*time.Second, func() bool {
		_, text := scrape("")
		v, _ := testutil.Sum(string(text), "bpfbench_sched_runqueue_latency_seconds_count", `target="host"`)
		return v > 0
	})
	ctype, text := scrape("")
	if !strings.HasPrefix(ctype, "text/plain") {
		t.Errorf("a scrape without Accept got %q, want text", ctype)
	}
	checkTextBudget(t, text, promtool)

	ctype, om := scrape("application/openmetrics-text; version=1.0.0")
	if !strings.HasPrefix(ctype, "application/openmetrics-text") || !bytes.HasSuffix(om, []byte("# EOF\n")) {
		t.Errorf("an OpenMetrics scrape got %q (ending %q), want OpenMetrics", ctype, om[max(len(om)-20, 0):])
	}

	ctype, pb := scrape(protoAccept)
	if !strings.HasPrefix(ctype, "application/vnd.google.protobuf") {
		t.Fatalf("a protobuf scrape got %q", ctype)
	}
	checkNativeHistograms(t, pb)
	d.stop(t)
}

// startBudgetDaemon runs the daemon following budgetTargets sleeping
// processes (refreshed every 200 ms).
func startBudgetDaemon(t *testing.T) *daemonProc {
	t.Helper()
	var body strings.Builder
	body.WriteString("refresh_interval: 200ms\ntargets:\n")
	for i := range budgetTargets {
		cmd := exec.Command("sleep", "300")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		fmt.Fprintf(&body, "  - {name: t%d, pid: %d}\n", i+1, cmd.Process.Pid)
	}
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(body.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return startDaemon(t, "--config", cfg)
}

// scrapeAs scrapes the daemon's /metrics asking for accept ("" for the
// default) and returns the content type and the body.
func scrapeAs(t *testing.T, d *daemonProc, accept string) (string, []byte) {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+d.addr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("/metrics: %v\n%s", err, d.logs)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s %v", resp.Status, err)
	}
	return resp.Header.Get("Content-Type"), b
}

// allTargetsLive says whether every budget target has its process and its
// live view in the text exposition.
func allTargetsLive(text []byte) bool {
	for i := range budgetTargets {
		if !bytes.Contains(text, fmt.Appendf(nil, "bpfbench_target_processes{target=\"t%d\"} 1\n", i+1)) {
			return false
		}
		if !bytes.Contains(text, fmt.Appendf(nil, "bpfbench_streams_active{target=\"t%d\"}", i+1)) {
			return false
		}
	}
	return true
}

// checkTextBudget holds the text exposition to the series budget, the
// classic run-queue buckets and promtool's check.
func checkTextBudget(t *testing.T, text []byte, promtool string) {
	t.Helper()
	series := 0
	perFamily := map[string]int{}
	for line := range strings.SplitSeq(string(text), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		series++
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			name = strings.TrimSuffix(name, s)
		}
		perFamily[name]++
	}
	t.Logf("text exposition: %d series with %d pid targets and the host (budget %d)", series, budgetTargets, seriesBudget)
	if series > seriesBudget {
		t.Errorf("%d series, over the budget of %d; per family: %v", series, seriesBudget, perFamily)
	}
	// Classic buckets only in text: the run-queue histogram has its
	// RunqueueBuckets (11 bounds and +Inf), not 40.
	if n := strings.Count(string(text), "bpfbench_sched_runqueue_latency_seconds_bucket{"); n != 12*(budgetTargets+1) {
		t.Errorf("%d run-queue bucket series, want %d (12 per label set)", n, 12*(budgetTargets+1))
	}

	check := exec.Command(promtool, "check", "metrics")
	check.Stdin = bytes.NewReader(text)
	if out, err := check.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// checkNativeHistograms decodes a protobuf exposition: every bpfbench
// histogram is native with its classic buckets beside it, and some have
// observations.
func checkNativeHistograms(t *testing.T, pb []byte) {
	t.Helper()
	dec := expfmt.NewDecoder(bytes.NewReader(pb), expfmt.NewFormat(expfmt.TypeProtoDelim))
	native, withData := 0, 0
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if mf.GetType() != dto.MetricType_HISTOGRAM || !strings.HasPrefix(mf.GetName(), "bpfbench_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			if h.Schema == nil || h.GetSchema() != hist.NativeSchema || len(h.GetPositiveSpan()) == 0 {
				t.Errorf("%s %v: no native histogram (schema %v, %d spans)", mf.GetName(), m.GetLabel(), h.Schema, len(h.GetPositiveSpan()))
				continue
			}
			if len(h.GetBucket()) == 0 {
				t.Errorf("%s %v: no classic buckets beside the native ones", mf.GetName(), m.GetLabel())
			}
			native++
			var n uint64
			for _, c := range hist.DecodeNative(h.GetPositiveSpan(), h.GetPositiveDelta()) {
				n += c
			}
			if n+h.GetZeroCount() != h.GetSampleCount() {
				t.Errorf("%s %v: native buckets hold %d, count %d", mf.GetName(), m.GetLabel(), n+h.GetZeroCount(), h.GetSampleCount())
			}
			if n > 0 {
				withData++
			}
		}
	}
	t.Logf("protobuf exposition: %d native histograms (%d with observations)", native, withData)
	if native == 0 || withData == 0 {
		t.Errorf("%d native histograms, %d with observations: want some of each", native, withData)
	}
}
