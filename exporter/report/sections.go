package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The collector sections are rendered generically from their JSON so that
// a section this version does not know, or one whose shape changes, still
// shows: scalars become facts, objects are flattened into dotted names,
// lists of objects become tables. Units come from the names' suffixes
// (_seconds, _bytes, _ratio, ...).

// fact is one named value.
type fact struct {
	Name, Value string
}

// table is a list of objects rendered as rows.
type table struct {
	Title   string
	Columns []column
	// Heads are the header rows: one, or two when columns are grouped.
	Heads [][]headCell
	Rows  [][]string
	// More counts rows left out.
	More int
}

// column is a table column; Num columns are right-aligned. Columns whose
// names share their first part ("latency · p50", "latency · p99") are
// grouped under it: Group is that part and Sub the rest.
type column struct {
	Name       string
	Group, Sub string
	Num        bool
	// Key columns say which object a row is (text, ids); a table split
	// for width repeats them in each part.
	Key bool
}

// headCell is one cell of a header row.
type headCell struct {
	Text, Title      string
	Num, Group       bool
	Colspan, Rowspan int
}

// sectionView is one collector section, ready to render.
type sectionView struct {
	Name, Title string
	// Cause is the cause the section feeds, if any.
	Cause       string
	Unavailable string
	Error       string
	Facts       []fact
	Tables      []table
	Empty       bool
}

const maxTableRows = 25

func (d doc) sectionViews() []sectionView {
	var out []sectionView
	for _, name := range d.sectionNames() {
		v := sectionView{Name: name, Title: sectionTitles[name], Cause: sectionCause[name]}
		if v.Title == "" {
			v.Title = name
		}
		if d.Collection != nil {
			if why, ok := d.Collection.Unavailable[name]; ok {
				v.Unavailable = why
				if v.Unavailable == "" {
					v.Unavailable = "not available"
				}
			}
		}
		if sec := d.section(name); sec != nil {
			raw, err := json.Marshal(sec)
			if err != nil {
				v.Error = "summary: " + err.Error()
			} else {
				renderSection(&v, raw)
			}
		}
		if v.Unavailable != "" && v.Error != "" && strings.Contains(v.Unavailable, v.Error) {
			v.Error = ""
		}
		v.Empty = len(v.Facts) == 0 && len(v.Tables) == 0 && v.Error == ""
		out = append(out, v)
	}
	return out
}

func renderSection(v *sectionView, raw json.RawMessage) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		v.Error = "summary is not valid JSON: " + err.Error()
		return
	}
	obj, ok := x.(map[string]any)
	if !ok {
		if x != nil {
			v.Facts = append(v.Facts, fact{"value", formatValue("", x)})
		}
		return
	}
	if s, ok := obj["error"].(string); ok && s != "" {
		v.Error = s
	}
	if b, ok := obj["available"].(bool); ok && !b && v.Error == "" {
		v.Error = "not available"
	}
	walk(v, "", obj)
}

// walk adds the facts and tables of obj under prefix.
func walk(v *sectionView, prefix string, obj map[string]any) {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		name := k
		if prefix != "" {
			name = prefix + "." + k
		}
		if prefix == "" && (k == "error" || k == "available") {
			continue
		}
		switch val := obj[k].(type) {
		case map[string]any:
			walk(v, name, val)
		case []any:
			if len(val) == 0 {
				v.Facts = append(v.Facts, fact{humanName(name), "none"})
				continue
			}
			if objs := objects(val); objs != nil {
				v.Tables = append(v.Tables, tableOf(name, objs).split()...)
				continue
			}
			parts := make([]string, 0, len(val))
			for i, e := range val {
				if i == 20 {
					parts = append(parts, "… "+strconv.Itoa(len(val)-20)+" more")
					break
				}
				parts = append(parts, formatValue(name, e))
			}
			v.Facts = append(v.Facts, fact{humanName(name), strings.Join(parts, ", ")})
		default:
			v.Facts = append(v.Facts, fact{humanName(name), formatValue(name, val)})
		}
	}
}

func objects(xs []any) []map[string]any {
	out := make([]map[string]any, 0, len(xs))
	for _, x := range xs {
		m, ok := x.(map[string]any)
		if !ok {
			return nil
		}
		out = append(out, m)
	}
	return out
}

// flatten adds the scalar leaves of m under prefix to dst.
func flatten(prefix string, m map[string]any, dst map[string]any) {
	for k, x := range m {
		name := k
		if prefix != "" {
			name = prefix + "." + k
		}
		if sub, ok := x.(map[string]any); ok {
			flatten(name, sub, dst)
			continue
		}
		dst[name] = x
	}
}

func tableOf(name string, objs []map[string]any) table {
	t := table{Title: humanName(name)}
	rows := make([]map[string]any, len(objs))
	colSet := map[string]bool{}
	var order []string
	for i, o := range objs {
		rows[i] = map[string]any{}
		flatten("", o, rows[i])
		for k := range rows[i] {
			if !colSet[k] {
				colSet[k] = true
				order = append(order, k)
			}
		}
	}
	// columns in a stable order: text columns, then ids, then by name
	// with the parts of a distribution in their usual order
	text := map[string]bool{}
	for _, c := range order {
		text[c] = isTextColumn(rows, c)
	}
	rank := func(c string) int {
		switch {
		case text[c]:
			return 0
		case idColumns[c]:
			return 1
		}
		return 2
	}
	sort.Slice(order, func(i, j int) bool {
		if ri, rj := rank(order[i]), rank(order[j]); ri != rj {
			return ri < rj
		}
		return lessKey(order[i], order[j])
	})
	for _, c := range order {
		t.Columns = append(t.Columns, column{Name: humanName(c), Sub: humanName(c), Num: !text[c], Key: rank(c) < 2})
	}
	groupColumns(t.Columns, order)
	for i, r := range rows {
		if i == maxTableRows {
			t.More = len(rows) - maxTableRows
			break
		}
		cells := make([]string, len(order))
		for j, c := range order {
			if x, ok := r[c]; ok {
				cells[j] = formatValue(name+"."+c, x)
			}
		}
		t.Rows = append(t.Rows, cells)
	}
	return t
}

// idColumns are numeric columns that name a row's object.
var idColumns = map[string]bool{"pid": true, "tid": true, "index": true, "gpu": true, "id": true, "cpu": true}

// statOrder orders the parts of a distribution as people read them.
var statOrder = map[string]int{"count": 1, "samples": 2, "mean": 3, "min": 4, "p50": 5, "p90": 6, "p95": 7, "p99": 8, "p999": 9, "max": 10, "sum": 11}

// lessKey orders dotted names part by part: the parts of a distribution
// (count, p50, p99, max, ...) in statOrder, the others by name after them.
func lessKey(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) && i < len(bs); i++ {
		if as[i] == bs[i] {
			continue
		}
		ra, rb := statOrder[as[i]], statOrder[bs[i]]
		if ra == 0 {
			ra = len(statOrder) + 1
		}
		if rb == 0 {
			rb = len(statOrder) + 1
		}
		if ra != rb {
			return ra < rb
		}
		return as[i] < bs[i]
	}
	return len(as) < len(bs)
}

// groupColumns groups neighbouring columns whose dotted names (keys) share
// their first part.
func groupColumns(cols []column, keys []string) {
	first := func(k string) string {
		if i := strings.IndexByte(k, '.'); i > 0 {
			return k[:i]
		}
		return ""
	}
	for i := 0; i < len(cols); {
		g := first(keys[i])
		j := i + 1
		for j < len(cols) && g != "" && first(keys[j]) == g && cols[j].Num == cols[i].Num {
			j++
		}
		if j-i >= 2 {
			for k := i; k < j; k++ {
				cols[k].Group = humanName(g)
				cols[k].Sub = humanName(keys[k][len(g)+1:])
			}
		}
		i = j
	}
}

// heads builds a table's header rows from its columns.
func (t *table) heads() {
	grouped := false
	for _, c := range t.Columns {
		grouped = grouped || c.Group != ""
	}
	if !grouped {
		row := make([]headCell, len(t.Columns))
		for i, c := range t.Columns {
			row[i] = headCell{Text: c.Name, Num: c.Num}
		}
		t.Heads = [][]headCell{row}
		return
	}
	var top, sub []headCell
	for i := 0; i < len(t.Columns); {
		c := t.Columns[i]
		if c.Group == "" {
			top = append(top, headCell{Text: c.Name, Num: c.Num, Rowspan: 2})
			i++
			continue
		}
		j := i
		for j < len(t.Columns) && t.Columns[j].Group == c.Group {
			sub = append(sub, headCell{Text: t.Columns[j].Sub, Title: t.Columns[j].Name, Num: t.Columns[j].Num})
			j++
		}
		top = append(top, headCell{Text: c.Group, Group: true, Colspan: j - i})
		i = j
	}
	t.Heads = [][]headCell{top, sub}
}

// Widths, estimated, of the room a collector table has in a section of the
// page (the page is at most 1180 px wide) and of its text.
const (
	tableRoomPx  = 1060
	charPx       = 7.0
	cellPadPx    = 11
	textColChars = 16 // text cells wrap; a text column is given this much
)

// estWidth estimates column i's width in pixels: its widest cell or the
// longest word of its heading (headings wrap at spaces).
func (t *table) estWidth(i int) float64 {
	c := t.Columns[i]
	n := 0
	for _, w := range strings.Fields(c.Sub) {
		n = max(n, utf8.RuneCountInString(w))
	}
	for _, r := range t.Rows {
		n = max(n, utf8.RuneCountInString(r[i]))
	}
	if !c.Num {
		n = min(n, textColChars)
	}
	return float64(n)*charPx + cellPadPx
}

// split cuts a table too wide for the page into parts that fit, each
// with the key columns and whole column groups, and sets their headers.
func (t table) split() []table {
	var keys, rest []int
	keyW, restW := 0.0, 0.0
	for i, c := range t.Columns {
		if c.Key {
			keys = append(keys, i)
			keyW += t.estWidth(i)
		} else {
			rest = append(rest, i)
			restW += t.estWidth(i)
		}
	}
	if keyW+restW <= tableRoomPx || len(rest) < 2 {
		t.heads()
		return []table{t}
	}
	room := max(tableRoomPx-keyW, tableRoomPx/2)
	// whole groups, greedily, into parts of about equal width
	parts := int(math.Ceil(restW / room))
	target := restW / float64(parts)
	var cuts [][]int
	var cur []int
	curW := 0.0
	for k := 0; k < len(rest); {
		j := k + 1
		for j < len(rest) && t.Columns[rest[j]].Group != "" && t.Columns[rest[j]].Group == t.Columns[rest[k]].Group {
			j++
		}
		w := 0.0
		for _, i := range rest[k:j] {
			w += t.estWidth(i)
		}
		if len(cur) > 0 && (curW+w > room || curW >= target) {
			cuts = append(cuts, cur)
			cur, curW = nil, 0
		}
		cur = append(cur, rest[k:j]...)
		curW += w
		k = j
	}
	cuts = append(cuts, cur)
	out := make([]table, len(cuts))
	for p, cut := range cuts {
		idx := append(append([]int(nil), keys...), cut...)
		part := table{Title: fmt.Sprintf("%s (%d of %d)", t.Title, p+1, len(cuts))}
		for _, i := range idx {
			part.Columns = append(part.Columns, t.Columns[i])
		}
		for _, r := range t.Rows {
			cells := make([]string, len(idx))
			for j, i := range idx {
				cells[j] = r[i]
			}
			part.Rows = append(part.Rows, cells)
		}
		if p == len(cuts)-1 {
			part.More = t.More
		}
		part.heads()
		out[p] = part
	}
	return out
}

// isTextColumn reports whether a column holds text (or lists), which is
// left-aligned and may wrap, rather than numbers.
func isTextColumn(rows []map[string]any, col string) bool {
	for _, r := range rows {
		switch r[col].(type) {
		case string, []any:
			return true
		}
	}
	return false
}

// humanName turns "latency_seconds.p50" into "latency · p50".
func humanName(path string) string {
	segs := strings.Split(path, ".")
	for i, s := range segs {
		for _, suf := range []string{"_bytes_per_second", "_seconds", "_ratio", "_hertz", "_watts", "_celsius"} {
			if strings.HasSuffix(s, suf) && len(s) > len(suf) {
				s = strings.TrimSuffix(s, suf)
				break
			}
		}
		segs[i] = strings.ReplaceAll(s, "_", " ")
	}
	return strings.Join(segs, " · ")
}

// unitOf finds the unit of a dotted name from the nearest suffix.
func unitOf(path string) string {
	segs := strings.Split(path, ".")
	last := segs[len(segs)-1]
	switch last {
	case "count", "samples", "intervals", "pid", "tid", "index", "gpu", "requests", "calls", "reads", "writes":
		return ""
	}
	for i := len(segs) - 1; i >= 0; i-- {
		s := segs[i]
		switch {
		case strings.HasSuffix(s, "bytes_per_second"):
			return "B/s"
		case strings.HasSuffix(s, "seconds"):
			return "s"
		case strings.HasSuffix(s, "bytes"):
			return "B"
		case strings.HasSuffix(s, "ratio"):
			return "%"
		case strings.HasSuffix(s, "hertz"):
			return "Hz"
		case strings.HasSuffix(s, "watts"):
			return "W"
		case strings.HasSuffix(s, "celsius"):
			return "°C"
		case strings.HasSuffix(s, "_ms"):
			return "ms"
		}
	}
	return ""
}

// formatValue formats one JSON scalar by the unit its name implies.
func formatValue(path string, x any) string {
	switch v := x.(type) {
	case nil:
		return "–"
	case string:
		return v
	case bool:
		if v {
			return "yes"
		}
		return "no"
	case json.Number:
		unit := unitOf(path)
		if n, err := v.Int64(); err == nil && unit == "" {
			// exactly, beyond float64's 2^53 too (nanosecond times)
			return group(strconv.FormatInt(n, 10))
		}
		f, err := v.Float64()
		if err != nil {
			return v.String()
		}
		return formatUnit(f, unit)
	case float64:
		return formatUnit(v, unitOf(path))
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = formatValue(path, e)
		}
		return strings.Join(parts, ", ")
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

func formatUnit(f float64, unit string) string {
	if !isFinite(f) {
		return "–"
	}
	switch unit {
	case "s":
		return fmtMs(f * 1000)
	case "ms":
		return fmtMs(f)
	case "B":
		return fmtBytes(f)
	case "B/s":
		return fmtBytes(f) + "/s"
	case "%":
		return fmtPct(f)
	case "Hz":
		if f >= 1e6 {
			return strconv.FormatFloat(f/1e6, 'f', 0, 64) + " MHz"
		}
		return fmtNum(f) + " Hz"
	case "W":
		return strconv.FormatFloat(f, 'f', 1, 64) + " W"
	case "°C":
		return strconv.FormatFloat(f, 'f', 0, 64) + " °C"
	}
	if f != math.Trunc(f) && math.Abs(f) < 1 {
		return strconv.FormatFloat(f, 'g', 3, 64)
	}
	return fmtNum(f)
}

// section is a section's summary by name: the run's, or for a run that
// followed several agents, "agent/section" of that agent's.
func (d doc) section(name string) any {
	if agent, sec, ok := strings.Cut(name, "/"); ok {
		for _, a := range d.Agents {
			if a.Agent == agent {
				return nonNil(a.Summary.Section(sec))
			}
		}
		return nil
	}
	return nonNil(d.Collectors.Section(name))
}

// nonNil turns a typed nil pointer into a nil interface.
func nonNil(x any) any {
	if v := reflect.ValueOf(x); !v.IsValid() || (v.Kind() == reflect.Pointer && v.IsNil()) {
		return nil
	}
	return x
}
