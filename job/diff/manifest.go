package diff

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/bpfbench/bpfbench/internal/manifest"
)

// Change is one difference of the two manifests.
type Change struct {
	// Field names what changed ("kernel.release", "env.OMP_NUM_THREADS",
	// "models./m/a.gguf").
	Field string `json:"field"`
	A     string `json:"a"`
	B     string `json:"b"`
	// Text says it for humans ("kernel 6.1.0 → 6.8.0").
	Text string `json:"text"`
}

const notRecorded = "(not recorded)"

// short cuts a hash to 12 characters.
func short(h string) string {
	if len(h) > 12 {
		return h[:12] + "…"
	}
	return h
}

type changes []Change

// add records a difference of a and b; empty is how an empty value reads.
func (c *changes) add(field, label, a, b, empty string) {
	if a == b {
		return
	}
	sa, sb := a, b
	if sa == "" {
		sa = empty
	}
	if sb == "" {
		sb = empty
	}
	*c = append(*c, Change{Field: field, A: a, B: b, Text: fmt.Sprintf("%s %s → %s", label, sa, sb)})
}

func (c *changes) text(field, a, b, text string) {
	*c = append(*c, Change{Field: field, A: a, B: b, Text: text})
}

// CompareManifests lists every difference of two manifests; none when
// either is missing (Load lists that as missing).
func CompareManifests(a, b *manifest.Manifest) []Change {
	if a == nil || b == nil {
		return nil
	}
	var c changes
	sameScheme := a.SampledHashScheme == b.SampledHashScheme
	if !sameScheme {
		c.text("sampled_hash_scheme", a.SampledHashScheme, b.SampledHashScheme,
			"the sampled hashes of models and libraries use different schemes: their contents are not compared")
	}
	// bpfbench
	c.add("bpfbench.version", "bpfbench", a.Bpfbench.Version, b.Bpfbench.Version, notRecorded)
	if a.Bpfbench.Version == b.Bpfbench.Version {
		c.add("bpfbench.revision", "bpfbench revision", a.Bpfbench.Revision, b.Bpfbench.Revision, notRecorded)
	}
	c.add("bpfbench.args", "bpfbench arguments", quoteArgs(a.Bpfbench.Args), quoteArgs(b.Bpfbench.Args), notRecorded)
	// the server
	binary(&c, a.Binary, b.Binary)
	cmdline(&c, a.Cmdline, b.Cmdline)
	env(&c, a, b)
	models(&c, a.Models, b.Models, sameScheme)
	libs(&c, a.CUDALibs, b.CUDALibs, sameScheme)
	gpu(&c, a.GPU, b.GPU)
	// the host
	ka, kb := a.Kernel, b.Kernel
	if ka == nil {
		ka = &manifest.Kernel{}
	}
	if kb == nil {
		kb = &manifest.Kernel{}
	}
	c.add("kernel.release", "kernel", ka.Release, kb.Release, notRecorded)
	if ka.Release == kb.Release {
		c.add("kernel.version", "kernel build", ka.Version, kb.Version, notRecorded)
	}
	ca, cb := a.CPU, b.CPU
	if ca == nil {
		ca = &manifest.CPU{}
	}
	if cb == nil {
		cb = &manifest.CPU{}
	}
	c.add("cpu.model", "CPU", ca.Model, cb.Model, notRecorded)
	c.add("cpu.count", "CPUs", count(ca.Count), count(cb.Count), notRecorded)
	c.add("cpu.governor", "CPU governor", ca.Governor(), cb.Governor(), notRecorded)
	cga, cgb := a.Cgroup, b.Cgroup
	if cga == nil {
		cga = &manifest.Cgroup{}
	}
	if cgb == nil {
		cgb = &manifest.Cgroup{}
	}
	c.add("cgroup.version", "cgroup version", count(cga.Version), count(cgb.Version), notRecorded)
	c.add("cgroup.path", "cgroup", cga.Path, cgb.Path, notRecorded)
	c.add("cgroup.cpu_max", "cgroup CPU limit", cpuLimit(cga), cpuLimit(cgb), notRecorded)
	c.add("cgroup.memory_max", "cgroup memory limit", cga.MemoryMax, cgb.MemoryMax, notRecorded)
	dataset(&c, a.Dataset, b.Dataset)
	return c
}

func count(n int) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(n)
}

func cpuLimit(cg *manifest.Cgroup) string {
	if cg.CPUMax == "" {
		return ""
	}
	if cg.CPULimit > 0 {
		return fmt.Sprintf("%s (%.3g CPUs)", cg.CPUMax, cg.CPULimit)
	}
	return cg.CPUMax
}

func quoteArgs(args []string) string {
	if args == nil {
		return ""
	}
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"'") {
			a = strconv.Quote(a)
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}

// cmdline names the arguments that changed, each with the flag before
// it ("-t 8 → -t 16"), when both command lines have as many; otherwise it
// shows both whole.
func cmdline(c *changes, a, b []string) {
	if a == nil || b == nil || len(a) != len(b) {
		c.add("cmdline", "command line", quoteArgs(a), quoteArgs(b), notRecorded)
		return
	}
	var parts []string
	for i := range a {
		if a[i] == b[i] {
			continue
		}
		ctx := ""
		if i > 0 && a[i-1] == b[i-1] && strings.HasPrefix(a[i-1], "-") {
			ctx = quoteArgs(a[i-1:i]) + " "
		}
		parts = append(parts, ctx+quoteArgs(a[i:i+1])+" → "+ctx+quoteArgs(b[i:i+1]))
	}
	if len(parts) > 0 {
		c.text("cmdline", quoteArgs(a), quoteArgs(b), "command line: "+strings.Join(parts, "; "))
	}
}

func binary(c *changes, a, b *manifest.File) {
	switch {
	case a == nil && b == nil:
		return
	case a == nil || b == nil:
		c.add("binary", "server binary", fileLabel(a), fileLabel(b), notRecorded)
		return
	}
	c.add("binary.path", "server binary", a.Path, b.Path, notRecorded)
	if a.SHA256 != "" && b.SHA256 != "" && a.SHA256 != b.SHA256 {
		c.text("binary.sha256", a.SHA256, b.SHA256, fmt.Sprintf("server binary changed: %s sha256 %s → %s", b.Path, short(a.SHA256), short(b.SHA256)))
	} else if (a.SHA256 == "") != (b.SHA256 == "") {
		c.add("binary.sha256", "server binary sha256", short(a.SHA256), short(b.SHA256), notRecorded)
	}
	if a.Deleted != b.Deleted {
		c.add("binary.deleted", "server binary deleted since it started:", yesNo(a.Deleted), yesNo(b.Deleted), "")
	}
}

func fileLabel(f *manifest.File) string {
	if f == nil {
		return ""
	}
	return f.Path
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func env(c *changes, a, b *manifest.Manifest) {
	if a.Env == nil && b.Env == nil {
		return
	}
	if a.Env == nil || b.Env == nil {
		which := "A"
		if b.Env == nil {
			which = "B"
		}
		c.text("env", "", "", fmt.Sprintf("the server's environment was not recorded in %s: not compared", which))
		return
	}
	keys := map[string]bool{}
	for k := range a.Env {
		keys[k] = true
	}
	for k := range b.Env {
		keys[k] = true
	}
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		va, oka := a.Env[k]
		vb, okb := b.Env[k]
		if oka == okb && va == vb {
			continue
		}
		sa, sb := strconv.Quote(va), strconv.Quote(vb)
		if va == manifest.SecretValue {
			sa = "set"
		}
		if vb == manifest.SecretValue {
			sb = "set"
		}
		if !oka {
			sa = "unset"
		}
		if !okb {
			sb = "unset"
		}
		c.text("env."+k, va, vb, fmt.Sprintf("%s %s → %s", k, sa, sb))
	}
}

func models(c *changes, a, b []manifest.File, sameScheme bool) {
	ma, mb := map[string]manifest.File{}, map[string]manifest.File{}
	for _, f := range a {
		ma[f.Path] = f
	}
	for _, f := range b {
		mb[f.Path] = f
	}
	// One model each at different paths: the model was swapped.
	if len(a) == 1 && len(b) == 1 && a[0].Path != b[0].Path {
		fa, fb := a[0], b[0]
		text := fmt.Sprintf("model file %s → %s", fa.Path, fb.Path)
		switch {
		case sameScheme && fa.SampledSHA256 != "" && fa.SampledSHA256 == fb.SampledSHA256:
			text += " (same content: sampled_sha256 " + short(fa.SampledSHA256) + ")"
		case fa.SampledSHA256 != "" && fb.SampledSHA256 != "":
			text += fmt.Sprintf(" (sampled_sha256 %s → %s, %s → %s)", short(fa.SampledSHA256), short(fb.SampledSHA256), size(fa.Size), size(fb.Size))
		}
		c.text("models", fa.Path, fb.Path, text)
		return
	}
	for _, p := range unionKeys(ma, mb) {
		fa, oka := ma[p]
		fb, okb := mb[p]
		switch {
		case !okb:
			c.text("models."+p, fa.SampledSHA256, "", fmt.Sprintf("model file %s not open in B (was %s, sampled_sha256 %s)", p, size(fa.Size), orNone(short(fa.SampledSHA256))))
		case !oka:
			c.text("models."+p, "", fb.SampledSHA256, fmt.Sprintf("model file %s open in B only (%s, sampled_sha256 %s)", p, size(fb.Size), orNone(short(fb.SampledSHA256))))
		case fa.Size != fb.Size:
			c.text("models."+p, fa.SampledSHA256, fb.SampledSHA256, fmt.Sprintf("model file changed: %s size %s → %s", p, size(fa.Size), size(fb.Size)))
		case sameScheme && fa.SampledSHA256 != fb.SampledSHA256:
			if fa.SampledSHA256 == "" || fb.SampledSHA256 == "" {
				c.text("models."+p, fa.SampledSHA256, fb.SampledSHA256, fmt.Sprintf("model file %s: sampled_sha256 %s → %s (one could not be read)", p, orNone(short(fa.SampledSHA256)), orNone(short(fb.SampledSHA256))))
			} else {
				c.text("models."+p, fa.SampledSHA256, fb.SampledSHA256, fmt.Sprintf("model file changed: %s sampled_sha256 %s → %s", p, short(fa.SampledSHA256), short(fb.SampledSHA256)))
			}
		}
	}
}

func orNone(s string) string {
	if s == "" {
		return notRecorded
	}
	return s
}

func size(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d B", n)
}

func unionKeys[V any](a, b map[string]V) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range []map[string]V{a, b} {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	sort.Strings(out)
	return out
}

func libs(c *changes, a, b []manifest.Lib, sameScheme bool) {
	ma, mb := map[string]manifest.Lib{}, map[string]manifest.Lib{}
	for _, l := range a {
		ma[l.Name] = l
	}
	for _, l := range b {
		mb[l.Name] = l
	}
	for _, n := range unionKeys(ma, mb) {
		la, oka := ma[n]
		lb, okb := mb[n]
		switch {
		case !okb:
			c.text("cuda_libs."+n, la.Version, "", fmt.Sprintf("%s %s not mapped in B (was %s)", n, la.Version, la.Path))
		case !oka:
			c.text("cuda_libs."+n, "", lb.Version, fmt.Sprintf("%s %s mapped in B only (%s)", n, lb.Version, lb.Path))
		case la.Version != lb.Version:
			c.add("cuda_libs."+n, n, la.Version, lb.Version, "(no version)")
		case la.Path != lb.Path:
			c.add("cuda_libs."+n+".path", n+" "+la.Version+" path", la.Path, lb.Path, notRecorded)
		case sameScheme && la.SampledSHA256 != "" && lb.SampledSHA256 != "" && la.SampledSHA256 != lb.SampledSHA256:
			c.text("cuda_libs."+n, la.SampledSHA256, lb.SampledSHA256, fmt.Sprintf("%s changed, same version %s: sampled_sha256 %s → %s", n, la.Version, short(la.SampledSHA256), short(lb.SampledSHA256)))
		}
	}
}

func gpu(c *changes, a, b *manifest.GPU) {
	if a == nil && b == nil {
		return
	}
	if a == nil || b == nil {
		which := "A"
		if b == nil {
			which = "B"
		}
		other := a
		if a == nil {
			other = b
		}
		c.text("gpu", "", "", fmt.Sprintf("GPUs not recorded in %s (%d in the other, driver %s)", which, len(other.Devices), orNone(other.DriverVersion)))
		return
	}
	c.add("gpu.driver_version", "GPU driver", a.DriverVersion, b.DriverVersion, notRecorded)
	c.add("gpu.nvml_version", "NVML", a.NVMLVersion, b.NVMLVersion, notRecorded)
	c.add("gpu.cuda_driver_version", "CUDA driver API", cudaVersion(a.CUDADriverVersion), cudaVersion(b.CUDADriverVersion), notRecorded)
	c.add("gpu.count", "GPUs", strconv.Itoa(len(a.Devices)), strconv.Itoa(len(b.Devices)), "")
	for i := 0; i < min(len(a.Devices), len(b.Devices)); i++ {
		da, db := a.Devices[i], b.Devices[i]
		c.add(fmt.Sprintf("gpu.devices.%d.name", i), fmt.Sprintf("GPU %d", i), da.Name, db.Name, notRecorded)
		c.add(fmt.Sprintf("gpu.devices.%d.uuid", i), fmt.Sprintf("GPU %d UUID", i), da.UUID, db.UUID, notRecorded)
	}
}

// cudaVersion writes NVML's 12040 as "12.4".
func cudaVersion(v int) string {
	if v == 0 {
		return ""
	}
	return fmt.Sprintf("%d.%d", v/1000, v%1000/10)
}

func dataset(c *changes, a, b *manifest.Dataset) {
	if a == nil && b == nil {
		return
	}
	if a == nil {
		a = &manifest.Dataset{}
	}
	if b == nil {
		b = &manifest.Dataset{}
	}
	c.add("dataset.name", "dataset", a.Name, b.Name, notRecorded)
	c.add("dataset.path", "dataset file", a.Path, b.Path, notRecorded)
	if a.SHA256 != b.SHA256 {
		c.text("dataset.sha256", a.SHA256, b.SHA256, fmt.Sprintf("dataset content changed: sha256 %s → %s", orNone(short(a.SHA256)), orNone(short(b.SHA256))))
	}
	if a.SampledSHA256 != b.SampledSHA256 {
		c.text("dataset.sampled_sha256", a.SampledSHA256, b.SampledSHA256, fmt.Sprintf("dataset content changed: sampled_sha256 %s → %s", orNone(short(a.SampledSHA256)), orNone(short(b.SampledSHA256))))
	}
	c.add("dataset.seed", "seed", strconv.FormatUint(a.Seed, 10), strconv.FormatUint(b.Seed, 10), "")
	for _, k := range unionKeys(a.Params, b.Params) {
		va, oka := a.Params[k]
		vb, okb := b.Params[k]
		if oka == okb && va == vb {
			continue
		}
		if !oka {
			va = "unset"
		}
		if !okb {
			vb = "unset"
		}
		c.text("dataset.params."+k, a.Params[k], b.Params[k], fmt.Sprintf("dataset %s %s → %s", k, va, vb))
	}
}
