// Package manifest records what makes a run reproducible: the server's
// binary, command line and the environment keys that change its behaviour,
// the model files and CUDA libraries it has open, the GPUs and driver, the
// kernel, the CPU and its governor, the cgroup limits of the process, and
// bpfbench's own version, arguments and dataset. `bpfbench run` writes it
// into result.json under "manifest"; `bpfbench diff` compares two of them.
//
// Collect never fails as a whole: each part it cannot read (a process that
// is gone, a path it may not open, a file the kernel does not offer) leaves
// its field empty and adds a note.
package manifest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bpfbench/bpfbench/internal/version"
)

// Schema is the version of the manifest's JSON layout. It changes when a
// field is renamed or changes meaning, not when one is added.
const Schema = 1

// Manifest is a run's joint fingerprint: what would have to be the same
// for a second run to measure the same thing.
type Manifest struct {
	Schema      int       `json:"schema"`
	CollectedAt time.Time `json:"collected_at"`
	Pid         int       `json:"pid"`
	// Binary is the server's executable (/proc/PID/exe), hashed in full.
	Binary *File `json:"binary,omitempty"`
	// Cmdline is the server's argv, its secrets redacted (RedactArgs).
	Cmdline []string `json:"cmdline,omitempty"`
	// Env holds the server's environment variables whose names are on the
	// allow-list (EnvAllowed); the value of a key that looks like a secret
	// (EnvSecret) is replaced by SecretValue. It is null when the
	// environment could not be read, {} when no key of the list is set.
	Env map[string]string `json:"env"`
	// Models are the model files the server maps or holds open (ModelExts).
	Models []File `json:"models,omitempty"`
	// CUDALibs are the CUDA and GPU-runtime libraries the server maps.
	CUDALibs []Lib `json:"cuda_libs,omitempty"`
	// GPU is what NVML says (driver, devices), when a GPUSource was given
	// and answered.
	GPU    *GPU    `json:"gpu,omitempty"`
	Kernel *Kernel `json:"kernel,omitempty"`
	CPU    *CPU    `json:"cpu,omitempty"`
	Cgroup *Cgroup `json:"cgroup,omitempty"`
	// Bpfbench is the observer: its build and the arguments it ran with.
	Bpfbench Bpfbench `json:"bpfbench"`
	// Dataset is the load's prompts: name, file hash and seed.
	Dataset *Dataset `json:"dataset,omitempty"`
	// SampledHashScheme names how every sampled_sha256 was computed, so
	// that hashes from another scheme are not compared as if they differed.
	SampledHashScheme string `json:"sampled_hash_scheme"`
	// Notes says what could not be read, and why.
	Notes []string `json:"notes,omitempty"`
}

// File is one file the server uses.
type File struct {
	// Path is where the file is (or was: see Deleted).
	Path string `json:"path"`
	// Deleted is set when the file has been removed or replaced since the
	// server opened it (the kernel's " (deleted)" suffix); its content is
	// then read through the process's own reference to it.
	Deleted bool      `json:"deleted,omitempty"`
	Size    int64     `json:"size"`
	ModTime time.Time `json:"mtime,omitzero"`
	// SHA256 is the hash of the whole content (the binary only).
	SHA256 string `json:"sha256,omitempty"`
	// SampledSHA256 is a hash of the size and of sampled blocks of the
	// content (SampledHashScheme), so that a 100 GB model reads 4 MiB.
	SampledSHA256 string `json:"sampled_sha256,omitempty"`
	// Via says how the file was found: "exe", "fd", "maps".
	Via string `json:"via,omitempty"`
	// Error says why the content (or the size) could not be read.
	Error string `json:"error,omitempty"`
}

// Lib is a mapped shared library.
type Lib struct {
	// Name is the library's base name without version ("libcudart").
	Name string `json:"name"`
	Path string `json:"path"`
	// Soname is the ELF DT_SONAME ("libcudart.so.12"), when readable.
	Soname string `json:"soname,omitempty"`
	// Version is the file name's version suffix ("12.4.127"), or the
	// soname's when the file name has none.
	Version       string `json:"version,omitempty"`
	Size          int64  `json:"size"`
	SampledSHA256 string `json:"sampled_sha256,omitempty"`
	Error         string `json:"error,omitempty"`
}

// GPU is the driver and the devices, as NVML reports them.
type GPU struct {
	DriverVersion string `json:"driver_version,omitempty"`
	NVMLVersion   string `json:"nvml_version,omitempty"`
	// CUDADriverVersion is nvmlSystemGetCudaDriverVersion (e.g. 12040).
	CUDADriverVersion int         `json:"cuda_driver_version,omitempty"`
	Devices           []GPUDevice `json:"devices,omitempty"`
}

// GPUDevice is one device.
type GPUDevice struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	Name  string `json:"name,omitempty"`
}

// GPUSource answers the GPU part of a manifest. The package does not link
// NVML: the caller passes what its GPU collector knows.
type GPUSource interface {
	ManifestGPU() (*GPU, error)
}

// GPUSourceFunc adapts a function to GPUSource.
type GPUSourceFunc func() (*GPU, error)

// ManifestGPU calls f.
func (f GPUSourceFunc) ManifestGPU() (*GPU, error) { return f() }

// Kernel is uname's release and version.
type Kernel struct {
	Release string `json:"release"`
	Version string `json:"version,omitempty"`
}

// CPU is the host's processors.
type CPU struct {
	Model string `json:"model,omitempty"`
	// Count is the logical CPUs listed in /proc/cpuinfo.
	Count int `json:"count"`
	// Governors counts the CPUs per cpufreq scaling governor
	// ({"performance": 64}); absent when the kernel offers no cpufreq.
	Governors map[string]int `json:"governors,omitempty"`
}

// Cgroup is the server's cgroup and its limits.
type Cgroup struct {
	// Version is 1 or 2.
	Version int    `json:"version"`
	Path    string `json:"path"`
	// CPUMax is cgroup v2's cpu.max ("max 100000", "200000 100000"), or
	// v1's quota and period written the same way.
	CPUMax string `json:"cpu_max,omitempty"`
	// CPULimit is the quota in CPUs (2.0), 0 when unlimited.
	CPULimit float64 `json:"cpu_limit,omitempty"`
	// MemoryMax is memory.max or memory.limit_in_bytes ("max" when unlimited).
	MemoryMax string `json:"memory_max,omitempty"`
}

// Bpfbench is the observer's build and arguments.
type Bpfbench struct {
	Version   string   `json:"version"`
	Revision  string   `json:"revision,omitempty"`
	GoVersion string   `json:"go_version,omitempty"`
	Args      []string `json:"args,omitempty"`
}

// Dataset is the load's prompts.
type Dataset struct {
	Name string `json:"name"`
	Path string `json:"path,omitempty"`
	// SHA256 is the hash of what Hashed names: the dataset file (whole
	// up to 1 GiB, otherwise SampledSHA256), or a generated dataset's
	// prompts in order, so a change of either shows in a diff.
	SHA256        string `json:"sha256,omitempty"`
	Hashed        string `json:"hashed,omitempty"` // "file" or "prompts"
	SampledSHA256 string `json:"sampled_sha256,omitempty"`
	Seed          uint64 `json:"seed"`
	// Params are what else shapes the prompts (input_len, output_len,
	// range_ratio, ...), as strings.
	Params map[string]string `json:"params,omitempty"`
}

// Options says what Collect cannot find on its own.
type Options struct {
	// Args are bpfbench's own arguments (os.Args); the manifest records
	// them with their secrets redacted (RedactArgs).
	Args []string
	// Dataset is the load's dataset (DatasetOf builds one), or nil.
	Dataset *Dataset
	// GPU answers the GPU part, or nil on a host without NVML.
	GPU GPUSource
	// ProcDir and SysDir are where /proc and /sys are (default "/proc"
	// and "/sys"; a host's /proc mounted into a container, or a test's
	// fixture).
	ProcDir, SysDir string
}

// Collect builds the manifest of process pid. It returns every problem it
// met; each is also in the manifest's Notes.
func Collect(pid int, opts Options) (*Manifest, []error) {
	c := &collector{pid: pid, proc: opts.ProcDir, sys: opts.SysDir}
	if c.proc == "" {
		c.proc = "/proc"
	}
	if c.sys == "" {
		c.sys = "/sys"
	}
	v := version.Get()
	m := &Manifest{
		Schema: Schema, CollectedAt: time.Now().UTC(), Pid: pid,
		Bpfbench:          Bpfbench{Version: v.Version, Revision: v.Revision, GoVersion: v.GoVersion, Args: RedactArgs(opts.Args)},
		Dataset:           opts.Dataset,
		SampledHashScheme: SampledHashScheme,
	}
	c.m = m
	if _, err := os.Stat(c.pidPath()); err != nil {
		c.note(fmt.Errorf("reading process %d: %w", pid, err))
	} else {
		c.binary()
		c.cmdline()
		c.environ()
		c.files()
		c.cgroup()
	}
	c.kernel()
	c.cpu()
	if opts.GPU != nil {
		g, err := opts.GPU.ManifestGPU()
		if err != nil {
			c.note(fmt.Errorf("reading the GPUs: %w", err))
		}
		m.GPU = g
	}
	return m, c.errs
}

type collector struct {
	pid       int
	proc, sys string
	m         *Manifest
	errs      []error
}

func (c *collector) pidPath(parts ...string) string {
	return filepath.Join(append([]string{c.proc, fmt.Sprint(c.pid)}, parts...)...)
}

func (c *collector) note(err error) {
	c.errs = append(c.errs, err)
	c.m.Notes = append(c.m.Notes, err.Error())
}

// binary records /proc/PID/exe. The content is read through the magic
// link, which still reaches a binary that was deleted or replaced.
func (c *collector) binary() {
	exe := c.pidPath("exe")
	target, err := os.Readlink(exe)
	if err != nil {
		c.note(fmt.Errorf("reading the binary of process %d: %w", c.pid, err))
		return
	}
	f := &File{Via: "exe"}
	f.Path, f.Deleted = cutDeleted(target)
	if f.Deleted {
		c.note(fmt.Errorf("the binary of process %d, %s, was deleted or replaced since it started: hashed through %s", c.pid, f.Path, exe))
	}
	c.m.Binary = f
	fi, err := os.Stat(exe)
	if err != nil {
		f.Error = err.Error()
		c.note(fmt.Errorf("reading the binary %s: %w", f.Path, err))
		return
	}
	f.Size, f.ModTime = fi.Size(), fi.ModTime().UTC()
	sum, err := fileSHA256(exe)
	if err != nil {
		f.Error = err.Error()
		c.note(fmt.Errorf("hashing the binary %s: %w", f.Path, err))
		return
	}
	f.SHA256 = sum
}

func (c *collector) cmdline() {
	b, err := os.ReadFile(c.pidPath("cmdline"))
	if err != nil {
		c.note(fmt.Errorf("reading the command line of process %d: %w", c.pid, err))
		return
	}
	c.m.Cmdline = RedactArgs(splitNUL(b))
}

func (c *collector) environ() {
	b, err := os.ReadFile(c.pidPath("environ"))
	if err != nil {
		c.note(fmt.Errorf("reading the environment of process %d: %w", c.pid, err))
		return
	}
	c.m.Env = FilterEnv(splitNUL(b))
}

func splitNUL(b []byte) []string {
	var out []string
	for _, s := range strings.Split(string(b), "\x00") {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// cutDeleted strips the kernel's " (deleted)" suffix of a link target.
func cutDeleted(target string) (string, bool) {
	p, ok := strings.CutSuffix(target, " (deleted)")
	return p, ok
}

// errNotRegular says a model-like path is not a regular file.
var errNotRegular = errors.New("not a regular file")
