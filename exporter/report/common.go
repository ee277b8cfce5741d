package report

import (
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/result"
)

// causeInfo describes one cause for the renders.
type causeInfo struct {
	Name  string
	Label string // short, for legends and tables
	// Phrase is how the diagnosis speaks of the cause ("the disk").
	Phrase string
	Color  string
}

var causeTable = map[string]causeInfo{
	"cpu_runqueue":     {"cpu_runqueue", "CPU run queue", "the server's threads waiting for a CPU", "#e4572e"},
	"io_block":         {"io_block", "Block IO", "the disk", "#3b7dd8"},
	"gpu_sync":         {"gpu_sync", "GPU sync", "waiting on the GPU (blocking CUDA calls)", "#3fa34d"},
	"net_backpressure": {"net_backpressure", "Network backpressure", "the network (a client reading slowly or a full send buffer)", "#9b59b6"},
	"unexplained":      {"unexplained", "Unexplained", "unexplained", "#a5a5a5"},
}

// critCauses are the critical path's own causes (its table and diagnosis).
var critCauses = map[string]causeInfo{
	"server_compute": {"server_compute", "Server compute", "the server's threads running (its own work)", "#f2b701"},
	"server_sleep":   {"server_sleep", "Server sleep", "the server asleep with none of its threads running or runnable (idle, or waiting on a timer or an outside event)", "#11a579"},
	"server_stopped": {"server_stopped", "Server stopped", "the server stopped (a stop signal such as SIGSTOP, a debugger, or the cgroup freezer of a paused container)", "#e68310"},
	"client":         {"client", "Client", "the load generator reading late (the client)", "#008695"},
}

// extraColors color causes this version does not know.
var extraColors = []string{"#f2b701", "#11a579", "#e68310", "#7f3c8d", "#008695"}

// causeOf returns the description of a cause name, inventing one for
// names this version does not know.
func causeOf(name string, i int) causeInfo {
	if c, ok := causeTable[name]; ok {
		return c
	}
	if c, ok := critCauses[name]; ok {
		return c
	}
	label := strings.ReplaceAll(name, "_", " ")
	return causeInfo{name, label, label, extraColors[i%len(extraColors)]}
}

// knownCauses are the causes in the order the renders list them: the
// critical path's (the activity model's are among them).
var knownCauses = []string{"cpu_runqueue", "io_block", "gpu_sync", "net_backpressure", "server_compute", "server_sleep", "server_stopped", "client", "unexplained"}

// causeOrder lists the known causes in their order, then any other name
// found in the breakdowns, sorted.
func causeOrder(bs ...correlate.Breakdown) []string {
	out := append([]string(nil), knownCauses...)
	seen := map[string]bool{}
	for _, n := range out {
		seen[n] = true
	}
	var extra []string
	for _, b := range bs {
		for k := range b {
			if !seen[k] {
				seen[k] = true
				extra = append(extra, k)
			}
		}
	}
	sort.Strings(extra)
	return append(out, extra...)
}

// causeList returns the descriptions of the causes in order.
func causeList(names []string) []causeInfo {
	out := make([]causeInfo, len(names))
	for i, n := range names {
		out[i] = causeOf(n, i)
	}
	return out
}

// finite replaces NaN and infinities by 0.
func finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}

func isFinite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// fmtMs formats a duration in milliseconds with a precision that fits it.
func fmtMs(ms float64) string {
	if !isFinite(ms) {
		return "–"
	}
	a := math.Abs(ms)
	switch {
	case a == 0:
		return "0 ms"
	case a >= 10000:
		return strconv.FormatFloat(ms/1000, 'f', 1, 64) + " s"
	case a >= 1000:
		return strconv.FormatFloat(ms/1000, 'f', 2, 64) + " s"
	case a >= 100:
		return strconv.FormatFloat(ms, 'f', 0, 64) + " ms"
	case a >= 10:
		return strconv.FormatFloat(ms, 'f', 1, 64) + " ms"
	case a >= 0.1:
		return strconv.FormatFloat(ms, 'f', 2, 64) + " ms"
	default:
		return strconv.FormatFloat(ms*1000, 'f', 1, 64) + " µs"
	}
}

// fmtNum formats a number with up to two decimals, thousands grouped.
func fmtNum(f float64) string {
	if !isFinite(f) {
		return "–"
	}
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return group(strconv.FormatInt(int64(f), 10))
	}
	s := strconv.FormatFloat(f, 'f', 2, 64)
	if s == "-0.00" {
		s = "0.00" // a tiny negative number
	}
	if i := strings.IndexByte(s, '.'); i >= 0 {
		return group(s[:i]) + s[i:]
	}
	return s
}

func group(s string) string {
	sign := ""
	if strings.HasPrefix(s, "-") {
		sign, s = "-", s[1:]
	}
	if len(s) <= 4 {
		return sign + s
	}
	var parts []string
	for len(s) > 3 {
		parts = append([]string{s[len(s)-3:]}, parts...)
		s = s[:len(s)-3]
	}
	return sign + s + "," + strings.Join(parts, ",")
}

// fmtPct formats a share (0..1) as a percentage.
func fmtPct(f float64) string {
	if !isFinite(f) {
		return "–"
	}
	p := f * 100
	if p > 0 && p < 0.1 {
		return "<0.1%"
	}
	if p != 0 && math.Abs(p) < 1 {
		return strconv.FormatFloat(p, 'f', 1, 64) + "%"
	}
	return strconv.FormatFloat(p, 'f', 0, 64) + "%"
}

// fmtBytes formats a byte count with binary prefixes.
func fmtBytes(f float64) string {
	if !isFinite(f) {
		return "–"
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	i := 0
	for math.Abs(f) >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if i == 0 {
		return strconv.FormatFloat(f, 'f', 0, 64) + " B"
	}
	return strconv.FormatFloat(f, 'f', 1, 64) + " " + units[i]
}

// detail is the load generator's "bpfbench" object (empty when absent).
func (d doc) detail() *result.LoadDetail {
	if d.BPFBench == nil {
		return &result.LoadDetail{}
	}
	return d.BPFBench
}

// ttftsMs returns the TTFTs of the successful requests in milliseconds.
func (d doc) ttftsMs() []float64 {
	ts, errs := d.TTFTs, d.Errors
	out := make([]float64, 0, len(ts))
	for i, t := range ts {
		if i < len(errs) && errs[i] != "" {
			continue
		}
		if t > 0 && isFinite(t) {
			out = append(out, t*1000)
		}
	}
	return out
}

// itlsMs returns every inter-token gap in milliseconds.
func (d doc) itlsMs() []float64 {
	var out []float64
	for _, r := range d.ITLs {
		for _, v := range r {
			if v >= 0 && isFinite(v) {
				out = append(out, v*1000)
			}
		}
	}
	return out
}

// percentilesIn lists the percentiles the load fields report, ascending
// ("90", "99", "99.9").
func (d doc) percentilesIn() []string {
	seen := map[string]float64{}
	for k := range d.Percentiles {
		if p, ok := result.PercentileKey(k); ok {
			f, _ := strconv.ParseFloat(p, 64)
			seen[p] = f
		}
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return seen[out[i]] < seen[out[j]] })
	return out
}

// runDate returns when the run happened, or "" when unknown.
func (d doc) runDate() string {
	if d.Collection != nil && !d.Collection.Started.IsZero() {
		return d.Collection.Started.Format("2006-01-02 15:04:05 MST")
	}
	if s := d.Date; s != "" {
		if t, err := time.Parse("20060102-150405", s); err == nil {
			return t.Format("2006-01-02 15:04:05")
		}
		return s
	}
	return ""
}

// bandKeys returns the attribution's ITL band names by percentile, with
// "all" last.
func bandKeys(s *correlate.Summary) []string {
	if s == nil {
		return nil
	}
	var ps []string
	hasAll := false
	for k := range s.ITL {
		if k == "all" {
			hasAll = true
			continue
		}
		ps = append(ps, k)
	}
	for k := range s.ITLBands {
		if _, ok := s.ITL[k]; !ok && k != "all" {
			ps = append(ps, k)
		}
	}
	sort.Slice(ps, func(i, j int) bool {
		a, ea := strconv.ParseFloat(strings.TrimPrefix(ps[i], "p"), 64)
		b, eb := strconv.ParseFloat(strings.TrimPrefix(ps[j], "p"), 64)
		if ea != nil || eb != nil {
			return ps[i] < ps[j]
		}
		return a < b
	})
	if hasAll {
		ps = append(ps, "all")
	}
	return ps
}

// bandShares returns a band's shares from ITL, falling back to ITLBands.
func bandShares(s *correlate.Summary, key string) correlate.Breakdown {
	if b, ok := s.ITL[key]; ok && b != nil {
		return b
	}
	return s.ITLBands[key].Shares
}

// bandLabel names a band for people: "p50–p90 gaps", "p99+ gaps".
func bandLabel(keys []string, i int) string {
	k := keys[i]
	if k == "all" {
		return "All gaps"
	}
	if i+1 < len(keys) && keys[i+1] != "all" {
		return k + "–" + keys[i+1] + " gaps"
	}
	return k + "+ gaps"
}

// sharesSum is the total of a breakdown, ignoring non-finite values.
func sharesSum(b correlate.Breakdown) float64 {
	keys := make([]string, 0, len(b))
	for k := range b {
		keys = append(keys, k)
	}
	sort.Strings(keys) // a fixed order keeps the sum, and the page, stable
	t := 0.0
	for _, k := range keys {
		if v := b[k]; isFinite(v) && v > 0 {
			t += v
		}
	}
	return t
}

// sectionCause maps a collector section to the cause it feeds.
var sectionCause = map[string]string{
	"sched": "cpu_runqueue", "blockio": "io_block", "cuda": "gpu_sync", "tcp": "net_backpressure",
}

// sectionOrder is the order in which sections are shown.
var sectionOrder = []string{"sched", "blockio", "tcp", "cuda", "gpu"}

var sectionTitles = map[string]string{
	"sched": "Scheduler (sched)", "blockio": "Block IO (blockio)", "tcp": "TCP (tcp)",
	"cuda": "CUDA API (cuda)", "gpu": "GPU (NVML)",
}

// sectionNames lists the sections present as summaries or as unavailable.
func (d doc) sectionNames() []string {
	seen := map[string]bool{}
	for _, k := range d.Collectors.Names() {
		seen[k] = true
	}
	if len(d.Agents) > 1 {
		for _, a := range d.Agents {
			for _, k := range a.Summary.Names() {
				seen[a.Agent+"/"+k] = true
			}
		}
	}
	if d.Collection != nil {
		for k := range d.Collection.Unavailable {
			seen[k] = true
		}
	}
	var out []string
	for _, k := range sectionOrder {
		if seen[k] {
			out = append(out, k)
			delete(seen, k)
		}
	}
	var rest []string
	for k := range seen {
		rest = append(rest, k)
	}
	sort.Strings(rest)
	return append(out, rest...)
}

// setting is a load generator setting as text ("" when absent).
func (d doc) setting(key string) string {
	l := &d.Loadgen
	switch key {
	case "backend":
		return l.Backend
	case "endpoint_type":
		return l.EndpointType
	case "label":
		if l.Label != nil {
			return *l.Label
		}
	case "num_prompts":
		if l.NumPrompts > 0 {
			return strconv.Itoa(l.NumPrompts)
		}
	case "request_rate":
		if l.RequestRate != nil {
			return l.RequestRate.String()
		}
	case "burstiness":
		if l.Burstiness != nil {
			return l.Burstiness.String()
		}
	case "max_concurrency":
		if l.MaxConcurrency != nil {
			return strconv.Itoa(*l.MaxConcurrency)
		}
	}
	return ""
}

// hasLoad reports whether the document holds a load figure by its vLLM
// name (a percentile field only when the run reported it).
func (d doc) hasLoad(key string) bool {
	if _, ok := d.Percentiles[key]; ok {
		return true
	}
	if _, ok := result.PercentileKey(key); ok {
		return false
	}
	_, ok := d.Loadgen.Metric(key)
	return ok && (d.BPFBench != nil || d.Completed+d.Failed > 0 || d.Duration > 0)
}
