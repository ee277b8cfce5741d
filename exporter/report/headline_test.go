package report

import (
	"html"
	"math"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/result"
)

// The page states causes only from the critical path (Document.Attribution,
// model critical_path): its headline, its attribution bands, its phases
// and its slowest requests. The union of overlapping activity
// (Document.Activity) appears only with the collectors, as what else was
// active.

// elem is an element (or, with tag "#text", a text node) of a rendered page.
type elem struct {
	tag    string
	attr   map[string]string
	data   string
	kids   []*elem
	parent *elem
}

// parsePage builds the element tree of a page written by WriteHTML (whose
// markup checkMarkup checks).
func parsePage(t *testing.T, page string) *elem {
	t.Helper()
	checkMarkup(t, page)
	root := &elem{tag: "#root"}
	cur := root
	pos := 0
	for _, m := range tagRE.FindAllStringSubmatchIndex(page, -1) {
		if txt := page[pos:m[0]]; txt != "" && cur.tag != "style" {
			cur.kids = append(cur.kids, &elem{tag: "#text", data: html.UnescapeString(txt), parent: cur})
		}
		pos = m[1]
		closing := page[m[2]:m[3]] == "/"
		name := strings.ToLower(page[m[4]:m[5]])
		if closing {
			for cur != root && cur.tag != name {
				cur = cur.parent
			}
			if cur != root {
				cur = cur.parent
			}
			continue
		}
		e := &elem{tag: name, attr: map[string]string{}, parent: cur}
		for _, a := range attrRE.FindAllStringSubmatch(page[m[6]:m[7]], -1) {
			v := a[2]
			if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') {
				v = v[1 : len(v)-1]
			}
			e.attr[strings.ToLower(a[1])] = html.UnescapeString(v)
		}
		cur.kids = append(cur.kids, e)
		if !voidTag[name] && page[m[8]:m[9]] != "/" {
			cur = e
		}
	}
	return root
}

// all returns the descendants of e for which keep is true, in page order.
func (e *elem) all(keep func(*elem) bool) []*elem {
	var out []*elem
	var walk func(*elem)
	walk = func(n *elem) {
		for _, k := range n.kids {
			if keep(k) {
				out = append(out, k)
			}
			walk(k)
		}
	}
	walk(e)
	return out
}

func (e *elem) tags(tag string) []*elem {
	return e.all(func(n *elem) bool { return n.tag == tag })
}

func (e *elem) byID(id string) *elem {
	if e == nil {
		return nil
	}
	if l := e.all(func(n *elem) bool { return n.attr["id"] == id }); len(l) > 0 {
		return l[0]
	}
	return nil
}

func (e *elem) hasClass(c string) bool {
	if e == nil {
		return false
	}
	for _, f := range strings.Fields(e.attr["class"]) {
		if f == c {
			return true
		}
	}
	return false
}

func (e *elem) withClass(c string) []*elem {
	return e.all(func(n *elem) bool { return n.hasClass(c) })
}

// text is the element's text content, spaces collapsed.
func (e *elem) text() string {
	if e == nil {
		return ""
	}
	if e.tag == "#text" {
		return strings.Join(strings.Fields(e.data), " ")
	}
	var b strings.Builder
	for _, n := range e.all(func(n *elem) bool { return n.tag == "#text" }) {
		b.WriteString(n.data)
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

func (e *elem) title() string {
	for _, k := range e.kids {
		if k.tag == "title" {
			return k.text()
		}
	}
	return ""
}

func attrFloat(t *testing.T, e *elem, name string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(e.attr[name], 64)
	if err != nil {
		t.Fatalf("<%s %s=%q>: %v", e.tag, name, e.attr[name], err)
	}
	return f
}

// segCause is the cause a bar's part stands for ("seg-cpu_runqueue").
func segCause(e *elem) string {
	for _, f := range strings.Fields(e.attr["class"]) {
		if c, ok := strings.CutPrefix(f, "seg-"); ok {
			return c
		}
	}
	return ""
}

// headlineCard returns the value and the line under it of the headline
// card labelled label, or ok false.
func headlineCard(root *elem, label string) (value, sub string, ok bool) {
	for _, c := range root.byID("headline").withClass("card") {
		if l := c.withClass("label"); len(l) == 1 && l[0].text() == label {
			return c.withClass("value")[0].text(), c.withClass("csub")[0].text(), true
		}
	}
	return "", "", false
}

// expectedRequestMs is a request's excess per cause, ms: its gaps' and its
// TTFT's excess split by their shares.
func expectedRequestMs(r correlate.RequestBlame) map[string]float64 {
	out := map[string]float64{}
	itl := math.Max(r.ITLExcessMs, 0)
	ttft := math.Max(r.TotalExcessMs-itl, 0)
	for _, x := range []struct {
		b  correlate.Breakdown
		ex float64
	}{{r.ITLShares, itl}, {r.TTFTShares, ttft}} {
		sum := 0.0
		for _, v := range x.b {
			sum += v
		}
		for c, v := range x.b {
			if sum > 0 && v > 0 {
				out[c] += v / sum * x.ex
			}
		}
	}
	return out
}

func normalized(b correlate.Breakdown) map[string]float64 {
	sum := 0.0
	for _, v := range b {
		if v > 0 {
			sum += v
		}
	}
	out := map[string]float64{}
	for c, v := range b {
		if v > 0 && sum > 0 {
			out[c] = v / sum
		}
	}
	return out
}

var pctRE = regexp.MustCompile(`(-?[0-9]+(?:\.[0-9]+)?)%`)

// checkTooltips fails when a tooltip (an SVG <title>, a title attribute)
// gives a percentage outside 0-100%.
func checkTooltips(t *testing.T, root *elem) int {
	t.Helper()
	n := 0
	check := func(where, s string) {
		for _, m := range pctRE.FindAllStringSubmatch(s, -1) {
			n++
			if v, err := strconv.ParseFloat(m[1], 64); err != nil || v < 0 || v > 100 {
				t.Errorf("%s gives %s%%: %q", where, m[1], s)
			}
		}
	}
	for _, e := range root.tags("title") {
		check("tooltip", e.text())
	}
	for _, e := range root.all(func(e *elem) bool { return e.attr["title"] != "" }) {
		check("title attribute", e.attr["title"])
	}
	return n
}

// blameParts are the parts of the page that state causes.
var blameParts = []string{"headline", "diagnosis", "legend", "chart-attribution", "table-attribution", "chart-timeline", "table-phases", "table-requests"}

func TestHeadlineIsTheCriticalPath(t *testing.T) {
	d := fullDocument()
	a, act := d.Attribution, d.Activity
	if a.Model != correlate.ModelCriticalPath || act == nil || act.TopCause == a.TopCause {
		t.Fatalf("the fixture's attribution and activity must disagree: %+v / %+v", a, act)
	}
	root := parsePage(t, render(t, d))
	checkHeadline(t, root, a, act)
	checkAttributionBands(t, root, a)
	checkRequestRows(t, root, a)
	checkPhaseRows(t, root, d.Phases)
	if n := checkTooltips(t, root); n < 50 {
		t.Errorf("only %d tooltip percentages checked", n)
	}
	checkActivityBlock(t, root, act)
}

// checkHeadline checks the headline: the attribution's top cause, with
// its share of all excess.
func checkHeadline(t *testing.T, root *elem, a, act *correlate.Summary) {
	t.Helper()
	value, sub, ok := headlineCard(root, "Top cause")
	if !ok {
		t.Fatal("no top cause card")
	}
	if want := causeOf(a.TopCause, 0).Label; value != want {
		t.Errorf("headline cause %q, want %q (the critical path's)", value, want)
	}
	if bad := causeOf(act.TopCause, 0).Label; strings.Contains(value, bad) {
		t.Errorf("headline names the activity model's top cause %q", value)
	}
	total, top := 0.0, 0.0
	for _, r := range a.Requests {
		for c, v := range expectedRequestMs(r) {
			total += v
			if c == a.TopCause {
				top += v
			}
		}
	}
	if want := fmtPct(top/total) + " of all excess"; !strings.Contains(sub, want) || !strings.Contains(sub, "critical path") {
		t.Errorf("headline basis %q, want %q on the critical path", sub, want)
	}
}

// checkAttributionBands checks the bands: each bar's parts are the
// attribution's shares, and the table beside them.
func checkAttributionBands(t *testing.T, root *elem, a *correlate.Summary) {
	t.Helper()
	want := map[string]correlate.Breakdown{"Time to first token": a.TTFT}
	keys := bandKeys(a)
	for i, k := range keys {
		want[bandLabel(keys, i)] = bandShares(a, k)
	}
	chart := root.byID("chart-attribution")
	rows := chart.withClass("attr-row")
	if len(rows) != len(want) {
		t.Fatalf("%d attribution bars, want %d", len(rows), len(want))
	}
	const barW = 1100.0 - 250 - 16
	for _, row := range rows {
		label := row.withClass("row-label")[0].text()
		b, ok := want[label]
		if !ok {
			t.Errorf("attribution bar %q is not one of the attribution's", label)
			continue
		}
		exp := normalized(b)
		got := map[string]float64{}
		for _, seg := range row.withClass("seg") {
			c := segCause(seg)
			got[c] = attrFloat(t, seg, "width") / barW
			if tip := seg.title(); !strings.Contains(tip, causeOf(c, 0).Label+" — "+fmtPct(exp[c])) {
				t.Errorf("%s: tooltip %q lacks %s's share %s", label, tip, c, fmtPct(exp[c]))
			}
		}
		for c, v := range exp {
			if math.Abs(got[c]-v) > 0.002 {
				t.Errorf("%s: %s is %.4f of the bar, want %.4f", label, c, got[c], v)
			}
		}
		for c := range got {
			if _, ok := exp[c]; !ok {
				t.Errorf("%s: a part for %s, which the attribution does not name", label, c)
			}
		}
	}
	// and the table beside them
	tbl := root.byID("table-attribution")
	var cols []string
	for _, th := range tbl.tags("th")[4:] {
		cols = append(cols, th.attr["title"])
	}
	for _, tr := range tbl.tags("tbody")[0].tags("tr") {
		tds := tr.tags("td")
		b, ok := want[tds[0].text()]
		if !ok {
			t.Errorf("attribution table row %q", tds[0].text())
			continue
		}
		exp := normalized(b)
		for i, c := range cols {
			if got := tds[4+i].text(); got != fmtPct(exp[c]) {
				t.Errorf("attribution table %s / %s: %s, want %s", tds[0].text(), c, got, fmtPct(exp[c]))
			}
		}
	}
}

// checkRequestRows checks the slowest requests: their top cause and their
// blame bars.
func checkRequestRows(t *testing.T, root *elem, a *correlate.Summary) {
	t.Helper()
	byReq := map[string]correlate.RequestBlame{}
	for _, r := range a.Requests {
		byReq[strconv.Itoa(r.Request)] = r
	}
	trs := root.byID("table-requests").tags("tbody")[0].tags("tr")
	if len(trs) != maxRequestRows {
		t.Errorf("%d request rows, want %d", len(trs), maxRequestRows)
	}
	last := math.Inf(1)
	for _, tr := range trs {
		tds := tr.tags("td")
		r, ok := byReq[tds[0].text()]
		if !ok {
			t.Errorf("request row %q is not in the attribution", tds[0].text())
			continue
		}
		if r.TotalExcessMs > last {
			t.Errorf("request %d out of order", r.Request)
		}
		last = r.TotalExcessMs
		if got, want := tds[4].text(), causeOf(r.TopCause, 0).Label; got != want {
			t.Errorf("request %d: top cause %q, want %q", r.Request, got, want)
		}
		ms := expectedRequestMs(r)
		sum := 0.0
		for _, v := range ms {
			sum += v
		}
		svg := tds[5].tags("svg")[0]
		got := map[string]float64{}
		for _, rect := range svg.tags("rect") {
			c := segCause(rect)
			got[c] = attrFloat(t, rect, "width") / 160
			wantTip := causeOf(c, 0).Label + ": " + fmtPct(ms[c]/sum) + " (" + fmtMs(ms[c]) + ")"
			if tip := rect.title(); tip != wantTip {
				t.Errorf("request %d: tooltip %q, want %q", r.Request, tip, wantTip)
			}
		}
		for c, v := range ms {
			if v > 0 && math.Abs(got[c]-v/sum) > 0.005 {
				t.Errorf("request %d: %s is %.4f of the bar, want %.4f", r.Request, c, got[c], v/sum)
			}
		}
	}
}

// checkPhaseRows checks the phases: each one's top cause and share, as
// the attribution has them.
func checkPhaseRows(t *testing.T, root *elem, phases []result.Phase) {
	t.Helper()
	for i, tr := range root.byID("table-phases").tags("tbody")[0].tags("tr") {
		p := phases[i]
		top := tr.withClass("top")[0]
		if got := top.withClass("top-cause")[0].text(); got != causeOf(p.TopCause, 0).Label {
			t.Errorf("phase %s: top cause %q, want %q", p.Name, got, causeOf(p.TopCause, 0).Label)
		}
		if got := top.withClass("top-share")[0].text(); got != fmtPct(p.TopShare) {
			t.Errorf("phase %s: share %q, want %q", p.Name, got, fmtPct(p.TopShare))
		}
		if got := top.withClass("basis")[0].text(); got != p.TopCauseBasis {
			t.Errorf("phase %s: basis %q, want %q", p.Name, got, p.TopCauseBasis)
		}
	}
}

// checkActivityBlock checks the activity model: with the collectors,
// labelled as activity, and its top cause (unexplained, where the
// critical path explains the excess) blames nothing.
func checkActivityBlock(t *testing.T, root *elem, act *correlate.Summary) {
	t.Helper()
	actDiv := root.byID("activity")
	if actDiv == nil || !strings.Contains(actDiv.text(), "What else was active (overlapping activity, not blame)") {
		t.Fatalf("no activity block: %v", actDiv)
	}
	for p := actDiv.parent; p != nil; p = p.parent {
		for _, id := range blameParts {
			if p.attr["id"] == id {
				t.Errorf("the activity block is inside %s", id)
			}
		}
	}
	if actDiv.byID("table-activity") == nil || len(actDiv.withClass("swatch")) > 0 {
		t.Error("the activity table is missing, or wears the causes' colours")
	}
	collectors := root.byID("collectors")
	if collectors == nil || collectors.parent != actDiv.parent || indexOf(actDiv.parent.kids, actDiv) < indexOf(collectors.parent.kids, collectors) {
		t.Error("the activity block is not in the collectors part")
	}
	for _, tr := range root.byID("table-requests").tags("tr") {
		if tds := tr.tags("td"); len(tds) > 4 && tds[4].text() == causeOf(act.TopCause, 0).Label {
			t.Errorf("a request blamed on the activity model's top cause: %s", tr.text())
		}
	}
	page := root.text()
	for _, s := range []string{"causes active during", "Attribution by overlapping activity"} {
		if strings.Contains(page, s) {
			t.Errorf("the page still says %q", s)
		}
	}
}

func indexOf(xs []*elem, x *elem) int {
	for i, e := range xs {
		if e == x {
			return i
		}
	}
	return -1
}

// An activity model whose top cause the critical path never names: it
// must not appear in any part of the page that states causes.
func TestActivityIsNeverBlame(t *testing.T) {
	d := fullDocument()
	const gone = "io_block"
	strip := func(b correlate.Breakdown) {
		delete(b, gone)
	}
	a := d.Attribution
	strip(a.TTFT)
	for _, b := range a.ITL {
		strip(b)
	}
	for _, b := range a.ITLBands {
		strip(b.Shares)
	}
	for i := range a.Requests {
		strip(a.Requests[i].ITLShares)
		strip(a.Requests[i].TTFTShares)
		if a.Requests[i].TopCause == gone {
			a.Requests[i].TopCause = "server_compute"
		}
	}
	for i := range d.Phases {
		p := &d.Phases[i]
		strip(p.ITLP99)
		strip(p.ITLAll)
		strip(p.TTFT)
		if p.TopCause == gone {
			p.TopCause = "server_sleep"
		}
	}
	for _, pt := range d.Timeline {
		delete(pt.CausesMs, gone)
	}
	d.Activity.TopCause = gone
	d.Activity.ITL["p99"] = correlate.Breakdown{gone: 0.9, "unexplained": 0.1}
	d.Diagnosis = nil
	page := render(t, d)
	checkPage(t, page)
	root := parsePage(t, page)
	c := causeOf(gone, 0)
	for _, id := range blameParts {
		part := root.byID(id)
		if part == nil {
			t.Errorf("no %s", id)
			continue
		}
		text := part.text()
		for _, s := range []string{c.Label, c.Name, c.Phrase} {
			if strings.Contains(text, s) {
				t.Errorf("%s names the activity model's top cause (%q): %s", id, s, text)
			}
		}
		if len(part.all(func(e *elem) bool { return segCause(e) == gone })) > 0 {
			t.Errorf("%s draws the activity model's top cause", id)
		}
	}
	if !strings.Contains(root.byID("table-activity").text(), "90%") {
		t.Error("the activity table lacks the activity model's shares")
	}
}

// The tooltips of the blame bars gave milliseconds as percentages ("CPU
// run queue: 17659%").
func TestBlameTooltipsAreShares(t *testing.T) {
	d := fullDocument()
	d.Attribution.Requests = []correlate.RequestBlame{{
		Request: 7, TTFTMs: 900, TTFTShares: correlate.Breakdown{"cpu_runqueue": 1},
		ITLExcessMs: 176.59, ITLShares: correlate.Breakdown{"cpu_runqueue": 1},
		TopCause: "cpu_runqueue", TotalExcessMs: 176.59,
	}, {
		Request: 8, TTFTMs: 80, TTFTShares: correlate.Breakdown{"server_compute": 0.5, "client": 0.5},
		ITLExcessMs: 3000, ITLShares: correlate.Breakdown{"cpu_runqueue": 3, "unexplained": 1},
		TopCause: "cpu_runqueue", TotalExcessMs: 4000,
	}}
	root := parsePage(t, render(t, d))
	checkTooltips(t, root)
	var tips []string
	for _, r := range root.byID("table-requests").tags("rect") {
		tips = append(tips, r.title())
	}
	got := strings.Join(tips, " | ")
	for _, want := range []string{
		"CPU run queue: 100% (177 ms)",
		"CPU run queue: 56% (2.25 s)", "Unexplained: 19% (750 ms)", "Server compute: 12% (500 ms)", "Client: 12% (500 ms)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("request tooltips lack %q: %s", want, got)
		}
	}
	if strings.Contains(got, "17659") {
		t.Errorf("a tooltip gives the ms as a percentage: %s", got)
	}
}

// Without an attribution (no kernel data, or a result.json of an older
// bpfbench) the page renders: its headline from the critical path when
// there is one, else no cause card; an older file's activity model shows
// only as activity.
func TestHeadlineWithoutAttribution(t *testing.T) {
	d := criticalPathOnlyDocument()
	page := render(t, d)
	checkPage(t, page)
	root := parsePage(t, page)
	value, sub, ok := headlineCard(root, "Top cause")
	if !ok || value != "Server compute" || !strings.Contains(sub, "47% of the p99 gap's excess") {
		t.Errorf("headline from the critical path: %v %q %q", ok, value, sub)
	}
	if strings.Contains(root.byID("headline").text(), "Unexplained") {
		t.Error("the headline names the activity model's top cause")
	}
	checkTooltips(t, root)
	// the bands are the critical path's own
	bars := map[string]string{}
	for _, row := range root.byID("chart-attribution").withClass("attr-row") {
		var parts []string
		for _, seg := range row.withClass("seg") {
			_, tip, _ := strings.Cut(seg.title(), " — ")
			parts = append(parts, segCause(seg)+" "+pctRE.FindString(tip))
		}
		bars[row.withClass("row-label")[0].text()] = strings.Join(parts, ", ")
	}
	if len(bars) != 2 || bars["Slowest 1% of TTFTs"] != "cpu_runqueue 100%" || bars["p99+ gaps"] != "cpu_runqueue 23%, server_compute 47%, client 30%" {
		t.Errorf("the critical path's bands: %v", bars)
	}

	d.CriticalPath = nil
	for _, doc := range []*result.Document{d, loadOnly(d)} {
		page = render(t, doc)
		checkPage(t, page)
		if _, _, ok := headlineCard(parsePage(t, page), "Top cause"); ok {
			t.Error("a top cause card without an attribution or a critical path")
		}
	}

	// a result.json of an older bpfbench: its attribution (no model) is
	// the activity model's, and so are its timeline's and phases' causes
	old := fullDocument()
	old.Attribution, old.Activity = old.Activity, nil
	old.Attribution.Model = ""
	old.Attribution.TopCause = "net_backpressure"
	old.Diagnosis = nil
	for i := range old.Timeline {
		old.Timeline[i].CausesMs = map[string]float64{"net_backpressure": 500}
	}
	for i := range old.Phases {
		old.Phases[i].TopCause = "net_backpressure"
		old.Phases[i].TopShare = 0.99
		old.Phases[i].ITLP99 = correlate.Breakdown{"net_backpressure": 1}
	}
	p := filepath.Join(t.TempDir(), "json")
	if err := old.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	back, err := result.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if !back.Legacy() || back.Attribution != nil || back.Activity == nil {
		t.Fatalf("an older result.json not migrated: %+v", back)
	}
	page = render(t, back)
	checkPage(t, page)
	root = parsePage(t, page)
	if _, _, ok := headlineCard(root, "Top cause"); ok {
		t.Error("a top cause card from an older file's activity model")
	}
	// (the legends list what the colours would mean: nothing is drawn)
	for _, id := range []string{"headline", "diagnosis", "chart-attribution", "table-attribution", "table-phases", "table-requests"} {
		if part := root.byID(id); part != nil && strings.Contains(part.text(), "Network backpressure") {
			t.Errorf("%s names the older file's activity model's cause: %s", id, part.text())
		}
	}
	if n := len(root.byID("chart-timeline").withClass("tl-cause")); n != 0 {
		t.Errorf("the timeline draws %d parts of the activity model", n)
	}
	if act := root.byID("table-activity"); act == nil || !strings.Contains(act.text(), "TCP backpressure") {
		t.Error("the older file's activity is not shown as activity")
	}
	if !back.Legacy() || back.Timeline[0].CausesMs == nil {
		t.Error("rendering changed the document")
	}
}

// A phase whose injection achieved too little says so instead of naming a
// cause; the others show what they injected and the verdict.
func TestPhaseInjectionAndVerdict(t *testing.T) {
	d := fullDocument()
	d.Phases[1].Injection = "cpu: 2 busy threads per CPU; run queue +4.1 ms per gap"
	d.Phases[1].Expected = "cpu_runqueue"
	d.Phases[1].Verdict = "named cpu_runqueue, as expected"
	d.Phases[2].Injection = "io: O_DIRECT reads; 0.2 ms more block IO per gap"
	d.Phases[2].Expected = "io_block"
	d.Phases[2].Weak = true
	d.Phases[2].Verdict = "injection too weak to judge (0.2 ms added per gap)"
	root := parsePage(t, render(t, d))
	trs := root.byID("table-phases").tags("tbody")[0].tags("tr")
	if len(trs) != len(d.Phases) {
		t.Fatalf("%d phase rows", len(trs))
	}
	cpu, io := trs[1], trs[2]
	if got := cpu.withClass("top-cause")[0].text(); got != "CPU run queue" {
		t.Errorf("cpu phase top cause %q", got)
	}
	if !strings.Contains(cpu.withClass("injection")[0].text(), "2 busy threads per CPU") || !strings.Contains(cpu.withClass("verdict")[0].text(), "as expected") {
		t.Errorf("cpu phase: %s", cpu.text())
	}
	top := io.withClass("top")[0]
	if got := top.text(); got != "injection too weak" || len(top.withClass("swatch")) > 0 {
		t.Errorf("weak phase's top cause cell: %q", got)
	}
	if !io.hasClass("weak") || !strings.Contains(io.withClass("verdict")[0].text(), "too weak to judge") {
		t.Errorf("weak phase: %s", io.text())
	}
	// without injections, no such columns
	d = fullDocument()
	if th := parsePage(t, render(t, d)).byID("table-phases").tags("th"); len(th) != 8 {
		t.Errorf("%d phase columns without injections", len(th))
	}
}
