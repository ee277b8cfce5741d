package deploy

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/bpfbench/bpfbench/internal/privtest"
)

// TestDist runs `make dist` into a temporary directory (never dist/ of the
// tree) and checks what a user downloads: the .deb's files, metadata,
// conffiles and maintainer scripts, stripped binaries that still carry the
// version, SHA256SUMS, and the SBOM. With a warm build cache it takes about
// 20 s on 2 cores; a cold one also builds nfpm and cyclonedx-gomod (about
// 2 minutes).
// The version TestDist builds: a describe of a tagged tree, which the
// Makefile turns into a version dpkg and rpm accept.
const (
	distVersion    = "v1.2.3-4-gabcdef0"
	distDebVersion = "1.2.3+4.gabcdef0-1"
)

func TestDist(t *testing.T) {
	makeBin := privtest.RequireTool(t, "make", "apt-get install make")
	dpkgDeb := privtest.RequireTool(t, "dpkg-deb", "apt-get install dpkg")
	sha256sum := privtest.RequireTool(t, "sha256sum", "apt-get install coreutils")

	for _, arch := range distArches {
		if arch != runtime.GOARCH {
			privtest.RequireTool(t, crossCC[arch], "apt-get install "+crossPkgs[arch])
		}
	}

	dist := t.TempDir()
	cmd := exec.Command(makeBin, "--no-print-directory", "dist", "DIST="+dist, "GO="+goCommand(), "VERSION="+distVersion)
	cmd.Dir = ".."
	// A `make test` around this test must not hand its flags or jobserver on.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "MAKEFLAGS=") || strings.HasPrefix(kv, "MFLAGS=") || strings.HasPrefix(kv, "MAKELEVEL=")
	})
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make dist DIST=%s: %v\n%s", dist, err, out)
	}

	for _, arch := range distArches {
		bin := filepath.Join(dist, "bpfbench-linux-"+arch)
		debs, _ := filepath.Glob(filepath.Join(dist, "bpfbench_"+distDebVersion+"_"+arch+".deb"))
		rpms, _ := filepath.Glob(filepath.Join(dist, "bpfbench-"+distDebVersion+"."+rpmArch[arch]+".rpm"))
		if len(debs) != 1 || len(rpms) != 1 {
			t.Fatalf("want one %s .deb and one .rpm in %s, found %q and %q", arch, dist, debs, rpms)
		}
		d := distFiles{dir: dist, arch: arch, bin: bin, deb: debs[0], rpm: rpms[0], dpkgDeb: dpkgDeb, sha256sum: sha256sum}
		t.Run(arch+"/binaries", func(t *testing.T) { checkDistBinaries(t, d) })
		t.Run(arch+"/deb contents", func(t *testing.T) { checkDebContents(t, d) })
		t.Run(arch+"/deb metadata", func(t *testing.T) { checkDebMetadata(t, d) })
		t.Run(arch+"/rpm", func(t *testing.T) { checkRPM(t, d) })
	}
	d := distFiles{dir: dist, sha256sum: sha256sum}
	t.Run("SHA256SUMS", func(t *testing.T) { checkSHA256SUMS(t, d) })
	t.Run("SBOM", func(t *testing.T) { checkSBOM(t, d) })
}

// distArches are the architectures `make dist` builds (the one not the
// host's cross-compiled), with each one's ELF machine and RPM name, and the
// cross compiler that builds it from the other.
var (
	distArches = []string{"amd64", "arm64"}
	rpmArch    = map[string]string{"amd64": "x86_64", "arm64": "aarch64"}
	elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	crossCC    = map[string]string{"amd64": "x86_64-linux-gnu-gcc", "arm64": "aarch64-linux-gnu-gcc"}
	crossPkgs  = map[string]string{"amd64": "gcc-x86-64-linux-gnu libc6-dev-amd64-cross", "arm64": "gcc-aarch64-linux-gnu libc6-dev-arm64-cross"}
)

// distFiles is what make dist wrote, and the tools that read it.
type distFiles struct {
	dir, arch, bin, deb, rpm string
	dpkgDeb, sha256sum       string
}

// checkDistBinaries checks the binaries: stripped, built with -trimpath, with make build's version.
func checkDistBinaries(t *testing.T, d distFiles) {
	dist, arch, bin := d.dir, d.arch, d.bin
	for _, name := range []string{"bpfbench-linux-" + arch, "llmsim-linux-" + arch} {
		checkStripped(t, filepath.Join(dist, name))
	}
	for _, name := range []string{"bpfbench-linux-" + arch, "llmsim-linux-" + arch} {
		f, err := elf.Open(filepath.Join(dist, name))
		if err != nil {
			t.Fatal(err)
		}
		if f.Machine != elfMachine[arch] {
			t.Errorf("%s is for %v, want %v", name, f.Machine, elfMachine[arch])
		}
		f.Close()
	}
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatalf("build info of %s: %v", bin, err)
	}
	for _, s := range bi.Settings {
		if s.Key == "-trimpath" && s.Value != "true" {
			t.Errorf("%s built without -trimpath", bin)
		}
		if s.Key == "GOARCH" && s.Value != arch {
			t.Errorf("%s built for GOARCH %s, want %s", bin, s.Value, arch)
		}
	}
	if arch != runtime.GOARCH {
		// Not runnable here: the version is in its build (the
		// ldflags' string, in the binary's data).
		b, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte(distVersion)) {
			t.Errorf("%s does not carry the version %s", bin, distVersion)
		}
		return
	}
	// make build's version ldflags (-trimpath leaves -ldflags out of
	// the build info, so ask the binary).
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "bpfbench "+distVersion+" ") {
		t.Errorf("%s --version: %v: %q, want bpfbench %s", bin, err, out, distVersion)
	}
}

// checkDebContents checks the files of the .deb, their modes and owners, and its unit.
func checkDebContents(t *testing.T, d distFiles) {
	bin, deb, dpkgDeb := d.bin, d.deb, d.dpkgDeb
	out := distOutput(t, dpkgDeb, "-c", deb)
	modes := map[string]string{} // path -> "mode owner"
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		modes[strings.TrimPrefix(f[len(f)-1], ".")] = f[0] + " " + f[1]
	}
	for path, want := range map[string]string{
		"/usr/bin/bpfbench":                         "-rwxr-xr-x root/root",
		"/usr/lib/systemd/system/bpfbench.service":  "-rw-r--r-- root/root",
		"/usr/lib/sysusers.d/bpfbench.conf":         "-rw-r--r-- root/root",
		"/usr/lib/tmpfiles.d/bpfbench.conf":         "-rw-r--r-- root/root",
		"/etc/bpfbench/config.yaml":                 "-rw-r--r-- root/root",
		"/usr/share/doc/bpfbench/README.md":         "-rw-r--r-- root/root",
		"/usr/share/bpfbench/grafana/bpfbench.json": "-rw-r--r-- root/root",
		"/usr/share/bpfbench/prometheus/rules.yml":  "-rw-r--r-- root/root",
	} {
		if got, ok := modes[path]; !ok {
			t.Errorf("%s not in the .deb:\n%s", path, out)
		} else if got != want {
			t.Errorf("%s in the .deb: %s, want %s", path, got, want)
		}
	}

	// The files themselves: the unit differs from systemd/ only in
	// where the binary is, the rest is copied as is.
	root := t.TempDir()
	distOutput(t, dpkgDeb, "-x", deb, root)
	same := func(inDeb, inTree string) {
		t.Helper()
		a, err := os.ReadFile(filepath.Join(root, inDeb))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(inTree)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s in the .deb differs from %s", inDeb, inTree)
		}
	}
	same("usr/bin/bpfbench", bin)
	same("usr/lib/sysusers.d/bpfbench.conf", "../systemd/bpfbench.sysusers")
	same("usr/lib/tmpfiles.d/bpfbench.conf", "../systemd/bpfbench.tmpfiles")
	same("etc/bpfbench/config.yaml", "../systemd/config.yaml")
	unit, err := os.ReadFile(filepath.Join(root, "usr/lib/systemd/system/bpfbench.service"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("../systemd/bpfbench.service")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(string(src), "\nExecStart=/usr/local/bin/bpfbench ", "\nExecStart=/usr/bin/bpfbench ", 1)
	if want == string(src) {
		t.Fatalf("systemd/bpfbench.service has no ExecStart=/usr/local/bin/bpfbench line for make dist to rewrite")
	}
	if string(unit) != want {
		t.Errorf("the .deb's unit is not systemd/bpfbench.service with ExecStart on /usr/bin:\n%s", unit)
	}
}

// checkDebMetadata checks the .deb's control archive: its conffiles and maintainer scripts.
func checkDebMetadata(t *testing.T, d distFiles) {
	arch, bin, deb, dpkgDeb := d.arch, d.bin, d.deb, d.dpkgDeb
	info := distOutput(t, dpkgDeb, "-I", deb)
	for _, want := range []string{"conffiles", "postinst", "prerm", "postrm"} {
		if !regexp.MustCompile(`(?m)^\s+\d+ bytes,\s+\d+ lines\s+\*?\s+` + want + `\b`).MatchString(info) {
			t.Errorf("control archive has no %s:\n%s", want, info)
		}
	}
	field := func(name string) string {
		t.Helper()
		return strings.TrimSpace(distOutput(t, dpkgDeb, "-f", deb, name))
	}
	if got := field("Package"); got != "bpfbench" {
		t.Errorf("Package: %q", got)
	}
	if got := field("Architecture"); got != arch {
		t.Errorf("Architecture: %q, want %q", got, arch)
	}
	if v := field("Version"); v != distDebVersion {
		t.Errorf("Version: %q, want %q (VERSION=%s, release 1)", v, distDebVersion, distVersion)
	}
	for _, name := range []string{"Maintainer", "Description", "Homepage", "Section"} {
		if field(name) == "" {
			t.Errorf("%s is empty", name)
		}
	}

	// Depends names a glibc at least as new as the binary needs.
	m := regexp.MustCompile(`libc6 \(>= 2\.(\d+)\)`).FindStringSubmatch(field("Depends"))
	if m == nil {
		t.Fatalf("Depends %q names no libc6 (>= 2.N): bpfbench links glibc (cgo)", field("Depends"))
	}
	declared, _ := strconv.Atoi(m[1])
	if need := newestGlibc(t, bin); need > declared {
		t.Errorf("bpfbench needs GLIBC_2.%d, the .deb depends on libc6 (>= 2.%d): raise it in deploy/package/nfpm.yaml (both formats)", need, declared)
	}

	conffiles := strings.Fields(distOutput(t, dpkgDeb, "-I", deb, "conffiles"))
	if !slices.Equal(conffiles, []string{"/etc/bpfbench/config.yaml"}) {
		t.Errorf("conffiles: %q, want [/etc/bpfbench/config.yaml]", conffiles)
	}

	// The scripts create the user and the directory and reload systemd,
	// and never enable nor start the service on their own.
	postinst := distOutput(t, dpkgDeb, "-I", deb, "postinst")
	for _, want := range []string{"systemd-sysusers", "bpfbench.conf", "systemd-tmpfiles", "daemon-reload", "deb-systemd-helper update-state"} {
		if !strings.Contains(postinst, want) {
			t.Errorf("postinst does not run %s", want)
		}
	}
	starts := regexp.MustCompile(`(?m)^[^#\n]*(systemctl[^\n#]*\s(start|restart|enable)\b|deb-systemd-invoke\s+(start|restart)\b)`)
	for _, script := range []string{"postinst", "prerm", "postrm"} {
		if m := starts.FindString(distOutput(t, dpkgDeb, "-I", deb, script)); m != "" {
			t.Errorf("%s starts or enables the service: %q", script, m)
		}
	}
}

// checkRPM checks that the .rpm is an RPM package for the architecture.
func checkRPM(t *testing.T, d distFiles) {
	arch, rpm := d.arch, d.rpm
	b, err := os.ReadFile(rpm)
	if err != nil {
		t.Fatal(err)
	}
	// The lead's magic; rpm(8) is not on a Debian host to read the rest.
	if !bytes.HasPrefix(b, []byte{0xed, 0xab, 0xee, 0xdb}) {
		t.Errorf("%s is no RPM package", rpm)
	}
	if !strings.HasSuffix(rpm, "."+rpmArch[arch]+".rpm") {
		t.Errorf("%s is not for %s", rpm, rpmArch[arch])
	}
}

// checkSHA256SUMS checks SHA256SUMS against the files.
func checkSHA256SUMS(t *testing.T, d distFiles) {
	dist, sha256sum := d.dir, d.sha256sum
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			listed[f[1]] = true
		}
	}
	entries, err := os.ReadDir(dist)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Type().IsRegular() && e.Name() != "SHA256SUMS" && !listed[e.Name()] {
			t.Errorf("%s is not in SHA256SUMS:\n%s", e.Name(), sums)
		}
	}
	c := exec.Command(sha256sum, "--check", "--strict", "SHA256SUMS")
	c.Dir = dist
	if out, err := c.CombinedOutput(); err != nil {
		t.Errorf("sha256sum --check: %v\n%s", err, out)
	}
}

// checkSBOM checks the CycloneDX SBOM: what bpfbench links, not the build tools.
func checkSBOM(t *testing.T, d distFiles) {
	dist := d.dir
	b, err := os.ReadFile(filepath.Join(dist, "bpfbench.cdx.json"))
	if err != nil {
		t.Fatal(err)
	}
	var bom struct {
		BOMFormat   string `json:"bomFormat"`
		SpecVersion string `json:"specVersion"`
		Metadata    struct {
			Component struct {
				Name string `json:"name"`
			} `json:"component"`
		} `json:"metadata"`
		Components []struct {
			Name    string `json:"name"`
			Version string `json:"version"`
			PURL    string `json:"purl"`
		} `json:"components"`
	}
	if err := json.Unmarshal(b, &bom); err != nil {
		t.Fatalf("bpfbench.cdx.json: %v", err)
	}
	if bom.BOMFormat != "CycloneDX" || bom.SpecVersion == "" {
		t.Errorf("bomFormat %q, specVersion %q", bom.BOMFormat, bom.SpecVersion)
	}
	if bom.Metadata.Component.Name != "github.com/bpfbench/bpfbench" {
		t.Errorf("the SBOM describes %q", bom.Metadata.Component.Name)
	}
	names := map[string]string{}
	for _, c := range bom.Components {
		names[c.Name] = c.Version
		if c.Version == "" || !strings.HasPrefix(c.PURL, "pkg:golang/") {
			t.Errorf("component %s: version %q, purl %q", c.Name, c.Version, c.PURL)
		}
	}
	// What bpfbench links is there; the packaging tools in go.mod are not.
	for _, want := range []string{"github.com/cilium/ebpf", "github.com/NVIDIA/go-nvml", "std"} {
		if names[want] == "" {
			t.Errorf("no component %s among %d", want, len(names))
		}
	}
	for _, tool := range []string{"github.com/goreleaser/nfpm/v2", "github.com/CycloneDX/cyclonedx-gomod"} {
		if _, ok := names[tool]; ok {
			t.Errorf("component %s: a build tool, not linked into bpfbench", tool)
		}
	}
}

// goCommand is the go command for make's GO: the one running the tests
// (go test sets GOROOT), else the first on PATH.
func goCommand() string {
	if root := os.Getenv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", "go"); fileExistsDist(p) {
			return p
		}
	}
	return "go"
}

func fileExistsDist(p string) bool { _, err := os.Stat(p); return err == nil }

// distOutput runs a command and returns its standard output.
func distOutput(t *testing.T, name string, args ...string) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// checkStripped fails t when the ELF file p has a symbol table or DWARF.
func checkStripped(t *testing.T, p string) {
	t.Helper()
	f, err := elf.Open(p)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	defer f.Close()
	for _, s := range f.Sections {
		if s.Name == ".symtab" || strings.HasPrefix(s.Name, ".debug_") || strings.HasPrefix(s.Name, ".zdebug_") {
			t.Errorf("%s is not stripped: it has %s", p, s.Name)
		}
	}
}

// newestGlibc returns N of the newest GLIBC_2.N symbol version p imports.
func newestGlibc(t *testing.T, p string) int {
	t.Helper()
	f, err := elf.Open(p)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	defer f.Close()
	syms, err := f.ImportedSymbols()
	if err != nil {
		t.Fatalf("%s: imported symbols: %v", p, err)
	}
	newest := 0
	for _, s := range syms {
		if minor, ok := strings.CutPrefix(s.Version, "GLIBC_2."); ok {
			minor, _, _ = strings.Cut(minor, ".")
			if n, err := strconv.Atoi(minor); err == nil && n > newest {
				newest = n
			}
		}
	}
	if newest == 0 {
		t.Fatalf("%s imports no GLIBC_2.N symbol: not linked against glibc?", p)
	}
	return newest
}
