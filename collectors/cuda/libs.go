package cuda

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	schema "github.com/bpfbench/bpfbench/result"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/collectors"
)

// Library (result.CUDALibrary) is a CUDA library of a target process.
type Library = schema.CUDALibrary

type fileKey struct{ dev, ino uint64 }

func libKey(l Library) fileKey { return fileKey{l.Dev, l.Inode} }

// NotMappedError says a process maps no CUDA library. It wraps
// collectors.ErrNotApplicable.
type NotMappedError struct {
	Pid int
	// Below is how many processes below Pid were looked at too.
	Below int
}

func (e *NotMappedError) Error() string {
	if e.Below > 0 {
		return fmt.Sprintf("no CUDA library mapped by pid %d nor by the %d processes below it", e.Pid, e.Below)
	}
	return fmt.Sprintf("no CUDA library mapped by pid %d", e.Pid)
}

// Unwrap makes errors.Is(err, collectors.ErrNotApplicable) true.
func (e *NotMappedError) Unwrap() error { return collectors.ErrNotApplicable }

// isCUDALib reports whether a file name is a CUDA driver or runtime
// library (libcuda.so, libcuda.so.1, libcuda.so.550.54.15,
// libcudart.so.12, ...) and which.
func isCUDALib(name string) (api string, ok bool) {
	switch {
	case name == "libcuda.so" || strings.HasPrefix(name, "libcuda.so."):
		return "driver", true
	case name == "libcudart.so" || strings.HasPrefix(name, "libcudart.so."):
		return "runtime", true
	}
	return "", false
}

// mapping is one line of /proc/<pid>/maps that maps a file.
type mapping struct {
	start, end string // hex, as written
	offset     uint64
	dev, ino   uint64
	path       string
}

// parseMaps reads the file-backed mappings of /proc/<pid>/maps.
func parseMaps(r io.Reader) ([]mapping, error) {
	var out []mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// start-end perms offset dev inode path
		f := strings.Fields(sc.Text())
		if len(f) < 6 {
			continue
		}
		ino, err := strconv.ParseUint(f[4], 10, 64)
		if err != nil || ino == 0 {
			continue
		}
		rng := strings.SplitN(f[0], "-", 2)
		if len(rng) != 2 {
			continue
		}
		off, _ := strconv.ParseUint(f[2], 16, 64)
		var dev uint64
		if mm := strings.SplitN(f[3], ":", 2); len(mm) == 2 {
			maj, _ := strconv.ParseUint(mm[0], 16, 32)
			mnr, _ := strconv.ParseUint(mm[1], 16, 32)
			dev = unix.Mkdev(uint32(maj), uint32(mnr))
		}
		// The path is the rest of the line (it may hold spaces).
		line := sc.Text()
		idx := strings.Index(line, "/")
		if idx < 0 {
			continue
		}
		path := strings.TrimSuffix(line[idx:], " (deleted)")
		out = append(out, mapping{start: rng[0], end: rng[1], offset: off, dev: dev, ino: ino, path: path})
	}
	return out, sc.Err()
}

// FindLibraries returns the CUDA libraries process pid maps, one per file
// (several mappings of one file, or one file under two paths, count
// once), opened through /proc so that it works for processes in other
// mount namespaces (containers). overrides, when given, replace what the
// maps say: each is a path in this namespace or, failing that, in the
// target's. With nothing to probe the error is a *NotMappedError.
func FindLibraries(pid int, overrides []string) ([]Library, error) {
	var libs []Library
	seen := map[fileKey]bool{}
	add := func(l Library) {
		if seen[libKey(l)] {
			return
		}
		seen[libKey(l)] = true
		l.BuildID = buildID(l.Open)
		libs = append(libs, l)
	}
	if len(overrides) > 0 {
		for _, p := range overrides {
			l, err := openOverride(pid, p)
			if err != nil {
				return nil, err
			}
			add(l)
		}
		return libs, nil
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, fmt.Errorf("reading the mappings of pid %d: %w", pid, err)
	}
	maps, err := parseMaps(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("reading the mappings of pid %d: %w", pid, err)
	}
	mapped := map[fileKey]bool{}
	for _, m := range maps {
		api, ok := isCUDALib(filepath.Base(m.path))
		if !ok || mapped[fileKey{m.dev, m.ino}] {
			continue
		}
		mapped[fileKey{m.dev, m.ino}] = true
		l := Library{Path: m.path, API: api}
		if err := openMapped(pid, m, &l); err != nil {
			return nil, err
		}
		add(l)
	}
	if len(libs) == 0 {
		return nil, &NotMappedError{Pid: pid}
	}
	return libs, nil
}

// openMapped finds a path to the mapped file that this process can open:
// the mapping's /proc/<pid>/map_files entry (root only, follows the
// mapping even across mount namespaces and after the file was replaced),
// else the path under /proc/<pid>/root.
func openMapped(pid int, m mapping, l *Library) error {
	candidates := []string{
		fmt.Sprintf("/proc/%d/map_files/%s-%s", pid, m.start, m.end),
		fmt.Sprintf("/proc/%d/root%s", pid, m.path),
	}
	var firstErr error
	for _, c := range candidates {
		var st unix.Stat_t
		if err := unix.Stat(c, &st); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		l.Open, l.Dev, l.Inode = c, st.Dev, st.Ino
		return nil
	}
	return fmt.Errorf("opening %s mapped by pid %d: %w (run as root)", m.path, pid, firstErr)
}

func openOverride(pid int, p string) (Library, error) {
	api, ok := isCUDALib(filepath.Base(p))
	if !ok {
		api = "driver"
		if strings.Contains(filepath.Base(p), "cudart") {
			api = "runtime"
		}
	}
	for _, c := range []string{p, fmt.Sprintf("/proc/%d/root/%s", pid, strings.TrimPrefix(p, "/"))} {
		var st unix.Stat_t
		if err := unix.Stat(c, &st); err == nil {
			abs, err := filepath.Abs(c)
			if err != nil {
				abs = c
			}
			return Library{Path: p, API: api, Open: abs, Dev: st.Dev, Inode: st.Ino}, nil
		}
	}
	return Library{}, fmt.Errorf("CUDA library %s: not found here nor in the mount namespace of pid %d", p, pid)
}

// buildID reads the GNU build id note of an ELF file ("" when none).
func buildID(path string) string {
	f, err := elf.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		data, err := io.ReadAll(io.LimitReader(p.Open(), 1<<16))
		if err != nil {
			continue
		}
		for len(data) >= 12 {
			namesz := binary.LittleEndian.Uint32(data[0:])
			descsz := binary.LittleEndian.Uint32(data[4:])
			typ := binary.LittleEndian.Uint32(data[8:])
			nameEnd := 12 + align4(namesz)
			descEnd := nameEnd + align4(descsz)
			if descEnd > uint64(len(data)) {
				break
			}
			name := data[12 : 12+uint64(namesz)]
			if typ == 3 /* NT_GNU_BUILD_ID */ && bytes.Equal(bytes.TrimRight(name, "\x00"), []byte("GNU")) {
				return hex.EncodeToString(data[nameEnd : nameEnd+uint64(descsz)])
			}
			data = data[descEnd:]
		}
	}
	return ""
}

func align4(n uint32) uint64 { return (uint64(n) + 3) &^ 3 }

// symbolOffsets returns the file offset of every probed symbol the ELF
// file at path defines (exported functions), by name.
func symbolOffsets(path string) (map[string]uint64, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading ELF %s: %w", path, err)
	}
	defer f.Close()
	want := map[string]bool{}
	for _, names := range Symbols {
		for _, n := range names {
			want[n] = true
		}
	}
	out := map[string]uint64{}
	syms, _ := f.DynamicSymbols()
	st, _ := f.Symbols()
	for _, s := range append(syms, st...) {
		if !want[s.Name] || elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 || s.Section == elf.SHN_UNDEF {
			continue
		}
		if _, ok := out[s.Name]; ok {
			continue
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && p.Vaddr <= s.Value && s.Value < p.Vaddr+p.Memsz {
				out[s.Name] = s.Value - p.Vaddr + p.Off
				break
			}
		}
	}
	return out, nil
}
