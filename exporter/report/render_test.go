package report

import (
	"bytes"
	"encoding/json"
	"math"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/result"
)

var chartIDs = []string{"chart-ttft", "chart-itl", "chart-attribution", "chart-timeline"}

// missingSections is a run whose kernel side was partly unavailable: no
// cuda, gpu or tcp section, a section of a newer bpfbench (unknown shape), and collection that stopped early with losses.
func missingSections() *result.Document {
	d := fullDocument()
	d.Collectors.CUDA, d.Collectors.GPU, d.Collectors.TCP = nil, nil, nil
	d.Collectors.Other = map[string]json.RawMessage{"future": raw(map[string]any{"widgets": 3, "nested": map[string]any{"deep": map[string]any{"x_seconds": 0.5}}, "list": []any{1, "two", nil}})}
	d.Collection.Unavailable = map[string]string{"cuda": "no libcudart.so in the target's maps", "gpu": "NVML not found"}
	d.Collection.StoppedReason = "target pid 4242 exited 31.5 s into the run"
	d.Collection.StoppedOffsetS = 31.5
	d.Collection.LostEvents = 1234
	d.Collection.SpansDropped = 50
	d.Attribution.ITL = map[string]correlate.Breakdown{"all": d.Attribution.ITL["all"]}
	d.Attribution.ITLBands = nil
	d.Timeline = nil
	d.Phases = nil
	d.Diagnosis = nil
	return d
}

// nanDocument carries NaN and infinities everywhere a float can be.
func nanDocument() *result.Document {
	d := fullDocument()
	nan, inf := math.NaN(), math.Inf(1)
	d.Attribution.BaselineITLMs = nan
	d.Attribution.TTFT = correlate.Breakdown{"cpu_runqueue": nan, "io_block": inf, "unexplained": 0.5}
	d.Attribution.ITL["p99"] = correlate.Breakdown{"cpu_runqueue": nan}
	b := d.Attribution.ITLBands["p99"]
	b.FromMs, b.ExcessMs = inf, nan
	d.Attribution.ITLBands["p99"] = b
	d.Attribution.Requests[0].TotalExcessMs = nan
	d.Attribution.Requests[1].ITLShares = correlate.Breakdown{"gpu_sync": inf}
	d.Timeline[3].T = nan
	d.Timeline[4].P99ITLMs = inf
	d.Timeline[5].OutputTokensPerSecond = nan
	d.Timeline[6].CausesMs = map[string]float64{"io_block": inf, "cpu_runqueue": nan}
	d.Phases[1].StartS = nan
	d.Phases[2].P99ITLMs = inf
	d.Phases[2].ITLP99 = correlate.Breakdown{"io_block": nan}
	d.Percentiles["p99_itl_ms"] = nan
	d.ITLs = result.ITLs{{0.01, 1e308, -5}, {}, nil}
	d.Diagnosis = nil
	return d
}

// hostileDocument puts markup in every string that reaches the page.
func hostileDocument() *result.Document {
	d := fullDocument()
	evil := `<script>alert("x")</script><img src=x onerror=alert(1)>`
	d.BPFBench.Target = "http://h/" + evil
	d.ModelID = evil
	d.Phases[0].Name = evil
	d.Collection.Comm = evil
	d.Collection.StoppedReason = evil
	d.Collection.Unavailable = map[string]string{evil: evil}
	d.Collection.Readiness = append(d.Collection.Readiness, result.Check{Status: evil, Name: evil, Detail: evil, Fix: evil})
	d.Collectors.Other = map[string]json.RawMessage{evil: raw(map[string]any{evil: evil, "rows": []any{map[string]any{evil: evil}}})}
	d.Attribution.TopCause = evil
	d.Attribution.ITL["p50"][evil] = 0.5
	d.Timeline[0].CausesMs[evil] = 50
	d.Diagnosis = []string{evil}
	return d
}

// loadOnly is d's load generator's part alone.
func loadOnly(d *result.Document) *result.Document {
	return &result.Document{Loadgen: d.Loadgen, Percentiles: d.Percentiles}
}

func render(t *testing.T, d *result.Document) string {
	t.Helper()
	var b bytes.Buffer
	if err := WriteHTML(&b, d); err != nil {
		t.Fatalf("WriteHTML: %v", err)
	}
	return b.String()
}

var (
	tagRE   = regexp.MustCompile(`<(/?)([a-zA-Z][a-zA-Z0-9-]*)((?:[^>"']|"[^"]*"|'[^']*')*?)(/?)>`)
	voidTag = map[string]bool{"meta": true, "br": true, "img": true, "input": true, "link": true, "hr": true}
)

// checkMarkup fails when elements are not properly nested and closed.
func checkMarkup(t *testing.T, page string) {
	t.Helper()
	if i := strings.Index(page, "<style>"); i >= 0 {
		j := strings.Index(page, "</style>")
		page = page[:i] + page[j+len("</style>"):]
	}
	var stack []string
	for _, m := range tagRE.FindAllStringSubmatch(page, -1) {
		closing, name, selfClose := m[1] == "/", strings.ToLower(m[2]), m[4] == "/"
		switch {
		case voidTag[name] || selfClose:
		case !closing:
			stack = append(stack, name)
		default:
			if len(stack) == 0 || stack[len(stack)-1] != name {
				t.Fatalf("</%s> closes %v", name, stack)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) != 0 {
		t.Fatalf("unclosed elements: %v", stack)
	}
}

var attrRE = regexp.MustCompile(`([a-zA-Z:-]+)\s*=\s*("[^"]*"|'[^']*'|[^\s>]+)`)

var badNumber = regexp.MustCompile(`="[^"]*(NaN|Inf)[^"]*"|>[^<]*\b(NaN|[+-]?Inf)\b[^<]*<`)

func checkPage(t *testing.T, page string) {
	t.Helper()
	checkMarkup(t, page)
	for _, id := range chartIDs {
		if n := strings.Count(page, `<svg id="`+id+`"`); n != 1 {
			t.Errorf("chart %s appears %d times", id, n)
		}
	}
	if m := badNumber.FindString(page); m != "" {
		t.Errorf("non-finite number in the page: %q", m)
	}
	// self-contained: nothing that would fetch
	for _, s := range []string{"<script", "url(", "@import", "<link", "<iframe", "<img", "<object", "<embed"} {
		if strings.Contains(page, s) {
			t.Errorf("page contains %q", s)
		}
	}
	for _, m := range tagRE.FindAllStringSubmatch(page, -1) {
		for _, a := range attrRE.FindAllStringSubmatch(m[3], -1) {
			switch strings.ToLower(a[1]) {
			case "src", "href", "xlink:href", "srcset", "action", "poster", "data", "background":
				t.Errorf("element fetches: %s", m[0])
			}
		}
	}
	if !strings.Contains(page, "default-src 'none'") {
		t.Error("no Content-Security-Policy")
	}
}

func TestWriteHTMLDocuments(t *testing.T) {
	for name, d := range map[string]*result.Document{
		"full": fullDocument(), "empty": emptyDocument(), "failed": failedDocument(), "nil": nil,
		"missing sections": missingSections(), "nan": nanDocument(), "hostile": hostileDocument(),
		"load only": loadOnly(fullDocument()), "injections": injectionDocument(), "critical path only": criticalPathOnlyDocument(),
	} {
		t.Run(name, func(t *testing.T) {
			page := render(t, d)
			checkPage(t, page)
			if render(t, d) != page {
				t.Error("two renders of one document differ")
			}
		})
	}
}

func TestWriteHTMLFull(t *testing.T) {
	page := render(t, fullDocument())
	for _, want := range []string{
		"bpfbench · http://127.0.0.1:8000/v1/completions", "llmsim-7b", "2026-03-01 10:15:00",
		`id="table-throughput"`, `id="table-latency"`, "Successful requests", "Output token throughput (tok/s)", "P99",
		`id="table-attribution"`, `id="table-phases"`, `id="table-requests"`, `id="table-collection"`, `id="table-readiness"`,
		"seg-cpu_runqueue", "seg-io_block", "seg-gpu_sync", "seg-net_backpressure", "seg-unexplained",
		`class="tl-cause"`, "series-itl-p99", "series-itl-p50", "tl-area", "phase-label",
		"p99+ gaps", "p50–p90 gaps", "Time to first token",
		`id="section-sched"`, `id="section-blockio"`, `id="section-tcp"`, `id="section-cuda"`, `id="section-gpu"`,
		"llmsim-io", "nvme0n1", "127.0.0.1:51234", "cudaStreamSynchronize", "Could not run: NVML not found",
		"disk contention", "Lost events", "load finished", "182,345",
		"70% of its excess is the server&#39;s threads waiting for a CPU, 20% the disk, 10% unexplained",
		"&lt;retry later&gt;",
		`id="table-server-metrics"`, `id="table-server-queue"`, `id="chart-server-metrics"`, "series-requests_waiting",
		"Peak requests waiting", "93%", "Server queue share of TTFT", "34%", "no answer within 400ms",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	for _, c := range causeTable {
		if !strings.Contains(page, c.Color) {
			t.Errorf("color of %s missing", c.Name)
		}
	}
}

func TestWriteHTMLEmpty(t *testing.T) {
	page := render(t, emptyDocument())
	for _, want := range []string{"No successful requests", "No attribution", "No timeline", "chart-empty", "No collector ran", "The kernel side did not run"} {
		if !strings.Contains(page, want) {
			t.Errorf("empty page lacks %q", want)
		}
	}
	page = render(t, failedDocument())
	for _, want := range []string{"All 20 requests failed", "connection refused", "target pid 99 exited", "0 ok", "20 failed"} {
		if !strings.Contains(page, want) {
			t.Errorf("failed-run page lacks %q", want)
		}
	}
}

func TestWriteHTMLMissingSections(t *testing.T) {
	page := render(t, missingSections())
	for _, want := range []string{
		`id="section-cuda"`, "Could not run: no libcudart.so", `id="section-future"`, "widgets", "nested · deep · x", "500 ms",
		"target pid 4242 exited", "1234", "50 (",
		"so gpu_sync is never blamed", "All gaps",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

func TestWriteHTMLEscapes(t *testing.T) {
	page := render(t, hostileDocument())
	if strings.Contains(page, "<script") || strings.Contains(page, "<img") {
		t.Fatal("markup from the document reached the page unescaped")
	}
	if !strings.Contains(page, "&lt;script&gt;") {
		t.Error("escaped text missing")
	}
}

func TestDocumentRoundTripRendersTheSame(t *testing.T) {
	d := fullDocument()
	p := filepath.Join(t.TempDir(), "json")
	if err := d.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	back, err := result.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := render(t, d), render(t, back); a != b {
		t.Error("the page of a re-read result.json differs from the original's")
	}
}

func terminal(t *testing.T, d *result.Document) string {
	t.Helper()
	var b bytes.Buffer
	if err := WriteTerminal(&b, d); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestWriteTerminal(t *testing.T) {
	out := terminal(t, fullDocument())
	for _, want := range []string{
		"237 completed, 3 failed", "241.32 output tok/s", "TTFT", "ITL", "baseline 18.2 ms",
		"cpu_runq", "net_bp", "p99+", "Phases", "cpu contention", "net_backpressure", "85%",
		"pid 4242 (llmsim)", "12 lost events", "unavailable: gpu", "Diagnosis", "70% of its excess",
		"Server metrics (vllm, http://127.0.0.1:8000/metrics): 120 samples, 1 of 121 scrapes failed",
		"peak waiting 7, peak running 16, peak KV usage 93%, preemptions +3, mean queue time 41.5 ms",
		"server queue: 34% of the TTFT; 31 requests waited (16 slots)",
		"31 requests waited in the engine's queue for one of its 16 slots (mean 41.6 ms): 34% of the time to first token",
		"The engine preempted 3 requests",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("terminal summary lacks %q:\n%s", want, out)
		}
	}
	// the p99+ row reads 70% cpu_runq, 20% io_block, 10% unexpl, found
	// by the header's columns (whatever their order)
	col := map[string]int{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && f[0] == "band" {
			for i, h := range f {
				col[h] = i
			}
		}
		if len(f) > 0 && f[0] == "p99+" {
			get := func(h string) string {
				if i, ok := col[h]; ok && i < len(f) {
					return f[i]
				}
				return ""
			}
			if get("cpu_runq") != "70%" || get("io_block") != "20%" || get("unexpl") != "10%" {
				t.Errorf("p99+ row: %q (columns %v)", l, col)
			}
		}
	}
	for name, d := range map[string]*result.Document{"empty": emptyDocument(), "nil": nil, "nan": nanDocument(), "missing": missingSections()} {
		out := terminal(t, d)
		if strings.Contains(out, "NaN") || strings.Contains(out, "Inf") {
			t.Errorf("%s: non-finite number printed:\n%s", name, out)
		}
	}
	// collection begins a moment before the load
	d := fullDocument()
	d.Collection.StartedOffsetS = -0.0031
	if out := terminal(t, d); !strings.Contains(out, "pid 4242 (llmsim), 0–60.20 s;") || strings.Contains(out, "-0.00") {
		t.Errorf("a start offset of -3.1 ms:\n%s", out)
	}
	if got := fmtNum(-0.001); got != "0.00" {
		t.Errorf("fmtNum(-0.001) = %q", got)
	}
	out = terminal(t, failedDocument())
	if !strings.Contains(out, "0 completed, 20 failed") || !strings.Contains(out, "All 20 requests failed") || strings.Contains(out, "Attribution") {
		t.Errorf("failed run:\n%s", out)
	}
}

// TestCollectorTables checks the generic tables: a distribution's parts
// grouped under its name in their usual order, ids next to the text
// columns, and a table too wide for the page cut into parts that repeat
// them.
func TestCollectorTables(t *testing.T) {
	var v sectionView
	renderSection(&v, raw(map[string]any{"calls": []any{
		map[string]any{"name": "cudaStreamSynchronize", "count": 3, "duration_seconds": map[string]any{"sum": 1, "max": 0.5, "p99": 0.4, "p50": 0.1, "count": 3}},
	}}))
	if len(v.Tables) != 1 || len(v.Tables[0].Heads) != 2 {
		t.Fatalf("tables: %+v", v.Tables)
	}
	var top, sub []string
	for _, h := range v.Tables[0].Heads[0] {
		top = append(top, h.Text)
	}
	for _, h := range v.Tables[0].Heads[1] {
		sub = append(sub, h.Text)
	}
	if got := strings.Join(top, "|") + " / " + strings.Join(sub, "|"); got != "name|count|duration / count|p50|p99|max|sum" {
		t.Errorf("headers: %s", got)
	}

	d := gpuDocument()
	v = sectionView{}
	renderSection(&v, raw(d.Collectors.GPU))
	var parts []table
	for _, tb := range v.Tables {
		if strings.HasPrefix(tb.Title, "devices") {
			parts = append(parts, tb)
		}
	}
	if len(parts) < 2 {
		t.Fatalf("the gpu devices table was not cut: %+v", parts)
	}
	seen := map[string]bool{}
	for _, p := range parts {
		w := 0.0
		for i, c := range p.Columns {
			w += p.estWidth(i)
			if c.Key {
				continue
			}
			if seen[c.Name] {
				t.Errorf("column %s in two parts", c.Name)
			}
			seen[c.Name] = true
		}
		if w > tableRoomPx {
			t.Errorf("%s: %.0f px estimated", p.Title, w)
		}
		if c := p.Columns[:3]; c[0].Name != "name" || c[1].Name != "uuid" || c[2].Name != "index" {
			t.Errorf("%s: key columns %+v", p.Title, c)
		}
		if len(p.Rows) != 2 || len(p.Rows[0]) != len(p.Columns) {
			t.Errorf("%s: rows %v", p.Title, p.Rows)
		}
	}
	// samples, memory total, 4 clock event reasons, 9 readings of 3 parts
	if len(seen) != 2+4+9*3 {
		t.Errorf("%d columns in the parts", len(seen))
	}
}
