package manifest

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/internal/privtest"
)

// envCollect makes the test binary a collector: it prints the manifest of
// the pid in the variable and exits (the unreadable-path test runs it
// under another user).
const envCollect = "BPFBENCH_MANIFEST_TEST_COLLECT"

func TestMain(m *testing.M) {
	if s := os.Getenv(envCollect); s != "" {
		pid, _ := strconv.Atoi(s)
		man, _ := Collect(pid, Options{})
		if err := json.NewEncoder(os.Stdout).Encode(man); err != nil {
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// writeModel writes size bytes of a known pattern.
func writeModel(t *testing.T, path string, size int) {
	t.Helper()
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i*7 + i>>13)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// startSleep starts bin (a sleep) with env and extra files (fd 3, 4, ...)
// and kills it at the end of the test.
func startSleep(t *testing.T, bin string, env []string, extra []*os.File, cred *syscall.Credential) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, "300")
	cmd.Env = env
	cmd.ExtraFiles = extra
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	// Start returns once exec has closed the close-on-exec pipe, which is
	// before the kernel has laid out the new argv: until then
	// /proc/PID/cmdline reads empty. Wait for the new image's argv.
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid))
		if len(b) > 0 && strings.HasPrefix(string(b), bin) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) has no argv after 5s: %q", bin, cmd.Process.Pid, b)
		}
		time.Sleep(time.Millisecond)
	}
	return cmd
}

func sleepBinary(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatalf("this test needs sleep(1): %v", err)
	}
	p, err = filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func sha256File(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func modelOf(m *Manifest, path string) *File {
	for i := range m.Models {
		if m.Models[i].Path == path {
			return &m.Models[i]
		}
	}
	return nil
}

func hasNote(m *Manifest, sub string) bool {
	for _, n := range m.Notes {
		if strings.Contains(n, sub) {
			return true
		}
	}
	return false
}

// TestCollectChild: a child with a chosen environment and an open model
// file; the manifest has its binary, argv, filtered environment and the
// model with the sampled hash of its content.
func TestCollectChild(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "x.gguf")
	writeModel(t, model, 5<<20+12345)
	mf, err := os.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	defer mf.Close()
	bin := sleepBinary(t)
	env := []string{
		"CUDA_VISIBLE_DEVICES=1,0", "OMP_NUM_THREADS=8", "NCCL_DEBUG=INFO",
		"HF_TOKEN=hf_verysecret", "VLLM_API_KEY=sk-verysecret", "MY_PASSWORD=hunter2",
		"HOME=/root", "UNRELATED=1",
	}
	cmd := startSleep(t, bin, env, []*os.File{mf}, nil)
	m, errs := Collect(cmd.Process.Pid, Options{Args: []string{"bpfbench", "run"}})
	t.Logf("notes: %v", errs)

	if m.Binary == nil || m.Binary.Path != bin || m.Binary.Deleted {
		t.Fatalf("binary = %+v, want %s", m.Binary, bin)
	}
	if fi, _ := os.Stat(bin); m.Binary.Size != fi.Size() {
		t.Errorf("binary size %d, want %d", m.Binary.Size, fi.Size())
	}
	if want := sha256File(t, bin); m.Binary.SHA256 != want {
		t.Errorf("binary sha256 %s, want %s", m.Binary.SHA256, want)
	}
	if strings.Join(m.Cmdline, " ") != bin+" 300" {
		t.Errorf("cmdline %q", m.Cmdline)
	}
	wantEnv := map[string]string{
		"CUDA_VISIBLE_DEVICES": "1,0", "OMP_NUM_THREADS": "8", "NCCL_DEBUG": "INFO",
		"HF_TOKEN": SecretValue, "VLLM_API_KEY": SecretValue,
	}
	if fmt.Sprint(m.Env) != fmt.Sprint(wantEnv) {
		t.Errorf("env = %v, want %v", m.Env, wantEnv)
	}
	b, _ := json.Marshal(m)
	for _, secret := range []string{"verysecret", "hunter2", "MY_PASSWORD", "UNRELATED"} {
		if strings.Contains(string(b), secret) {
			t.Errorf("the manifest holds %q: %s", secret, b)
		}
	}
	f := modelOf(m, model)
	if f == nil {
		t.Fatalf("model %s not found in %+v", model, m.Models)
	}
	want, size, err := SampledFileSHA256(model)
	if err != nil {
		t.Fatal(err)
	}
	if f.Size != size || f.SampledSHA256 != want || f.Via != "fd" || f.Error != "" || f.Deleted {
		t.Errorf("model = %+v, want size %d sampled_sha256 %s via fd", f, size, want)
	}
	if m.Bpfbench.Version == "" || strings.Join(m.Bpfbench.Args, " ") != "bpfbench run" {
		t.Errorf("bpfbench = %+v", m.Bpfbench)
	}
	if m.Kernel == nil || m.Kernel.Release == "" || m.CPU == nil || m.CPU.Count == 0 {
		t.Errorf("kernel %+v, cpu %+v", m.Kernel, m.CPU)
	}
	if m.Cgroup == nil {
		t.Errorf("no cgroup")
	}
	if m.SampledHashScheme != SampledHashScheme || m.Schema != Schema {
		t.Errorf("scheme %q schema %d", m.SampledHashScheme, m.Schema)
	}
}

// TestSampledHash: the hash changes with a byte in a sampled block and with
// the size, and not with a byte between the samples.
func TestSampledHash(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "m.safetensors")
	const size = 5<<20 + 12345
	writeModel(t, p, size)
	h0, _, err := SampledFileSHA256(p)
	if err != nil {
		t.Fatal(err)
	}
	if h1, _, _ := SampledFileSHA256(p); h1 != h0 {
		t.Fatalf("hash not stable: %s, %s", h0, h1)
	}
	rs := SampleRanges(size)
	var read int64
	for _, r := range rs {
		read += r.Len
	}
	if read >= size || read > 3*EdgeBlock+Blocks*Block {
		t.Fatalf("samples read %d of %d bytes: %v", read, size, rs)
	}
	covered := func(off int64) bool {
		for _, r := range rs {
			if off >= r.Off && off < r.Off+r.Len {
				return true
			}
		}
		return false
	}
	gap := rs[0].Off + rs[0].Len // just after the first range
	if covered(gap) {
		t.Fatalf("ranges not merged: %v", rs)
	}
	flip := func(off int64) string {
		t.Helper()
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var b [1]byte
		if _, err := f.ReadAt(b[:], off); err != nil {
			t.Fatal(err)
		}
		b[0] ^= 0xff
		if _, err := f.WriteAt(b[:], off); err != nil {
			t.Fatal(err)
		}
		h, _, err := SampledFileSHA256(p)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	if h := flip(gap); h != h0 {
		t.Errorf("a byte between samples (offset %d) changed the hash", gap)
	}
	flip(gap) // back
	for _, off := range []int64{0, size / 2, size - 1, rs[1].Off + 100} {
		if !covered(off) {
			t.Fatalf("offset %d is not sampled: %v", off, rs)
		}
		if h := flip(off); h == h0 {
			t.Errorf("a byte at sampled offset %d did not change the hash", off)
		}
		if h := flip(off); h != h0 {
			t.Errorf("restoring offset %d did not restore the hash", off)
		}
	}
	if err := os.Truncate(p, size-1); err != nil {
		t.Fatal(err)
	}
	if h, _, _ := SampledFileSHA256(p); h == h0 {
		t.Errorf("a shorter file has the same hash")
	}
	// A small file is read whole.
	if rs := SampleRanges(3000); len(rs) != 1 || rs[0] != (Range{0, 3000}) {
		t.Errorf("ranges of a small file: %v", rs)
	}
	if rs := SampleRanges(0); rs != nil {
		t.Errorf("ranges of an empty file: %v", rs)
	}
}

// TestDeletedBinary: the binary of the process was removed after it
// started; the manifest says so and still hashes it through /proc/PID/exe.
func TestDeletedBinary(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "sleepy")
	src, err := os.ReadFile(sleepBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, src, 0o755); err != nil {
		t.Fatal(err)
	}
	want := sha256File(t, bin)
	cmd := startSleep(t, bin, []string{"PATH=/bin"}, nil, nil)
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	m, _ := Collect(cmd.Process.Pid, Options{})
	// No key of the list set: an empty environment, not an unread one.
	if b, _ := json.Marshal(m); m.Env == nil || !strings.Contains(string(b), `"env":{}`) {
		t.Errorf("env = %#v", m.Env)
	}
	if m.Binary == nil || m.Binary.Path != bin || !m.Binary.Deleted {
		t.Fatalf("binary = %+v, want %s deleted", m.Binary, bin)
	}
	if m.Binary.SHA256 != want || m.Binary.Size != int64(len(src)) {
		t.Errorf("binary %+v, want sha256 %s size %d", m.Binary, want, len(src))
	}
	if !hasNote(m, "was deleted or replaced") {
		t.Errorf("no note of the deletion: %v", m.Notes)
	}
}

// TestDeletedModel: a model removed after the server opened it is noted
// and still hashed, through the process's fd.
func TestDeletedModel(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "gone.gguf")
	writeModel(t, model, 2<<20+7)
	want, _, _ := SampledFileSHA256(model)
	mf, err := os.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	defer mf.Close()
	cmd := startSleep(t, sleepBinary(t), nil, []*os.File{mf}, nil)
	if err := os.Remove(model); err != nil {
		t.Fatal(err)
	}
	m, _ := Collect(cmd.Process.Pid, Options{})
	f := modelOf(m, model)
	if f == nil || !f.Deleted || f.SampledSHA256 != want || f.Size != 2<<20+7 {
		t.Fatalf("model = %+v, want deleted with sampled_sha256 %s", f, want)
	}
	if !hasNote(m, "gone.gguf was deleted") {
		t.Errorf("no note: %v", m.Notes)
	}
}

// TestUnreadableModel: the server has a model open that the collector may
// not read. Without root, the file's mode is set to 000 after the server
// opened it. As root (permission checks bypassed), the server and the
// collector both run as nobody (65534), and the model is root's, mode 600,
// in a directory of mode 700: the collector is this test binary run again
// under that uid. The manifest keeps the model's path and size, has no
// hash, and notes why; a second collection under nobody of this (root)
// test process notes every part it may not read, and does not fail.
func TestUnreadableModel(t *testing.T) {
	asRoot := os.Geteuid() == 0
	base, err := os.MkdirTemp("", "manifest-unreadable-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	priv := filepath.Join(base, "private")
	if err := os.Mkdir(priv, 0o700); err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(priv, "x.gguf")
	writeModel(t, model, 1<<20+3)
	mf, err := os.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	defer mf.Close()
	if err := os.Chmod(model, 0o600); err != nil {
		t.Fatal(err)
	}

	var m *Manifest
	if !asRoot {
		if err := os.Chmod(model, 0); err != nil {
			t.Fatal(err)
		}
		cmd := startSleep(t, sleepBinary(t), nil, []*os.File{mf}, nil)
		m, _ = Collect(cmd.Process.Pid, Options{})
	} else {
		nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
		cmd := startSleep(t, sleepBinary(t), nil, []*os.File{mf}, nobody)
		collector := copyTestBinary(t, base)
		m = collectAs(t, collector, cmd.Process.Pid, nobody)

		// A root process, seen by nobody: nothing of the process is
		// readable, the host's parts still are.
		self := collectAs(t, collector, os.Getpid(), nobody)
		if self.Binary != nil && self.Binary.SHA256 != "" || self.Env != nil || len(self.Models) > 0 {
			t.Errorf("nobody read a root process: %+v", self)
		}
		if !hasNote(self, "reading the binary of process") || !hasNote(self, "environment of process") || self.Kernel == nil {
			t.Errorf("notes of an unreadable process: %v", self.Notes)
		}
	}
	f := modelOf(m, model)
	if f == nil {
		t.Fatalf("model %s not listed: %+v (notes %v)", model, m.Models, m.Notes)
	}
	if f.SampledSHA256 != "" || !strings.Contains(f.Error, "permission denied") {
		t.Errorf("model = %+v, want no hash and a permission error", f)
	}
	if f.Size != 1<<20+3 {
		t.Errorf("model size %d, want %d (stat through the fd needs no read permission)", f.Size, 1<<20+3)
	}
	if !hasNote(m, "reading model file "+model) {
		t.Errorf("no note for the model: %v", m.Notes)
	}
	if m.Binary == nil || m.Binary.SHA256 == "" {
		t.Errorf("the binary should still be hashed: %+v", m.Binary)
	}
}

// copyTestBinary copies this test binary where another user may run it.
func copyTestBinary(t *testing.T, dir string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "manifest.test")
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func collectAs(t *testing.T, bin string, pid int, cred *syscall.Credential) *Manifest {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = []string{envCollect + "=" + strconv.Itoa(pid)}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("collecting as uid %d: %v", cred.Uid, err)
	}
	var m Manifest
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("collector output: %v\n%s", err, out)
	}
	return &m
}

// TestMappedFiles: a model and a CUDA library mapped (and their fds
// closed) by this process are found through /proc/self/maps, the library's
// version from its file name and soname from its ELF header.
func TestMappedFiles(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "w.safetensors")
	writeModel(t, model, 300<<10)
	libSrc := "/lib/x86_64-linux-gnu/libm.so.6"
	lb, err := os.ReadFile(libSrc)
	if errors.Is(err, fs.ErrNotExist) {
		privtest.SkipOptional(t, "no %s on this host to stand in for a CUDA library", libSrc)
	}
	if err != nil {
		t.Fatalf("reading %s to stand in for a CUDA library: %v", libSrc, err)
	}
	lib := filepath.Join(dir, "libcudart.so.12.4.127")
	if err := os.WriteFile(lib, lb, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{model, lib} {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := f.Stat()
		mem, err := syscall.Mmap(int(f.Fd()), 0, int(fi.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Munmap(mem) })
	}
	m, _ := Collect(os.Getpid(), Options{})
	f := modelOf(m, model)
	want, _, _ := SampledFileSHA256(model)
	if f == nil || f.Via != "maps" || f.SampledSHA256 != want || f.Size != 300<<10 {
		t.Errorf("model = %+v, want via maps with sampled_sha256 %s", f, want)
	}
	var l *Lib
	for i := range m.CUDALibs {
		if m.CUDALibs[i].Path == lib {
			l = &m.CUDALibs[i]
		}
	}
	if l == nil {
		t.Fatalf("library %s not in %+v", lib, m.CUDALibs)
	}
	if l.Name != "libcudart" || l.Version != "12.4.127" || l.Soname != "libm.so.6" || l.Size != int64(len(lb)) || l.SampledSHA256 == "" {
		t.Errorf("lib = %+v", l)
	}
}

func TestParseMaps(t *testing.T) {
	in := `55d0c0a00000-55d0c0a2b000 r--p 00000000 08:01 1234   /usr/bin/llama-server
7f0000000000-7f0100000000 r--s 00000000 08:01 99     /models/my model.gguf
7f0200000000-7f0200001000 rw-p 00000000 00:00 0 
7f0300000000-7f0300001000 r--p 00000000 00:00 0      [vdso]
7f0400000000-7f0400001000 r-xp 00000000 08:01 77     /usr/lib/libcuda.so.550.54.14 (deleted)
`
	got := ParseMaps(bufio.NewScanner(strings.NewReader(in)))
	want := []Mapping{
		{"55d0c0a00000-55d0c0a2b000", "/usr/bin/llama-server"},
		{"7f0000000000-7f0100000000", "/models/my model.gguf"},
		{"7f0400000000-7f0400001000", "/usr/lib/libcuda.so.550.54.14 (deleted)"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ParseMaps = %q, want %q", got, want)
	}
	for p, w := range map[string]bool{"/m/a.GGUF": true, "/m/a.bin": true, "/m/a.txt": false, "/m/gguf": false} {
		if IsModelPath(p) != w {
			t.Errorf("IsModelPath(%s) != %v", p, w)
		}
	}
	for p, w := range map[string][2]string{
		"/usr/lib/libcuda.so.550.54.14": {"libcuda", "550.54.14"},
		"/x/libnccl.so.2":               {"libnccl", "2"},
		"/x/libcublasLt.so":             {"libcublasLt", ""},
	} {
		n, v, ok := LibName(p)
		if !ok || n != w[0] || v != w[1] || !IsCUDALib(p) {
			t.Errorf("LibName(%s) = %s %s %v", p, n, v, ok)
		}
	}
	if IsCUDALib("/usr/lib/libc.so.6") || IsCUDALib("/x/libcudaX.sox") {
		t.Errorf("IsCUDALib matched a non-CUDA library")
	}
}

// fixture writes files under root (path → content).
func fixture(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, s := range files {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHostFixtures: kernel, CPU, governors and the cgroup limits (v2 with
// the tighter limit on an ancestor; v1) from fixture /proc and /sys trees.
func TestHostFixtures(t *testing.T) {
	for _, tc := range []struct {
		name            string
		files           map[string]string
		version         int
		cpuMax, memMax  string
		cpuLimit        float64
		governor, model string
	}{
		{
			name: "v2",
			files: map[string]string{
				"proc/4242/cgroup":                                     "0::/a/b\n",
				"sys/fs/cgroup/a/b/cpu.max":                            "max 100000\n",
				"sys/fs/cgroup/a/b/memory.max":                         "1073741824\n",
				"sys/fs/cgroup/a/cpu.max":                              "200000 100000\n",
				"sys/fs/cgroup/a/memory.max":                           "max\n",
				"sys/devices/system/cpu/cpu0/cpufreq/scaling_governor": "performance\n",
				"sys/devices/system/cpu/cpu1/cpufreq/scaling_governor": "performance\n",
			},
			version: 2, cpuMax: "200000 100000", cpuLimit: 2, memMax: "1073741824", governor: "performance",
		},
		{
			name: "v1",
			files: map[string]string{
				"proc/4242/cgroup": "9:memory:/x\n2:cpu,cpuacct:/y\n0::/\n",
				"sys/fs/cgroup/cpu,cpuacct/y/cpu.cfs_quota_us":         "50000\n",
				"sys/fs/cgroup/cpu,cpuacct/y/cpu.cfs_period_us":        "100000\n",
				"sys/fs/cgroup/memory/x/memory.limit_in_bytes":         "9223372036854771712\n",
				"sys/devices/system/cpu/cpu0/cpufreq/scaling_governor": "powersave\n",
				"sys/devices/system/cpu/cpu1/cpufreq/scaling_governor": "performance\n",
			},
			version: 1, cpuMax: "50000 100000", cpuLimit: 0.5, memMax: "max", governor: "performance×1, powersave×1",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			tc.files["proc/sys/kernel/osrelease"] = "6.8.0-31-generic\n"
			tc.files["proc/sys/kernel/version"] = "#31-Ubuntu SMP PREEMPT_DYNAMIC\n"
			tc.files["proc/cpuinfo"] = "processor\t: 0\nmodel name\t: Test CPU @ 2.0GHz\n\nprocessor\t: 1\nmodel name\t: Test CPU @ 2.0GHz\n"
			fixture(t, root, tc.files)
			m, _ := Collect(4242, Options{ProcDir: filepath.Join(root, "proc"), SysDir: filepath.Join(root, "sys")})
			cg := m.Cgroup
			if cg == nil || cg.Version != tc.version || cg.CPUMax != tc.cpuMax || cg.CPULimit != tc.cpuLimit || cg.MemoryMax != tc.memMax {
				t.Errorf("cgroup = %+v, want v%d cpu %q (%g) memory %q", cg, tc.version, tc.cpuMax, tc.cpuLimit, tc.memMax)
			}
			if m.Kernel == nil || m.Kernel.Release != "6.8.0-31-generic" || m.CPU.Model != "Test CPU @ 2.0GHz" || m.CPU.Count != 2 || m.CPU.Governor() != tc.governor {
				t.Errorf("kernel %+v cpu %+v governor %q", m.Kernel, m.CPU, m.CPU.Governor())
			}
			if !hasNote(m, "reading the binary of process 4242") {
				t.Errorf("no note for the missing exe: %v", m.Notes)
			}
		})
	}
	// No cpufreq, no such process: notes, no panic.
	root := t.TempDir()
	fixture(t, root, map[string]string{"proc/cpuinfo": "processor : 0\n"})
	m, errs := Collect(99999, Options{ProcDir: filepath.Join(root, "proc"), SysDir: filepath.Join(root, "sys"),
		GPU: GPUSourceFunc(func() (*GPU, error) { return nil, fmt.Errorf("NVML is not available") })})
	if len(errs) != len(m.Notes) || !hasNote(m, "reading process 99999") || !hasNote(m, "has no cpufreq") ||
		!hasNote(m, "kernel release") || !hasNote(m, "NVML is not available") || m.Binary != nil {
		t.Errorf("notes %v", m.Notes)
	}
}

func TestGPUSource(t *testing.T) {
	g := &GPU{DriverVersion: "550.54.14", Devices: []GPUDevice{{0, "GPU-1234", "NVIDIA H100"}}}
	m, _ := Collect(os.Getpid(), Options{GPU: GPUSourceFunc(func() (*GPU, error) { return g, nil })})
	if m.GPU != g {
		t.Errorf("gpu = %+v", m.GPU)
	}
}

func TestDatasetOf(t *testing.T) {
	p := filepath.Join(t.TempDir(), "d.jsonl")
	if err := os.WriteFile(p, []byte("{\"prompt\":\"hi\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := DatasetOf("jsonl", p, 7, map[string]string{"output_len": "64"})
	if err != nil || d.SHA256 != sha256File(t, p) || d.Seed != 7 {
		t.Errorf("DatasetOf = %+v, %v", d, err)
	}
	if _, err := DatasetOf("jsonl", p+".missing", 7, nil); err == nil {
		t.Errorf("no error for a missing dataset")
	}
	if d, err := DatasetOf("random", "", 1, nil); err != nil || d.SHA256 != "" {
		t.Errorf("random: %+v %v", d, err)
	}
}
