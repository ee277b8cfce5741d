package diff

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzDiff: any two files given to `bpfbench diff` are read or refused
// with an error naming the file, never a panic; two that are read compare
// into a text and valid JSON, and a run compared with itself shows no
// change in its load figures.
func FuzzDiff(f *testing.F) {
	samples, _ := filepath.Glob("../../exporter/report/reportsample/testdata/*.json")
	var small [][]byte
	for _, p := range samples {
		if b, err := os.ReadFile(p); err == nil && len(b) < 64<<10 {
			small = append(small, b)
		}
	}
	small = append(small,
		[]byte(`{"completed":2,"ttfts":[0.1,0.2],"itls":[[0.01,0.02],[0.03]],"output_lens":[3,2],"errors":["",""],"request_throughput":4}`),
		[]byte(`{"bpfbench":{"records":[{"start_ns":0,"chunk_ns":[5000000,6000000],"last_ns":6000000,"output_tokens":2,"success":true},{"warmup":true}]},"manifest":{"bpfbench":{"version":"v1"}}}`),
		[]byte(`{"attribution":{"model":"critical_path","itl_ms":{"cpu":1}},"manifest":null,"ttfts":"x"}`),
		[]byte(`{"manifest":{"cmdline":["a"],"env":{"X":"1"}},"completed":1,"ttfts":[1],"itls":null}`),
		[]byte(`[1]`),
		[]byte("{\n\"completed\": 1,\n"),
	)
	for i, a := range small {
		f.Add(a, small[(i+1)%len(small)])
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		ra, erra := parse("a.json", a)
		rb, errb := parse("b.json", b)
		if erra != nil && !strings.Contains(erra.Error(), "a.json") || errb != nil && !strings.Contains(errb.Error(), "b.json") {
			t.Fatalf("errors do not name their file: %v; %v", erra, errb)
		}
		if erra != nil || errb != nil {
			return
		}
		for _, pair := range [][2]*Run{{ra, rb}, {ra, ra}} {
			d := Compare(pair[0], pair[1])
			var text, js bytes.Buffer
			if err := d.WriteText(&text); err != nil {
				t.Fatalf("text: %v", err)
			}
			if err := d.WriteJSON(&js); err != nil {
				t.Fatalf("JSON: %v", err)
			}
			if !json.Valid(js.Bytes()) {
				t.Fatalf("the JSON diff is not JSON: %s", js.Bytes())
			}
		}
		for _, md := range Compare(ra, ra).Metrics {
			if md.Worse || md.Delta != 0 && md.A == md.A {
				t.Fatalf("a run compared with itself: %+v", md)
			}
		}
	})
}
