package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testproc"
)

const (
	dashboardFile = "grafana/bpfbench.json"
	rulesFile     = "prometheus/rules.yml"
	rulesTestFile = "prometheus/rules_test.yml"
	runbooksFile  = "prometheus/runbooks.md"
	// Where the alerts' runbook_url annotations point: runbooks.md's
	// sections, by the alert's name in lower case (GitHub's anchors).
	runbookBase  = "https://github.com/bpfbench/bpfbench/blob/main/deploy/" + runbooksFile + "#"
	promtoolHint = "apt-get install prometheus"
)

func TestMain(m *testing.M) {
	testproc.Register("work", workChild)
	testproc.Main()
	os.Exit(m.Run())
}

// The dashboard's JSON model, as much of it as the tests read.
type dashboard struct {
	SchemaVersion int     `json:"schemaVersion"`
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	Type        string      `json:"type"`
	Title       string      `json:"title"`
	Datasource  *datasource `json:"datasource"`
	GridPos     struct{ H, W, X, Y int }
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []struct {
		Datasource *datasource `json:"datasource"`
		Expr       string      `json:"expr"`
		RefID      string      `json:"refId"`
		Format     string      `json:"format"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type variable struct {
	Type       string          `json:"type"`
	Name       string          `json:"name"`
	Query      json.RawMessage `json:"query"`
	Definition string          `json:"definition"`
	Datasource *datasource     `json:"datasource"`
	Multi      bool            `json:"multi"`
	IncludeAll bool            `json:"includeAll"`
}

// query is a query variable's PromQL-like query (a string, or an object
// with a query field as Grafana 10 writes it).
func (v variable) query() string {
	var s string
	if json.Unmarshal(v.Query, &s) == nil {
		return s
	}
	var o struct {
		Query string `json:"query"`
	}
	_ = json.Unmarshal(v.Query, &o)
	return o.Query
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s is not valid JSON: %v", dashboardFile, err)
	}
	return d
}

// panels lists the dashboard's panels, rows' nested ones included.
func (d dashboard) panels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// The rule files, as much as the tests read.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Record      string            `yaml:"record"`
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func loadRules(t *testing.T) []rule {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		t.Fatalf("%s has no rules", rulesFile)
	}
	return out
}

// expression is one PromQL expression of the dashboard or the rules.
type expression struct {
	where string // `panel "Title" A`, `variable node`, `record NAME`, `alert NAME`
	query string // as written, Grafana variables unexpanded
	gpu   bool   // reads NVML's metrics only
	alert *rule
}

var labelValuesRE = regexp.MustCompile(`^label_values\((.+),\s*([A-Za-z_][A-Za-z0-9_]*)\)$`)

// expressions lists every PromQL expression: each panel target, each query
// variable (label_values(SEL, L) as group by (L) (SEL)), each rule.
func expressions(t *testing.T, d dashboard, rules []rule) []expression {
	t.Helper()
	var out []expression
	for _, p := range d.panels() {
		for _, tg := range p.Targets {
			out = append(out, expression{where: fmt.Sprintf("panel %q %s", p.Title, tg.RefID), query: tg.Expr})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValuesRE.FindStringSubmatch(v.query())
		if m == nil {
			t.Fatalf("variable %s: query %q is not label_values(SELECTOR, LABEL)", v.Name, v.query())
		}
		out = append(out, expression{where: "variable " + v.Name, query: fmt.Sprintf("group by (%s) (%s)", m[2], m[1])})
	}
	for i := range rules {
		r := &rules[i]
		if r.Record != "" {
			out = append(out, expression{where: "record " + r.Record, query: r.Expr})
		} else {
			out = append(out, expression{where: "alert " + r.Alert, query: r.Expr, alert: r})
		}
	}
	for i := range out {
		out[i].gpu = strings.Contains(out[i].query, "bpfbench_gpu_")
	}
	return out
}

// thresholdRE splits an alert's expression into what it measures and its
// threshold comparison, which every alert ends with.
var thresholdRE = regexp.MustCompile(`^(?s)(.*\S)\s*(==|!=|>=|<=|>|<)\s*(bool\s+)?[-+]?[0-9.]+([eE][-+]?[0-9]+)?\s*$`)

func TestDashboard(t *testing.T) {
	d := loadDashboard(t)
	if d.SchemaVersion < 36 || d.UID == "" || d.Title == "" {
		t.Errorf("schemaVersion %d, uid %q, title %q: want a Grafana 10 model (schemaVersion >= 36) with a uid and a title", d.SchemaVersion, d.UID, d.Title)
	}
	vars := map[string]variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	if v, ok := vars["datasource"]; !ok || v.Type != "datasource" || v.query() != "prometheus" {
		t.Errorf("want a Prometheus datasource variable named datasource, have %+v", v)
	}
	if v, ok := vars["node"]; !ok || v.Type != "query" || !strings.Contains(v.query(), ", instance)") {
		t.Errorf("want a query variable node over the instance label, have %+v", v)
	}
	if v, ok := vars["target"]; !ok || v.Type != "query" || !strings.Contains(v.query(), ", target)") || !v.Multi || !v.IncludeAll {
		t.Errorf("want a multi-value query variable target (with All) over the target label, have %+v", v)
	}
	for _, name := range []string{"node", "target"} {
		if ds := vars[name].Datasource; ds == nil || ds.UID != "${datasource}" {
			t.Errorf("variable %s: datasource %+v, want uid ${datasource}", name, ds)
		}
	}

	records := map[string]bool{}
	for _, r := range loadRules(t) {
		if r.Record != "" {
			records[r.Record] = true
		}
	}
	recordedRE := regexp.MustCompile(`bpfbench:[a-z0-9_:]+`)
	titles := map[string]bool{}
	n := 0
	for _, p := range d.panels() {
		if p.Type == "row" {
			continue
		}
		n++
		if p.Title == "" || titles[p.Title] {
			t.Errorf("panel title %q is empty or used twice", p.Title)
		}
		titles[p.Title] = true
		if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want the ${datasource} variable", p.Title, p.Datasource)
		}
		if p.FieldConfig.Defaults.Unit == "" {
			t.Errorf("panel %q has no unit", p.Title)
		}
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, p.GridPos)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no targets", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.Expr == "" || tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("panel %q: target %q with refId %q: want an expression and a unique refId", p.Title, tg.Expr, tg.RefID)
			}
			refs[tg.RefID] = true
			if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q %s: datasource %+v, want the ${datasource} variable", p.Title, tg.RefID, tg.Datasource)
			}
			if !strings.Contains(tg.Expr, `instance=~"$node"`) {
				t.Errorf("panel %q %s: %s does not select the node (instance=~\"$node\")", p.Title, tg.RefID, tg.Expr)
			}
			for _, rec := range recordedRE.FindAllString(tg.Expr, -1) {
				if !records[rec] {
					t.Errorf("panel %q %s reads %s, which %s does not record", p.Title, tg.RefID, rec, rulesFile)
				}
			}
		}
		if p.Type == "heatmap" && (len(p.Targets) != 1 || p.Targets[0].Format != "heatmap" || !strings.Contains(p.Targets[0].Expr, "_bucket")) {
			t.Errorf("heatmap %q: want one target of format heatmap over histogram buckets", p.Title)
		}
	}
	// The panels the issue asks for, by what they read.
	exprs := ""
	for _, p := range d.panels() {
		for _, tg := range p.Targets {
			exprs += tg.Expr + "\n"
		}
	}
	for _, m := range []string{
		"bpfbench_sched_runqueue_latency_seconds_bucket", "bpfbench_sched_offcpu_duration_seconds_sum",
		"bpfbench:blockio_latency_seconds:p99_5m", "bpfbench_tcp_retransmits_total", "bpfbench_tcp_zero_window_seconds_total",
		"bpfbench_cuda_calls_total", "bpfbench:cuda_call_duration_seconds:p99_5m", "bpfbench_cuda_errors_total",
		"bpfbench_gpu_utilization_ratio", "bpfbench_gpu_memory_used_bytes", "bpfbench_gpu_power_watts",
		"bpfbench_gpu_clock_event_reason_active", "bpfbench_collector_up", "bpfbench_ringbuf_lost_events_total",
		"bpfbench:token_gap_seconds:p99_5m", "bpfbench_token_gap_cause_seconds_total", "bpfbench:time_to_first_byte_seconds:p99_5m",
		"bpfbench_streams_active",
	} {
		if !strings.Contains(exprs, m) {
			t.Errorf("no panel reads %s", m)
		}
	}
	if n < 20 {
		t.Errorf("only %d panels", n)
	}
}

func TestRules(t *testing.T) {
	rules := loadRules(t)
	b, err := os.ReadFile(runbooksFile)
	if err != nil {
		t.Fatal(err)
	}
	runbooks := string(b)
	seen := map[string]bool{}
	for _, r := range rules {
		name := r.Record + r.Alert
		if (r.Record == "") == (r.Alert == "") || r.Expr == "" || seen[name] {
			t.Errorf("rule %q: want exactly one of record or alert, an expression and a unique name", name)
		}
		seen[name] = true
		if r.Record != "" {
			if !strings.HasPrefix(r.Record, "bpfbench:") || strings.Count(r.Record, ":") != 2 {
				t.Errorf("record %s: want the level:metric:operations form, bpfbench:NAME:OP", r.Record)
			}
			continue
		}
		if !strings.HasPrefix(r.Alert, "Bpfbench") {
			t.Errorf("alert %s: want the Bpfbench prefix", r.Alert)
		}
		if s := r.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("alert %s: severity %q, want warning or critical", r.Alert, s)
		}
		for _, a := range []string{"summary", "description", "runbook_url"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("alert %s has no %s annotation", r.Alert, a)
			}
		}
		// runbook_url, as the Prometheus Operator's and the mixins' alerts
		// have it (Alertmanager and Grafana show it as a link): the alert's
		// section of runbooks.md.
		if want := runbookBase + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
			t.Errorf("alert %s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
		}
		if !strings.Contains(runbooks, "\n## "+r.Alert+"\n") {
			t.Errorf("alert %s: %s has no section ## %s", r.Alert, runbooksFile, r.Alert)
		}
		if !thresholdRE.MatchString(r.Expr) {
			t.Errorf("alert %s: %q does not end with its threshold comparison (the live test evaluates what it measures without it)", r.Alert, r.Expr)
		}
	}
	var alerts []string
	for _, r := range rules {
		if r.Alert != "" {
			alerts = append(alerts, r.Alert)
		}
	}
	for _, want := range []string{"BpfbenchDaemonDown", "BpfbenchCollectorDown", "BpfbenchEventsLost", "BpfbenchRunqueueLatencyHigh",
		"BpfbenchCUDAAllocationFailures", "BpfbenchTCPZeroWindowStorm", "BpfbenchGPUThrottling", "BpfbenchTokenGapRunqueueShare"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s", want)
		}
	}
}

// Every alert of rules.yml has a unit test where it fires and one where it
// does not.
func TestRulesUnitTestsCoverEveryAlert(t *testing.T) {
	b, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", rulesTestFile, err)
	}
	if !slices.Equal(f.RuleFiles, []string{"rules.yml"}) {
		t.Errorf("%s tests %v, want [rules.yml]", rulesTestFile, f.RuleFiles)
	}
	firing, quiet := map[string]int{}, map[string]int{}
	for _, tc := range f.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				firing[a.Alertname]++
			} else {
				quiet[a.Alertname]++
			}
		}
	}
	alerts := map[string]bool{}
	for _, r := range loadRules(t) {
		if r.Alert == "" {
			continue
		}
		alerts[r.Alert] = true
		if firing[r.Alert] == 0 {
			t.Errorf("alert %s has no unit test where it fires", r.Alert)
		}
		if quiet[r.Alert] == 0 {
			t.Errorf("alert %s has no unit test where it does not fire", r.Alert)
		}
	}
	for name := range firing {
		if !alerts[name] {
			t.Errorf("%s tests alert %s, which %s does not define", rulesTestFile, name, rulesFile)
		}
	}
	for name := range quiet {
		if !alerts[name] {
			t.Errorf("%s tests alert %s, which %s does not define", rulesTestFile, name, rulesFile)
		}
	}
}

func promtool(t *testing.T, args ...string) string {
	t.Helper()
	p := privtest.RequireTool(t, "promtool", promtoolHint)
	cmd := exec.Command(p, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

func TestPromtoolCheckRules(t *testing.T) {
	out := promtool(t, "check", "rules", rulesFile)
	if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool check rules:\n%s", out)
	}
	t.Log(strings.TrimSpace(out))
}

func TestPromtoolTestRules(t *testing.T) {
	out := promtool(t, "test", "rules", rulesTestFile)
	if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool test rules:\n%s", out)
	}
}

// The expressions the live test can only parse: this host has no NVML.
func TestGPUExpressionsAreTheGPUPanels(t *testing.T) {
	exprs := expressions(t, loadDashboard(t), loadRules(t))
	var gpu []string
	for _, e := range exprs {
		if e.gpu {
			gpu = append(gpu, e.where)
		}
	}
	sort.Strings(gpu)
	want := slices.Clone(nvmlOnly)
	sort.Strings(want)
	if !slices.Equal(gpu, want) {
		t.Errorf("expressions reading bpfbench_gpu_* are\n  %s\nthe list of those allowed to be empty (nvmlOnly) is\n  %s", strings.Join(gpu, "\n  "), strings.Join(want, "\n  "))
	}
}
