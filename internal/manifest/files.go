package manifest

import (
	"bufio"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// ModelExts are the extensions of the files a manifest treats as models.
var ModelExts = []string{".gguf", ".safetensors", ".bin", ".pt", ".pth", ".onnx", ".engine", ".plan"}

// CUDALibPrefixes are the base names of the libraries a manifest lists as
// CUDA libraries (a library matches when its name starts with one).
var CUDALibPrefixes = []string{
	"libcuda", "libcublas", "libnccl", "libcudnn", "libnvrtc", "libnvidia-", "libcufft",
	"libcurand", "libcusparse", "libcusolver", "libnvJitLink", "libnvToolsExt", "libcupti",
	"libtorch_cuda", "libc10_cuda", "libggml-cuda", "libnvinfer", "libnvonnxparser",
}

// IsModelPath says whether a path has a model file's extension.
func IsModelPath(p string) bool {
	ext := strings.ToLower(filepath.Ext(p))
	for _, e := range ModelExts {
		if ext == e {
			return true
		}
	}
	return false
}

// LibName splits a shared library's file name into its name and the
// version after ".so." ("libcudart.so.12.4.127" → "libcudart", "12.4.127");
// ok is false for a file that is not a shared library.
func LibName(p string) (name, ver string, ok bool) {
	base := filepath.Base(p)
	i := strings.Index(base, ".so")
	if i <= 0 {
		return "", "", false
	}
	rest := base[i+3:]
	if rest != "" && rest[0] != '.' {
		return "", "", false
	}
	return base[:i], strings.TrimPrefix(rest, "."), true
}

// IsCUDALib says whether a path is one of the CUDA libraries.
func IsCUDALib(p string) bool {
	name, _, ok := LibName(p)
	if !ok {
		return false
	}
	for _, pre := range CUDALibPrefixes {
		if strings.HasPrefix(name, pre) {
			return true
		}
	}
	return false
}

// Mapping is one file-backed line of /proc/PID/maps.
type Mapping struct {
	// Range is the address range as the maps file writes it ("7f00-7f80"),
	// which is also its name under /proc/PID/map_files.
	Range string
	Path  string
}

// ParseMaps reads the file-backed mappings of a /proc/PID/maps.
func ParseMaps(r *bufio.Scanner) []Mapping {
	var out []Mapping
	for r.Scan() {
		line := r.Text()
		rest := line
		var fields [5]string
		ok := true
		for i := range fields {
			rest = strings.TrimLeft(rest, " ")
			j := strings.IndexByte(rest, ' ')
			if j < 0 {
				ok = false
				break
			}
			fields[i], rest = rest[:j], rest[j:]
		}
		path := strings.TrimLeft(rest, " ")
		if !ok || !strings.HasPrefix(path, "/") {
			continue
		}
		out = append(out, Mapping{Range: fields[0], Path: path})
	}
	return out
}

// found is a model or library and the path its content is read through.
type found struct {
	path, via, readPath string
	deleted             bool
}

// files finds the models and CUDA libraries of the process in its fds and
// maps.
func (c *collector) files() {
	models := map[string]found{}
	libs := map[string]found{}
	fdDir := c.pidPath("fd")
	if ents, err := os.ReadDir(fdDir); err != nil {
		c.note(fmt.Errorf("listing the open files of process %d: %w", c.pid, err))
	} else {
		for _, e := range ents {
			link := filepath.Join(fdDir, e.Name())
			target, err := os.Readlink(link)
			if err != nil || !strings.HasPrefix(target, "/") {
				continue
			}
			p, del := cutDeleted(target)
			if IsModelPath(p) {
				if _, dup := models[p]; !dup {
					models[p] = found{p, "fd", link, del}
				}
			}
		}
	}
	mf, err := os.Open(c.pidPath("maps"))
	if err != nil {
		c.note(fmt.Errorf("reading the mappings of process %d: %w", c.pid, err))
	} else {
		sc := bufio.NewScanner(mf)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for _, mp := range ParseMaps(sc) {
			p, del := cutDeleted(mp.Path)
			via := c.pidPath("map_files", mp.Range)
			switch {
			case IsModelPath(p):
				if _, dup := models[p]; !dup {
					models[p] = found{p, "maps", via, del}
				}
			case IsCUDALib(p):
				if _, dup := libs[p]; !dup {
					libs[p] = found{p, "maps", via, del}
				}
			}
		}
		if err := sc.Err(); err != nil {
			c.note(fmt.Errorf("reading the mappings of process %d: %w", c.pid, err))
		}
		mf.Close()
	}
	for _, p := range sortedKeys(models) {
		c.m.Models = append(c.m.Models, c.model(models[p]))
	}
	for _, p := range sortedKeys(libs) {
		c.m.CUDALibs = append(c.m.CUDALibs, c.lib(libs[p]))
	}
}

func sortedKeys(m map[string]found) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// open opens a found file through the process's reference to it, or else
// (map_files needs CAP_SYS_ADMIN) by its path when it was not deleted.
func open(f found) (*os.File, error) {
	fd, err := os.Open(f.readPath)
	if err == nil || f.deleted {
		return fd, err
	}
	fd, err2 := os.Open(f.path)
	if err2 != nil {
		return nil, fmt.Errorf("%w (and through %s: %v)", err2, f.readPath, err)
	}
	return fd, nil
}

func (c *collector) model(fo found) File {
	f := File{Path: fo.path, Via: fo.via, Deleted: fo.deleted}
	if fo.deleted {
		c.note(fmt.Errorf("model file %s was deleted or replaced since process %d opened it: read through %s", fo.path, c.pid, fo.readPath))
	}
	fd, err := open(fo)
	if err != nil {
		// The size may still be known without reading the content.
		if fi, serr := os.Stat(fo.readPath); serr == nil {
			f.Size, f.ModTime = fi.Size(), fi.ModTime().UTC()
		}
		f.Error = err.Error()
		c.note(fmt.Errorf("reading model file %s: %w", fo.path, err))
		return f
	}
	defer fd.Close()
	fi, err := fd.Stat()
	if err != nil {
		f.Error = err.Error()
		c.note(fmt.Errorf("reading model file %s: %w", fo.path, err))
		return f
	}
	f.Size, f.ModTime = fi.Size(), fi.ModTime().UTC()
	if !fi.Mode().IsRegular() {
		f.Error = errNotRegular.Error()
		c.note(fmt.Errorf("model file %s: %w", fo.path, errNotRegular))
		return f
	}
	if f.SampledSHA256, err = SampledSHA256(fd, f.Size); err != nil {
		f.Error = err.Error()
		c.note(fmt.Errorf("hashing model file %s: %w", fo.path, err))
	}
	return f
}

func (c *collector) lib(fo found) Lib {
	name, ver, _ := LibName(fo.path)
	l := Lib{Name: name, Path: fo.path, Version: ver}
	fd, err := open(fo)
	if err != nil {
		l.Error = err.Error()
		c.note(fmt.Errorf("reading CUDA library %s: %w", fo.path, err))
		return l
	}
	defer fd.Close()
	fi, err := fd.Stat()
	if err == nil {
		l.Size = fi.Size()
		l.SampledSHA256, err = SampledSHA256(fd, l.Size)
	}
	if err != nil {
		l.Error = err.Error()
		c.note(fmt.Errorf("hashing CUDA library %s: %w", fo.path, err))
		return l
	}
	if ef, err := elf.NewFile(fd); err == nil {
		if s, err := ef.DynString(elf.DT_SONAME); err == nil && len(s) > 0 {
			l.Soname = s[0]
		}
	}
	if l.Version == "" && l.Soname != "" {
		_, l.Version, _ = LibName(l.Soname)
	}
	return l
}

// atoi64 parses a decimal, or -1.
func atoi64(s string) int64 {
	v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return -1
	}
	return v
}
