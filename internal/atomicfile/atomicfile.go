// Package atomicfile writes a file so that its path holds either what it
// held before or the whole new content, never a part of it: the bytes go
// to a temporary file in the same directory (".NAME.tmp-PID-N"), which is
// synced, renamed over the path, and the directory synced. A full disk, an
// error or a kill leaves no truncated file under the real name.
//
// While it is written, a temporary file is held under an exclusive flock.
// A writer that was killed leaves its temporary file behind, unlocked:
// Clean (which every Create runs on its directory) removes those, and only
// those, so two runs writing into one directory never remove each other's.
package atomicfile

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// tmpPattern matches the temporary names of Create: .NAME.tmp-PID-N.
var tmpPattern = regexp.MustCompile(`^\..+\.tmp-[0-9]+-[0-9]+$`)

// open are the temporary files this process is writing: Clean leaves them
// alone whatever the file system's locks say (NFS emulates flock with
// per-process POSIX locks, which do not conflict within a process).
var open sync.Map

// legacyPattern matches the partial traces of earlier bpfbench releases,
// which took no lock: they are removed once LegacyAge old.
var legacyPattern = regexp.MustCompile(`^\.trace\.json\.partial-[0-9]+$|^\.bpfbench-write-test-[0-9]+$`)

// onTempDir is called with the directory of every Create (SetOnTempDir).
var onTempDir atomic.Pointer[func(dir string)]

// SetOnTempDir sets a function called with the directory of every Create,
// before its temporary file exists: the CLI notes the directory, so that
// what a killed writer leaves there is removed without waiting for the
// next write into it.
func SetOnTempDir(fn func(dir string)) { onTempDir.Store(&fn) }

// LegacyAge is how long a partial file of an earlier release (which took no
// lock) must have gone unmodified before Clean removes it.
const LegacyAge = 10 * time.Minute

// File is a file being written under a temporary name. Write to it, then
// Commit; Close without Commit drops it. Close is idempotent, so
// `defer f.Close()` is always right.
type File struct {
	f    *os.File
	path string
	tmp  string
	err  error // the first write error
	done bool
}

// Create starts writing path (with perm, less the umask, as os.Create
// would) under a temporary name in its directory. It first removes the
// stale temporary files of killed writers there (Clean).
func Create(path string, perm os.FileMode) (*File, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	_, _ = Clean(dir)
	if h := onTempDir.Load(); h != nil {
		(*h)(dir)
	}
	prefix := filepath.Join(dir, "."+base+".tmp-"+strconv.Itoa(os.Getpid())+"-")
	for try := 0; ; try++ {
		tmp := prefix + strconv.FormatUint(uint64(rand.Uint32()), 10)
		f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
		if errors.Is(err, os.ErrExist) && try < 100 {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("writing %s: %w", path, cause(err, tmp))
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
			f.Close()
			os.Remove(tmp)
			return nil, fmt.Errorf("writing %s: locking %s: %w", path, tmp, err)
		}
		// A Clean of another process may have taken the file for a dead
		// writer's between its creation and the lock: then it is unlinked.
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err == nil && st.Nlink == 0 && try < 100 {
			f.Close()
			continue
		}
		open.Store(key(tmp), true)
		return &File{f: f, path: path, tmp: tmp}, nil
	}
}

// Name is the path the file is committed to.
func (f *File) Name() string { return f.path }

// Write writes to the temporary file; the first error is kept and returned
// again by Commit.
func (f *File) Write(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	n, err := f.f.Write(p)
	if err != nil {
		f.err = err
	}
	return n, err
}

// Commit syncs the file, renames it over its path and syncs the directory.
// On any error the temporary file is removed and the path left as it was;
// the error says which file and why ("writing DIR/result.json: no space
// left on device").
func (f *File) Commit() error {
	if f.done {
		return fmt.Errorf("writing %s: already closed", f.path)
	}
	err := f.err
	if err == nil {
		err = f.f.Sync()
	}
	if err == nil {
		// Renamed while still open, so still locked: no Clean can take it.
		err = os.Rename(f.tmp, f.path)
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", f.path, cause(err, f.tmp))
	}
	f.done = true
	open.Delete(key(f.tmp))
	derr := syncDir(filepath.Dir(f.path))
	if cerr := f.f.Close(); derr == nil {
		derr = cerr
	}
	if derr != nil {
		return fmt.Errorf("writing %s: %w", f.path, cause(derr, f.tmp))
	}
	return nil
}

// Fail drops the file and returns err as an error of writing its path
// ("writing DIR/trace.json: no space left on device"): for a writer that
// failed on its way to Commit.
func (f *File) Fail(err error) error {
	f.Close()
	return fmt.Errorf("writing %s: %w", f.path, cause(err, f.tmp))
}

// Close drops the file unless it was committed.
func (f *File) Close() error {
	if f.done {
		return nil
	}
	f.done = true
	os.Remove(f.tmp)
	open.Delete(key(f.tmp))
	return f.f.Close()
}

// Write writes path atomically with what fn writes to a buffered writer
// (whose errors are sticky: Write flushes it and reports the first).
func Write(path string, perm os.FileMode, fn func(w *bufio.Writer) error) error {
	f, err := Create(path, perm)
	if err != nil {
		return err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	err = fn(bw)
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	if err != nil {
		return f.Fail(err)
	}
	return f.Commit()
}

// WriteFile writes data to path atomically.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return Write(path, perm, func(w *bufio.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Clean removes from dir the temporary files that killed writers left: a
// name of Create's whose lock is free (its writer is gone), and the partial
// files of earlier releases once LegacyAge old. It returns the names it
// removed. A file another process is writing is never removed.
func Clean(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range ents {
		name := e.Name()
		if !e.Type().IsRegular() || len(name) == 0 || name[0] != '.' {
			continue
		}
		legacy := legacyPattern.MatchString(name)
		if !legacy && !tmpPattern.MatchString(name) {
			continue
		}
		p := filepath.Join(dir, name)
		if _, mine := open.Load(key(p)); mine {
			continue
		}
		ok, err := removeIfUnlocked(p, legacy)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			removed = append(removed, name)
		}
	}
	return removed, errors.Join(errs...)
}

// removeIfUnlocked removes p when no writer holds its lock (and, for a
// legacy file, when it is LegacyAge old).
func removeIfUnlocked(p string, legacy bool) (bool, error) {
	f, err := os.Open(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return false, nil // being written
		}
		return false, fmt.Errorf("locking %s: %w", p, err)
	}
	if legacy {
		st, err := f.Stat()
		if err != nil || time.Since(st.ModTime()) < LegacyAge {
			return false, err
		}
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	return true, nil
}

// key is p as the open map holds it.
func key(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	// Some file systems cannot sync a directory; the rename stands.
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOTSUP) {
		return nil
	}
	return err
}

// cause is err without the temporary file's name: the error of an
// operation on tmp is reported against the real path by the caller.
func cause(err error, tmp string) error {
	var pe *os.PathError
	if errors.As(err, &pe) && pe.Path == tmp {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) && le.Old == tmp {
		return le.Err
	}
	return err
}
