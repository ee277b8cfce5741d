package pipeline

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bpfbench/bpfbench/correlate/critpath"
	"github.com/bpfbench/bpfbench/result"
)

// FuzzGapsFile: a run directory's gaps file (another run's, given to
// `report` or as a --baseline) is read or refused with an error naming
// it, never a panic; the gaps read are written out and read back the
// same, and rebuild an attribution without a panic.
func FuzzGapsFile(f *testing.F) {
	names, _ := json.Marshal(critpath.CauseNames())
	row := func(vals ...int64) string {
		r := make([]int64, 5+critpath.NumCauses)
		copy(r, vals)
		b, _ := json.Marshal(r)
		return string(b)
	}
	head := fmt.Sprintf(`{"format":%q,"causes":%s,"run_start_ns":1000,"phases":[{"name":"quiet","from_ns":0,"to_ns":5000},{"name":"cpu","from_ns":5000,"to_ns":9000}]}`, gapsFormat, names)
	f.Add([]byte(head + "\n" + row(0, 0, 1000, 2000, 1, 500) + "\n" + row(0, 1, 2000, 9000, 0, 0, 3000) + "\n" + row(1, 0, 6000, 6000) + "\n"))
	f.Add([]byte(head + "\n" + row(-1, -1, 9000, 1000, 7, -5) + "\n[1,2]\n"))
	f.Add([]byte(fmt.Sprintf(`{"format":%q,"causes":["cpu","nonesuch"]}`, gapsFormat) + "\n"))
	f.Add([]byte(`{"format":"bpfbench-gaps/0"}`))
	f.Add([]byte(fmt.Sprintf(`{"format":%q,"causes":[]}`, gapsFormat) + "\n[0,0,0,1,0]\n"))
	f.Fuzz(func(t *testing.T, plain []byte) {
		dir := t.TempDir()
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		zw.Write(plain)
		zw.Close()
		if err := os.WriteFile(filepath.Join(dir, GapsFile), gz.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		h, gaps, err := readGaps(dir)
		if err != nil {
			if !strings.Contains(err.Error(), GapsFile) {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		var phases []critPhase
		for _, p := range h.Phases {
			phases = append(phases, critPhase{name: p.Name, from: p.FromNs, to: p.ToNs})
		}
		dir2 := t.TempDir()
		var out bytes.Buffer
		bw := bufio.NewWriter(&out)
		if err := encodeGaps(bw, h.RunStartNs, phases, slices.Values(gaps)); err != nil {
			t.Fatal(err)
		}
		bw.Flush()
		if err := os.WriteFile(filepath.Join(dir2, GapsFile), out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		_, back, err := readGaps(dir2)
		if err != nil || !slices.Equal(gaps, back) {
			t.Fatalf("written out and read back: %d gaps (%v), %d read", len(back), err, len(gaps))
		}
		doc := &result.Document{CriticalPath: &result.CriticalPath{Gaps: max(len(gaps), 1), NormalTTFTMs: map[string]float64{"cpu": 1}, NormalITLMs: map[string]float64{"cpu": 0.5}}}
		if err := RebuildAttribution(doc, dir); err != nil {
			t.Fatalf("rebuilding from gaps read once: %v", err)
		}
	})
}
