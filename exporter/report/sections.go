package report

import (
	"bytes"
	"encoding/json"
	"math"
	"sort"
	"strconv"
	"strings"
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
	Rows    [][]string
	// More counts rows left out.
	More int
}

// column is a table column; Num columns are right-aligned.
type column struct {
	Name string
	Num  bool
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

func (d *Document) sectionViews() []sectionView {
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
		if raw, ok := d.Collectors[name]; ok {
			renderSection(&v, raw)
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
				v.Tables = append(v.Tables, tableOf(name, objs))
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
		// columns in a stable order: text columns first, then by name
		keys := make([]string, 0, len(rows[i]))
		for k := range rows[i] {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if !colSet[k] {
				colSet[k] = true
				order = append(order, k)
			}
		}
	}
	sort.SliceStable(order, func(i, j int) bool {
		return isTextColumn(rows, order[i]) && !isTextColumn(rows, order[j])
	})
	for _, c := range order {
		t.Columns = append(t.Columns, column{humanName(c), !isTextColumn(rows, c)})
	}
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

func isTextColumn(rows []map[string]any, col string) bool {
	for _, r := range rows {
		if _, ok := r[col].(string); ok {
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
		f, err := v.Float64()
		if err != nil {
			return v.String()
		}
		return formatUnit(f, unitOf(path))
	case float64:
		return formatUnit(v, unitOf(path))
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
