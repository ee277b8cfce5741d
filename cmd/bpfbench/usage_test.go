package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/bpfbench/bpfbench/correlate/critpath"
	"github.com/bpfbench/bpfbench/internal/manifest"
	"github.com/bpfbench/bpfbench/llmsim/sim"
	"github.com/bpfbench/bpfbench/loadgen/transport"
)

// Every command's missing required flag or argument, and every bad one
// that is found before anything runs, is a usage error: exit 2, and one
// line on stderr naming the flag or the argument.
func TestUsageErrors(t *testing.T) {
	target := "http://127.0.0.1:1" // nothing listens: no case may get as far as sending
	slo := "p99_ttft_ms<=500"
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"load without --target", []string{"load"}, "--target"},
		{"load --target without a value", []string{"load", "--target"}, "--target"},
		{"load --target ftp", []string{"load", "--target", "ftp://127.0.0.1:1"}, `--target "ftp://127.0.0.1:1"`},
		{"load --target without a host", []string{"load", "--target", "http://"}, `--target "http://"`},
		{"load unknown flag", []string{"load", "--target", target, "--dataset-name", "x"}, "--dataset-name"},
		{"load --num-requests not a number", []string{"load", "--target", target, "--num-requests", "many"}, "--num-requests"},
		{"load argument", []string{"load", "--target", target, "extra"}, `"extra"`},
		{"run without --target", []string{"run", "--pid", "1"}, "--target"},
		{"run --pid and --port", []string{"run", "--target", target, "--pid", "1", "--port", "1"}, "--pid or --port"},
		{"sweep without --target", []string{"sweep", "--slo", slo}, "--target"},
		{"sweep without --slo", []string{"sweep", "--target", target}, "--slo"},
		{"sweep bad --slo", []string{"sweep", "--target", target, "--slo", "bogus"}, `--slo: SLO "bogus"`},
		{"sweep --out a file", []string{"sweep", "--target", target, "--slo", slo, "--out", "steps.json"}, "--out steps.json"},
		{"validate without a server", []string{"validate"}, "--target"},
		{"attach without a pid", []string{"attach"}, "pid"},
		{"attach two pids", []string{"attach", "1", "2"}, "pid"},
		{"attach --cgroup without a value", []string{"attach", "--cgroup"}, "--cgroup"},
		{"diff one run", []string{"diff", "a"}, "two runs"},
		{"report without a directory", []string{"report"}, "run directory"},
		{"perturb without a kind", []string{"perturb"}, "needs a kind"},
		{"perturb unknown kind", []string{"perturb", "bogus"}, `"bogus"`},
		{"perturb net without --iface", []string{"perturb", "net"}, "--iface"},
		{"perturb client without --target", []string{"perturb", "client"}, "--target"},
		{"daemon argument", []string{"daemon", "extra"}, `"extra"`},
		{"version argument", []string{"version", "extra"}, `"extra"`},
		{"check argument", []string{"check", "extra"}, `"extra"`},
		{"completion without a shell", []string{"completion"}, "needs a shell"},
		{"completion unknown shell", []string{"completion", "tcsh"}, `"tcsh"`},
		{"help unknown topic", []string{"help", "nosuch"}, `"nosuch"`},
		{"bad --log.level before the command", []string{"--log.level", "loud", "version"}, `"loud" for "--log.level"`},
		{"bad --log.level after it", []string{"version", "--log.level", "loud"}, `"loud" for "--log.level"`},
		{"bad --log.format", []string{"check", "--log.format", "xml"}, `"xml" for "--log.format"`},
		{"bad --log-level (old spelling)", []string{"attach", "1", "--log-level", "loud"}, `"loud" for "--log-level"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(tc.args...)
			line := oneLine(t, stderr)
			if code != statusUsage || !strings.Contains(line, tc.want) {
				t.Errorf("%v: exit %d, %q; want exit 2, one line naming %s", tc.args, code, line, tc.want)
			}
		})
	}
}

// --log.level and --log.format are the root's: every command takes them,
// before or after its name.
func TestGlobalLogFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--log.level", "debug", "version"},
		{"version", "--log.level", "debug", "--log.format", "json"},
		{"--log.format=json", "diff", "--help"},
	} {
		if code, stdout, stderr := runCLI(args...); code != 0 || stdout == "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
	// Help lists them under every command.
	if _, stdout, _ := runCLI("check", "--help"); !strings.Contains(stdout, "Global Flags:") || !strings.Contains(stdout, "--log.level") {
		t.Errorf("check --help lists no global --log.level:\n%s", stdout)
	}
}

// The daemon's --log.level and --log.format, when given, win over its
// configuration file's log_level and log_format, at the start and on
// every reload; the file's apply otherwise.
func TestDaemonLogFlagsOverConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, []byte("log_level: warn\nlog_format: json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args                  []string
		wantLevel, wantFormat string
	}{
		{nil, "warn", "json"},
		{[]string{"--log.level", "debug"}, "debug", "json"},
		{[]string{"--log.format", "text", "--log.level", "error"}, "error", "text"},
	} {
		root := newRoot(io.Discard, io.Discard)
		cmd, rest, err := root.Find(append([]string{"daemon", "--config", file}, tc.args...))
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.ParseFlags(rest); err != nil {
			t.Fatal(err)
		}
		cfg, err := daemonConfigLoader(cmd, file)()
		if err != nil || cfg.LogLevel != tc.wantLevel || cfg.LogFormat != tc.wantFormat {
			t.Errorf("%v: level %q, format %q (%v); want %q, %q", tc.args, cfg.LogLevel, cfg.LogFormat, err, tc.wantLevel, tc.wantFormat)
		}
	}
}

// The root's help names every cause of the critical path, and so does
// run's.
func TestHelpNamesEveryCause(t *testing.T) {
	_, root, _ := runCLI("--help")
	_, run, _ := runCLI("run", "--help")
	for _, c := range critpath.CauseNames() {
		if !strings.Contains(root, c) {
			t.Errorf("bpfbench --help does not name the cause %s", c)
		}
		if !strings.Contains(run, c) {
			t.Errorf("bpfbench run --help does not name the cause %s", c)
		}
	}
}

// authSim serves llmsim and keeps the Authorization header of every
// request.
func authSim(t *testing.T) (string, func() []string) {
	t.Helper()
	s, err := sim.New(sim.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		seen []string
	)
	h := s.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { ts.CloseClientConnections(); ts.Close(); s.Close() })
	return ts.URL, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// $OPENAI_API_KEY is sent as a bearer token, on every request and on the
// model lookup, unless --header gives an Authorization of its own; the
// key is in neither the result nor the output.
func TestOpenAIAPIKey(t *testing.T) {
	const key = "sk-test-0123456789"
	t.Setenv(transport.APIKeyEnv, key)
	for _, tc := range []struct {
		name  string
		extra []string
		want  string
	}{
		{"env", nil, "Bearer " + key},
		{"env, raw transport off", []string{"--net-http"}, "Bearer " + key},
		{"--header wins", []string{"--header", "Authorization=Bearer mine"}, "Bearer mine"},
		{"--header Authorization= sends none", []string{"--header", "Authorization="}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, seen := authSim(t)
			out := filepath.Join(t.TempDir(), "result.json")
			args := append([]string{"load", "--target", url, "--num-requests", "3", "--input-len", "4", "--output-len", "2", "--result", out}, tc.extra...)
			code, stdout, stderr := runCLI(args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			paths := map[string]bool{}
			for _, s := range seen() {
				path, auth, _ := strings.Cut(s, " ")
				paths[path] = true
				if auth != tc.want {
					t.Errorf("%s: Authorization %q, want %q", path, auth, tc.want)
				}
			}
			if !paths["/v1/models"] || !paths["/v1/completions"] {
				t.Errorf("requests seen: %q", seen())
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			for what, s := range map[string]string{"result.json": string(b), "stdout": stdout, "stderr": stderr} {
				if strings.Contains(s, key) || strings.Contains(s, "Bearer mine") {
					t.Errorf("%s holds the key", what)
				}
			}
		})
	}
}

// A run's manifest records bpfbench's arguments with a credential
// header's value redacted (what `bpfbench run` writes into result.json).
func TestManifestRedactsHeaders(t *testing.T) {
	args := []string{"bpfbench", "run", "--target", "http://127.0.0.1:8000", "--header", "Authorization=Bearer sk-secret", "--header=X-Api-Key=sk-secret", "--header", "X-Tenant=a"}
	m, _ := manifest.Collect(os.Getpid(), manifest.Options{Args: args})
	got := strings.Join(m.Bpfbench.Args, " ")
	if strings.Contains(got, "sk-secret") || !strings.Contains(got, "X-Tenant=a") || !strings.Contains(got, "Authorization="+manifest.SecretValue) {
		t.Errorf("manifest args: %s", got)
	}
}

// A password in --target is in neither the result (its target reads
// xxxxx, as in the manifest) nor the output.
func TestTargetPasswordRedacted(t *testing.T) {
	url, _ := authSim(t)
	target := strings.Replace(url, "http://", "http://bench:s3cr3t-pw@", 1)
	out := filepath.Join(t.TempDir(), "result.json")
	code, stdout, stderr := runCLI("load", "--target", target, "--num-requests", "2", "--input-len", "4", "--output-len", "2", "--result", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	bb, _ := readJSON(t, out)["bpfbench"].(map[string]any)
	if got := bb["target"]; got != strings.Replace(target, "s3cr3t-pw", "xxxxx", 1) {
		t.Errorf("result's bpfbench.target %v", got)
	}
	for what, s := range map[string]string{"result.json": string(b), "stdout": stdout, "stderr": stderr} {
		if strings.Contains(s, "s3cr3t-pw") {
			t.Errorf("%s holds the password", what)
		}
	}
}

// perturb client sends --header and $OPENAI_API_KEY as load does, on the
// model lookup and on its streams.
func TestPerturbClientSendsTheKey(t *testing.T) {
	const key = "sk-test-perturb"
	t.Setenv(transport.APIKeyEnv, key)
	url, seen := authSim(t)
	code, _, stderr := runCLI("perturb", "client", "--target", url, "--stop-after", "100ms", "--duration", "600ms", "--header", "X-Tenant=bench")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	got := seen()
	if len(got) < 2 {
		t.Fatalf("requests seen %q, want the model lookup and a stream", got)
	}
	for _, s := range got {
		if !strings.HasSuffix(s, " Bearer "+key) {
			t.Errorf("request %q without the key", s)
		}
	}
	if strings.Contains(stderr, key) {
		t.Error("the key is in the output")
	}
	code, _, stderr = runCLI("perturb", "client", "--target", url, "--stop-after", "100ms", "--header", "nokey")
	if code != 2 || !strings.Contains(stderr, "KEY=VALUE") {
		t.Errorf("a malformed header: exit %d %q, want a usage error", code, stderr)
	}
}
