package main

import (
	"encoding/json"
	"io"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/bpfbench/bpfbench/internal/version"
	"github.com/bpfbench/bpfbench/job/load"
	"github.com/bpfbench/bpfbench/job/validate"
)

// findCmd returns the command at path (e.g. "perturb cpu") of a fresh tree.
func findCmd(t *testing.T, path string) *cobra.Command {
	t.Helper()
	c, _, err := newRoot(io.Discard, io.Discard).Find(strings.Fields(path))
	if err != nil || c.Name() != strings.Fields(path)[len(strings.Fields(path))-1] {
		t.Fatalf("no command %q: %v", path, err)
	}
	return c
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		code, stdout, stderr := runCLI(args...)
		if code != 0 || stderr != "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr)
		}
		for _, want := range []string{version.Version, version.Revision, runtime.Version()} {
			if !strings.Contains(stdout, want) {
				t.Errorf("%v prints %q, without %q", args, stdout, want)
			}
		}
	}
	code, stdout, _ := runCLI("version", "-o", "json")
	var info version.Info
	if err := json.Unmarshal([]byte(stdout), &info); code != 0 || err != nil || info.GoVersion != runtime.Version() || info.Version == "" {
		t.Errorf("version -o json: exit %d, %q: %v", code, stdout, err)
	}
}

// help CMD and CMD --help show that command's usage and flags, on stdout.
func TestHelpOfACommand(t *testing.T) {
	for _, args := range [][]string{{"help", "run"}, {"run", "--help"}, {"run", "-h"}} {
		code, stdout, _ := runCLI(args...)
		if code != 0 {
			t.Errorf("%v: exit %d", args, code)
		}
		for _, want := range []string{"bpfbench run --target URL", "--pid int", "--out DIR", "--no-progress", "--otlp-endpoint", "--log.level"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("%v lacks %q:\n%s", args, want, stdout)
			}
		}
		if strings.Contains(stdout, "Available Commands") {
			t.Errorf("%v printed the top-level usage", args)
		}
	}
	code, stdout, _ := runCLI("report", "--help")
	if code != 0 || !strings.Contains(stdout, "bpfbench report DIR") || !strings.Contains(stdout, "Flags:") || !strings.Contains(stdout, "--help") {
		t.Errorf("report --help: exit %d\n%s", code, stdout)
	}
	code, stdout, _ = runCLI("help", "perturb", "cpu")
	if code != 0 || !strings.Contains(stdout, "--threads int") || !strings.Contains(stdout, "--output string") {
		t.Errorf("help perturb cpu: exit %d\n%s", code, stdout)
	}
	// No command: the usage on stderr, exit 2, as before.
	if code, stdout, stderr := runCLI(); code != 2 || stdout != "" || !strings.Contains(stderr, "Available Commands") {
		t.Errorf("no command: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, _, stderr := runCLI("nosuch"); code != 2 || !strings.Contains(stderr, `unknown command "nosuch"`) {
		t.Errorf("unknown command: exit %d, %q", code, stderr)
	}
}

func TestCompletion(t *testing.T) {
	for shell, want := range map[string]string{"bash": "__start_bpfbench", "zsh": "#compdef bpfbench", "fish": "complete -c bpfbench"} {
		code, stdout, stderr := runCLI("completion", shell)
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("completion %s: exit %d, stderr %q, script without %q (%d bytes)", shell, code, stderr, want, len(stdout))
		}
	}
	// The load options' values complete.
	code, stdout, _ := runCLI(cobra.ShellCompNoDescRequestCmd, "run", "--endpoint", "")
	if code != 0 || !strings.Contains(stdout, "chat") || !strings.Contains(stdout, "completions") {
		t.Errorf("completing run --endpoint: exit %d %q", code, stdout)
	}
}

// Every command that takes the load options takes all of them, with the
// same defaults and the same help; the phased jobs (demo, validate) take
// the subset they honour (load.AddPhasedFlags), from the same definitions,
// and the others not at all: a flag in a command's help works.
func TestLoadOptionsEverywhere(t *testing.T) {
	opts := load.Flags()
	scenario := map[string]bool{}
	for _, n := range load.Scenario {
		scenario[n] = true
		if opts.Lookup(n) == nil {
			t.Errorf("load.Scenario names --%s, which is no load option", n)
		}
	}
	for _, path := range []string{"load", "run", "sweep", "validate", "demo"} {
		fs := findCmd(t, path).Flags()
		phased := path == "validate" || path == "demo"
		opts.VisitAll(func(f *pflag.Flag) {
			g := fs.Lookup(f.Name)
			left := phased && (scenario[f.Name] || path == "demo" && f.Name == "target")
			switch {
			case left && g != nil:
				t.Errorf("%s takes --%s, which its phases decide", path, f.Name)
			case left:
			case g == nil:
				t.Errorf("%s does not take --%s", path, f.Name)
			case phased && f.Name == "rate":
				// The phases need a steady rate: the default is theirs,
				// and their help shows it.
				if g.DefValue != strconv.FormatFloat(validate.DefaultPhaseRate, 'g', -1, 64) || strings.Contains(g.Usage, "inf") {
					t.Errorf("%s --rate: default %q (%q), want the phases' %v", path, g.DefValue, g.Usage, validate.DefaultPhaseRate)
				}
			case g.DefValue != f.DefValue || g.Usage != f.Usage:
				t.Errorf("%s --%s: default %q (%q), want %q (%q)", path, f.Name, g.DefValue, g.Usage, f.DefValue, f.Usage)
			}
		})
	}
	if opts.Lookup("no-progress") == nil || opts.Lookup("model").DefValue != "" || opts.Lookup("rate").DefValue != "inf" {
		t.Errorf("load options: no-progress %v, model default %q, rate default %q",
			opts.Lookup("no-progress") != nil, opts.Lookup("model").DefValue, opts.Lookup("rate").DefValue)
	}
	// run takes --no-progress on the command line (it refused it before).
	code, _, stderr := runCLI("run", "--no-progress", "--target", "http://127.0.0.1:1", "--port", "1", "--out", t.TempDir())
	if code == 0 || strings.Contains(stderr, "unknown flag") || !strings.Contains(stderr, "nobody listens on TCP port 1") {
		t.Errorf("run --no-progress: exit %d, %q", code, stderr)
	}
	// The phases of demo and validate decide the requests: those options
	// are not theirs, in their help or on their command line.
	for _, args := range [][]string{{"demo", "--num-requests", "5"}, {"validate", "--sim", "--input-len", "8"}, {"demo", "--target", "http://127.0.0.1:1"}} {
		code, _, stderr := runCLI(args...)
		if code != 2 || !strings.Contains(stderr, "unknown flag: "+args[len(args)-2]) {
			t.Errorf("%v: exit %d, %q", args, code, stderr)
		}
	}
	for _, path := range []string{"demo", "validate"} {
		_, help, _ := runCLI(path, "--help")
		for _, n := range []string{"--num-requests", "--dataset", "--input-len", "--turns"} {
			if strings.Contains(help, n+" ") {
				t.Errorf("%s --help lists %s, which it does not take", path, n)
			}
		}
		if !strings.Contains(help, "--output-len") || !strings.Contains(help, "--endpoint") {
			t.Errorf("%s --help lacks the load options that shape each request", path)
		}
		if !strings.Contains(help, "--rate float") || strings.Contains(help, "(default inf)") || !strings.Contains(help, "(default 4)") {
			t.Errorf("%s --help does not show --rate's default of 4 req/s:\n%s", path, help)
		}
		if (path == "demo") == strings.Contains(help, "--target URL") {
			t.Errorf("%s --help: --target listed %v", path, path != "demo")
		}
	}
}

// The same spelling everywhere, and the old spellings still accepted
// (deprecated: hidden from help, a warning when used).
func TestFlagSpellings(t *testing.T) {
	for _, path := range []string{"attach", "run", "sweep", "demo", "validate", "daemon", "load", "check", "version", "perturb cpu"} {
		fs := findCmd(t, path).InheritedFlags()
		for _, name := range []string{"log.level", "log.format"} {
			if fs.Lookup(name) == nil {
				t.Errorf("%s does not take the root's --%s", path, name)
			}
		}
	}
	for _, path := range []string{"attach", "check", "version", "perturb cpu", "perturb io", "perturb net", "perturb client"} {
		if f := findCmd(t, path).Flags().Lookup("output"); f == nil || f.Shorthand != "o" || f.DefValue != "table" {
			t.Errorf("%s: --output/-o table|json missing", path)
		}
	}
	for _, d := range []struct{ path, old string }{
		{"attach", "log-level"}, {"run", "log-level"}, {"validate", "log-level"},
		{"load", "out"}, {"sweep", "knee-out"}, {"validate", "cpus"},
		{"perturb cpu", "json"}, {"perturb io", "json"}, {"perturb net", "json"}, {"perturb client", "json"},
	} {
		if f := findCmd(t, d.path).Flags().Lookup(d.old); f == nil || f.Deprecated == "" || !f.Hidden {
			t.Errorf("%s --%s: want a deprecated alias", d.path, d.old)
		}
	}
	for _, path := range []string{"run", "demo", "validate", "sweep"} {
		if f := findCmd(t, path).Flags().Lookup("out"); f == nil || f.Deprecated != "" || !strings.Contains(f.Usage, "DIR") {
			t.Errorf("%s --out is not a run directory", path)
		}
	}
	// load's logs are checked like the others'.
	if code, _, stderr := runCLI("load", "--log.level", "loud", "--target", "http://127.0.0.1:1"); code != 2 || !strings.Contains(stderr, `invalid argument "loud" for "--log.level" flag: use debug, info, warn or error`) {
		t.Errorf("load --log.level loud: exit %d, %q", code, stderr)
	}
	// --json still prints the report alone on stdout; the warning goes to stderr.
	code, stdout, stderr := runCLI("perturb", "cpu", "--threads", "1", "--duty", "0.1", "--duration", "200ms", "--json")
	var rep struct{ Perturbation string }
	if err := json.Unmarshal([]byte(stdout), &rep); code != 0 || err != nil || rep.Perturbation != "cpu" {
		t.Errorf("perturb cpu --json: exit %d, stdout %q: %v", code, stdout, err)
	}
	if !strings.Contains(stderr, "--json has been deprecated, use --output json") {
		t.Errorf("no deprecation warning on stderr: %q", stderr)
	}
	// pflag takes no single-dash long flags.
	if code, _, stderr := runCLI("attach", "-duration", "1s", "1"); code != 2 || !strings.Contains(stderr, "unknown shorthand flag") {
		t.Errorf("attach -duration: exit %d, %q", code, stderr)
	}
}

// The jobs that hold a run's results run under the soft memory limit.
func TestMemoryBoundCommands(t *testing.T) {
	root := newRoot(io.Discard, io.Discard)
	for path, want := range map[string]bool{"run": true, "demo": true, "validate": true, "sweep": true, "load": false, "attach": false, "help run": false} {
		c, _, err := root.Find(strings.Fields(path))
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Annotations[memoryBound] != ""; got != want {
			t.Errorf("%s memory bound: %v, want %v", path, got, want)
		}
	}
}

// The commands that follow a server while loading it take the server's
// metrics flags, from one definition.
func TestServerMetricsFlags(t *testing.T) {
	want := pflag.NewFlagSet("", pflag.ContinueOnError)
	(&serverMetricsFlags{}).add(want)
	for _, path := range []string{"run", "sweep", "validate"} {
		fs := findCmd(t, path).Flags()
		want.VisitAll(func(f *pflag.Flag) {
			if g := fs.Lookup(f.Name); g == nil || g.DefValue != f.DefValue || g.Usage != f.Usage {
				t.Errorf("%s --%s: %+v, want the shared definition", path, f.Name, g)
			}
		})
	}
}
