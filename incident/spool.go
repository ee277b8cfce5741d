package incident

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/bpfbench/bpfbench/exporter/report"
	"github.com/bpfbench/bpfbench/internal/atomicfile"
	"github.com/bpfbench/bpfbench/result"
)

// Defaults of a spool.
const (
	DefaultDir      = "/var/lib/bpfbench/incidents"
	DefaultKeep     = 50
	DefaultMaxBytes = int64(256 << 20)
)

// tmpPrefix marks a bundle being written: a spool reader skips it, and a
// spool removes one left by a dead writer.
const tmpPrefix = ".tmp-"

// Spool is the directory of incident bundles, one directory each, kept
// by count and bytes.
type Spool struct {
	Dir      string
	Keep     int   // bundles kept (<= 0: DefaultKeep)
	MaxBytes int64 // bytes of all bundles (<= 0: DefaultMaxBytes)
}

// Write writes c's bundle (doc its result.json) into a new directory of
// the spool, named by its time and target: the files go into a hidden
// directory first, renamed into place whole, so a reader never sees a
// bundle half written. Then the oldest bundles past the retention are
// removed (never the new one); it returns the bundle's path and what was
// removed.
func (s Spool) Write(c Capture, doc *result.Document) (dir string, removed []string, err error) {
	if err := os.MkdirAll(s.Dir, 0o750); err != nil {
		return "", nil, fmt.Errorf("incident spool %s: %w", s.Dir, err)
	}
	name := fmt.Sprintf("%s-%s", c.At.UTC().Format("20060102T150405.000Z"), safeName(c.Target))
	tmp := filepath.Join(s.Dir, tmpPrefix+name)
	if err := os.Mkdir(tmp, 0o750); err != nil {
		return "", nil, fmt.Errorf("incident bundle: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	if err := doc.WriteFile(filepath.Join(tmp, "result.json")); err != nil {
		return "", nil, err
	}
	if err := report.WriteHTMLFile(filepath.Join(tmp, "report.html"), doc); err != nil {
		return "", nil, err
	}
	tr := Trace(c)
	if err := atomicfile.Write(filepath.Join(tmp, "trace.json"), 0o644, func(w *bufio.Writer) error {
		_, err := tr.WriteTo(w)
		return err
	}); err != nil {
		return "", nil, err
	}
	dir = filepath.Join(s.Dir, name)
	if err := os.Rename(tmp, dir); err != nil {
		return "", nil, fmt.Errorf("incident bundle: %w", err)
	}
	if d, err := os.Open(s.Dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	removed, err = s.prune(name)
	return dir, removed, err
}

// safeName is a target's name as a file name's part.
func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '_'
	}, s)
}

type bundleDir struct {
	name  string
	bytes int64
}

// bundles are the spool's bundles, oldest first (names begin with their
// time), and the hidden ones left by a writer that died.
func (s Spool) bundles() (done []bundleDir, stale []string, err error) {
	ents, err := os.ReadDir(s.Dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, nil
		}
		return nil, nil, err
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			stale = append(stale, e.Name())
			continue
		}
		b := bundleDir{name: e.Name()}
		_ = filepath.WalkDir(filepath.Join(s.Dir, e.Name()), func(_ string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				if fi, err := d.Info(); err == nil {
					b.bytes += fi.Size()
				}
			}
			return nil
		})
		done = append(done, b)
	}
	slices.SortFunc(done, func(a, b bundleDir) int { return cmp.Compare(a.name, b.name) })
	return done, stale, nil
}

// prune removes the oldest bundles while more than Keep are kept or they
// take more than MaxBytes, never keep (the one just written): a bundle is
// removed whole or not at all.
func (s Spool) prune(keep string) ([]string, error) {
	maxN, maxB := cmp.Or(s.Keep, DefaultKeep), cmp.Or(s.MaxBytes, DefaultMaxBytes)
	done, _, err := s.bundles()
	if err != nil {
		return nil, err
	}
	var total int64
	for _, b := range done {
		total += b.bytes
	}
	var removed []string
	for i := 0; i < len(done) && (len(done)-len(removed) > maxN || total > maxB); i++ {
		if done[i].name == keep {
			continue
		}
		if err := os.RemoveAll(filepath.Join(s.Dir, done[i].name)); err != nil {
			return removed, err
		}
		removed = append(removed, done[i].name)
		total -= done[i].bytes
	}
	return removed, nil
}

// Sweep removes the hidden directories of bundles whose writer died (a
// daemon killed while writing); the daemon runs it at start.
func (s Spool) Sweep() ([]string, error) {
	_, stale, err := s.bundles()
	for _, n := range stale {
		if rerr := os.RemoveAll(filepath.Join(s.Dir, n)); rerr != nil && err == nil {
			err = rerr
		}
	}
	return stale, err
}

// Summary is a bundle as `bpfbench incidents` lists it.
type Summary struct {
	Dir      string           `json:"dir"`
	Bytes    int64            `json:"bytes"`
	Incident *result.Incident `json:"incident"`
	// Err says why the bundle's result.json could not be read.
	Err string `json:"error,omitempty"`
}

// List is the spool's bundles, oldest first.
func List(dir string) ([]Summary, error) {
	done, _, err := Spool{Dir: dir}.bundles()
	if err != nil {
		return nil, err
	}
	out := make([]Summary, 0, len(done))
	for _, b := range done {
		p := filepath.Join(dir, b.name)
		sm := Summary{Dir: p, Bytes: b.bytes}
		doc, err := result.Load(filepath.Join(p, "result.json"))
		switch {
		case err != nil:
			sm.Err = err.Error()
		case doc.Incident == nil:
			sm.Err = "result.json has no incident section"
		default:
			sm.Incident = doc.Incident
		}
		out = append(out, sm)
	}
	return out, nil
}

// Line is a bundle's line of `bpfbench incidents`.
func (sm Summary) Line() string {
	if sm.Incident == nil {
		return fmt.Sprintf("%s  (unreadable: %s)", sm.Dir, sm.Err)
	}
	in := sm.Incident
	return fmt.Sprintf("%s  %-12s %-6s %s\n    %s", in.At.Local().Format(time.DateTime), in.Target, in.Trigger, sm.Dir, in.Verdict)
}
