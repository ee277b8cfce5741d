package owner

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
)

// Kinds of the things Note records.
const (
	// KindFile is a file this process created and removes when done (the
	// simulated server's KV offload file): a dead owner's is removed.
	KindFile = "file"
	// KindTempDir is a directory this process writes files into through
	// temporary names (internal/atomicfile): a dead owner's temporary
	// files there are removed.
	KindTempDir = "tempdir"
)

// Noted is one thing a process noted.
type Noted struct {
	Kind  string `json:"kind"`
	Value string `json:"value"`
}

// record is a process's notes file, owned-PID.json in the state directory.
type record struct {
	Owner Owner   `json:"owner"`
	Notes []Noted `json:"notes"`
}

var (
	noteMu sync.Mutex
	notes  = map[string][]Noted{} // by state directory
)

func recordPath(dir string, pid int) string {
	return filepath.Join(dir, "owned-"+strconv.Itoa(pid)+".json")
}

// Note records in dir that this process holds kind/value, to be undone
// by the reaper or the next sweep if it dies first; Forget takes it back.
func Note(dir, kind, value string) error {
	noteMu.Lock()
	defer noteMu.Unlock()
	n := Noted{kind, value}
	if slices.Contains(notes[dir], n) {
		return nil
	}
	notes[dir] = append(notes[dir], n)
	if err := writeRecord(dir); err != nil {
		return err
	}
	return Recorded(dir)
}

// Forget takes back a note (the thing was removed as planned).
func Forget(dir, kind, value string) {
	noteMu.Lock()
	defer noteMu.Unlock()
	i := slices.Index(notes[dir], Noted{kind, value})
	if i < 0 {
		return
	}
	notes[dir] = slices.Delete(notes[dir], i, i+1)
	_ = writeRecord(dir)
}

// writeRecord writes this process's notes for dir (under noteMu): a new
// file renamed over the old one.
func writeRecord(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating the state directory %s: %w", dir, err)
	}
	p := recordPath(dir, os.Getpid())
	b, _ := json.MarshalIndent(record{Owner: Self(), Notes: notes[dir]}, "", "  ")
	tmp := p + ".new"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("recording what this process holds: %w", err)
	}
	return os.Rename(tmp, p)
}

// Notes is a process's notes file read back.
type Notes struct {
	Owner Owner
	Notes []Noted
	State string // the file
}

// NotesIn lists the notes files in dir.
func NotesIn(dir string) []Notes {
	paths, _ := filepath.Glob(filepath.Join(dir, "owned-*.json"))
	var out []Notes
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var r record
		if json.Unmarshal(b, &r) != nil || r.Owner.Pid <= 0 {
			continue
		}
		out = append(out, Notes{Owner: r.Owner, Notes: r.Notes, State: p})
	}
	return out
}

// Undo undoes a dead owner's notes with fn (per note) and removes its
// file once every note is undone; the error names what was not.
func (n Notes) Undo(fn func(Noted) error) error {
	var errs []error
	for _, x := range n.Notes {
		if err := fn(x); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("%s %s: %w", x.Kind, x.Value, err))
		}
	}
	if len(errs) == 0 {
		if err := os.Remove(n.State); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
