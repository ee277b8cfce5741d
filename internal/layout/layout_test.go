package layout

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/bpfbench/bpfbench/"

// rule: packages matching pkg may import, of this module, only what allow
// matches (patterns as in path.Match, "x/..." for x and below). The table is
// DESIGN.md's "Package map", row for row: the data flows from the kernel and
// the load generator up to the jobs, and no arrow runs back.
var rules = []struct {
	pkg   string
	allow []string
}{
	{"internal/...", []string{"internal/..."}},
	{"collectors", nil},
	{"collectors/bpfutil", []string{"internal/..."}},
	{"collectors/*", []string{"collectors", "collectors/bpfutil", "result", "internal/..."}}, // summaries: result's section types
	{"result/cause", nil},                                                     // the causes' values and names: the vocabulary on the wire
	{"result", []string{"result/cause", "internal/..."}},                      // the run's files: result.json's types, reader, migrations
	{"correlate", []string{"result"}},                                         // the attribution's types are result's
	{"correlate/critpath/feed", []string{"collectors", "correlate/critpath"}}, // spans to the critical-path engine (run's pipeline and live alike)
	{"correlate/*", []string{"correlate", "result/cause"}},                    // critpath: the critical-path engine, its causes result/cause's
	{"loadgen", []string{"loadgen/transport", "loadgen/dataset", "loadgen/metrics", "loadgen/sweep", "loadgen/kserve", "loadgen/kserve/inference", "result", "internal/..."}}, // the run, composing the packages below
	{"loadgen/kserve/inference", nil}, // generated from Triton's grpc_service.proto
	{"loadgen/kserve", []string{"loadgen/kserve/inference", "internal/..."}},
	{"loadgen/transport", []string{"loadgen/kserve", "loadgen/kserve/inference", "result", "internal/..."}}, // the streaming client: requests in, records out
	{"loadgen/dataset", []string{"loadgen/transport", "internal/..."}},                                      // the prompts (transport.Request)
	{"loadgen/metrics", []string{"loadgen/transport", "internal/..."}},                                      // vLLM's metrics of the records
	{"loadgen/sweep", []string{"loadgen/metrics", "loadgen/transport", "internal/..."}},                     // the SLO search, each step a Runner
	{"loadgen/*", []string{"internal/..."}},
	{"perturb", []string{"loadgen/transport", "internal/..."}},
	{"exporter/report/reportsample", []string{"exporter/report", "result", "internal/..."}}, // the report's samples (make report-sample)
	{"exporter/*", []string{"correlate", "correlate/critpath", "loadgen", "loadgen/transport", "result", "internal/..."}},
	{"session", []string{"collectors", "collectors/bpfutil", "internal/..."}},
	{"host", []string{"collectors/bpfutil", "perturb", "internal/..."}}, // CPU isolation; the state directory's leftovers
	{"readiness", []string{"collectors/...", "internal/..."}},
	{"agent", []string{"session", "collectors", "result", "internal/..."}},                                                         // the session API of the daemon, server and client
	{"live", []string{"collectors", "correlate/critpath", "correlate/critpath/feed", "exporter/report", "result", "internal/..."}}, // spans to the critical path; live traffic's streams
	{"incident", []string{"live", "correlate/critpath", "exporter/report", "exporter/trace", "result", "internal/..."}},            // the flight recorder's bundles and their spool
	{"daemon", []string{"agent", "session", "live", "incident", "collectors", "collectors/bpfutil", "exporter/prom", "exporter/report", "result", "correlate/critpath", "internal/..."}},
	{"job/load/loadclient", []string{"job/load", "internal/..."}}, // `bpfbench load` as its own process (tools/bench/loadgen)
	{"job/load", []string{"loadgen", "loadgen/*", "exporter/*", "result", "internal/..."}},
	{"job/diff", []string{"result", "correlate", "correlate/critpath", "internal/..."}},
	{"pipeline", []string{"collectors", "correlate", "correlate/critpath", "correlate/critpath/feed", "live", "loadgen", "loadgen/*", "exporter/report", "exporter/trace", "result", "internal/..."}},                 // a run's streaming correlation
	{"job/run", []string{"pipeline", "live", "agent", "session", "readiness", "collectors", "collectors/bpfutil", "correlate", "correlate/critpath", "loadgen", "loadgen/*", "exporter/*", "result", "internal/..."}}, // run: a source feeding the pipeline
	{"job/validate", []string{"job/run", "host", "pipeline", "session", "readiness", "correlate", "correlate/critpath", "loadgen", "loadgen/*", "perturb", "result", "internal/..."}},                                 // validate: a run with phased injections
	{"job/demo", []string{"job/run", "job/validate", "llmsim/launch", "session", "readiness", "loadgen", "loadgen/*", "perturb", "exporter/report", "result", "internal/..."}},                                        // demo: validate's scenario on the simulator
	{"job/knee", []string{"job/run", "live", "session", "readiness", "collectors", "correlate", "correlate/critpath", "loadgen", "loadgen/*", "exporter/report", "result", "internal/..."}},                           // sweep --pid: runs at the knee
	{"deploy", []string{"internal/..."}},                                 // tests of the dashboard and rules; run bin/bpfbench as a process
	{"llmsim/sim", []string{"loadgen/kserve/inference", "internal/..."}}, // the simulated server's library (cmd/llmsim)
	{"llmsim/simtest", []string{"llmsim/sim", "internal/..."}},           // tests' helper: the simulator in-process or as a process
	{"llmsim/launch", []string{"host", "perturb", "internal/..."}},       // the simulator as a child process (demo, validate --sim)
	{"tools/cudastub", nil},
	{"tools/...", []string{"result", "internal/..."}}, // test support: stubs, bench scripts, the schema generator; nothing climbs back up
	{"cmd/...", []string{"..."}},                      // the binaries: the composition root
}

func match(pattern, p string) bool {
	if pattern == "..." {
		return true
	}
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return p == base || strings.HasPrefix(p, base+"/")
	}
	ok, _ := path.Match(pattern, p)
	return ok
}

// goTool is the go command that runs the tests: `go test` puts its GOROOT's
// bin first on PATH? No, so look in GOROOT (set by go test) and then PATH.
func goTool() string {
	if root := os.Getenv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			return p
		}
	}
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "go"
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// TestImportRules fails on an import across DESIGN.md's package map, and on
// a package the map does not place.
func TestImportRules(t *testing.T) {
	cmd := exec.Command(goTool(), "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		pkg := strings.TrimPrefix(f[0], module)
		ri := -1
		for i, r := range rules {
			if match(r.pkg, pkg) {
				ri = i
				break
			}
		}
		if ri < 0 {
			t.Errorf("package %s has no row in the package map (DESIGN.md, internal/layout)", pkg)
			continue
		}
		n++
		for _, imp := range f[1:] {
			dep, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			allowed := false
			for _, a := range rules[ri].allow {
				if match(a, dep) {
					allowed = true
					break
				}
			}
			if !allowed {
				t.Errorf("%s imports %s, across the rule of %q (DESIGN.md, Package map)", pkg, dep, rules[ri].pkg)
			}
		}
	}
	if n < 20 {
		t.Fatalf("only %d packages listed:\n%s", n, out)
	}
}

// testOnly are the packages only tests may import: a package's non-test
// files importing one fails TestTestOnlyImports.
var testOnly = []string{"internal/testutil/...", "internal/engine", "internal/privtest", "internal/testproc", "llmsim/simtest"}

// TestTestOnlyImports fails when a package's non-test files import a
// test-only package (one of testOnly), unless the package is test-only
// itself.
func TestTestOnlyImports(t *testing.T) {
	cmd := exec.Command(goTool(), "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		pkg := strings.TrimPrefix(f[0], module)
		for _, imp := range f[1:] {
			dep, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			for _, only := range testOnly {
				if match(only, dep) && !isTestOnly(pkg) {
					t.Errorf("%s imports %s, a test-only package, outside its tests", pkg, dep)
				}
			}
		}
	}
}

// TestTestOnlyListed fails on a package that only tests import and that
// testOnly does not list.
func TestTestOnlyListed(t *testing.T) {
	cmd := exec.Command(goTool(), "list", "-f", "{{.ImportPath}} {{.Name}} {{join .Imports \" \"}} | {{join .TestImports \" \"}} {{join .XTestImports \" \"}}", module+"...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	libs := map[string]bool{} // the packages not main
	imported, testImported := map[string]bool{}, map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		before, after, _ := strings.Cut(sc.Text(), " | ")
		f := strings.Fields(before)
		pkg := strings.TrimPrefix(f[0], module)
		if f[1] != "main" {
			libs[pkg] = true
		}
		for _, imp := range f[2:] {
			imported[strings.TrimPrefix(imp, module)] = true
		}
		for _, imp := range strings.Fields(after) {
			if dep := strings.TrimPrefix(imp, module); dep != pkg {
				testImported[dep] = true
			}
		}
	}
	for pkg := range libs {
		if testImported[pkg] && !imported[pkg] && !isTestOnly(pkg) {
			t.Errorf("%s is imported by tests only: put it on testOnly (internal/layout)", pkg)
		}
	}
}

// isTestOnly: p is on testOnly.
func isTestOnly(p string) bool {
	for _, only := range testOnly {
		if match(only, p) {
			return true
		}
	}
	return false
}

// The systemd service's package links neither the load generator nor the
// perturbations, whatever it imports indirectly. It links the session (the
// agent API runs sessions for remote runs) but not the jobs that join load
// and observation, nor the attribution.
func TestDaemonDependencies(t *testing.T) {
	out, err := exec.Command(goTool(), "list", "-deps", module+"daemon").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		// The daemon walks live traffic's critical path (live,
		// correlate/critpath and the result types of exporter/report),
		// and drives no load.
		for _, banned := range []string{"loadgen", "perturb", "job", "llmsim", "host"} {
			if match(banned+"/...", strings.TrimPrefix(dep, module)) && strings.HasPrefix(dep, module) {
				t.Errorf("daemon depends on %s", dep)
			}
		}
	}
}
