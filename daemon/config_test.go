package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadConfig(t *testing.T) {
	cfg, err := LoadConfig(writeConfig(t, `
listen_address: ":9999"
refresh_interval: 2s
targets:
  - name: vllm
    comm: python3
  - name: sglang
    cgroup: /system.slice/sglang.service
  - name: one
    pid: 42
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ListenAddress != ":9999" || cfg.RefreshInterval != 2*time.Second || len(cfg.Targets) != 3 || cfg.LogLevel != "info" {
		t.Errorf("config %+v", cfg)
	}
	empty, err := LoadConfig(writeConfig(t, ""))
	if err != nil || empty.ListenAddress != ":9464" || !empty.Incidents.Enabled {
		t.Errorf("empty file: %+v %v (incidents on by default)", empty, err)
	}
	inc, err := LoadConfig(writeConfig(t, `
targets: [{name: vllm, comm: python3}]
incidents:
  dir: /tmp/x
  rule: {p99_times_normal: 3, cause: cpu_runqueue, share: 0.5, for: 20s}
  targets: {vllm: {p99_ms: 80}}
`))
	if err != nil || inc.Incidents.Rule.trigger().String() != "gap p99 at least 3× the normal p99 and cpu_runqueue at least 50% of the p99 gaps' excess, over 10s of gaps, for 20s" {
		t.Errorf("incidents: %v: %+v", err, inc.Incidents)
	}
}

func TestLoadConfigErrors(t *testing.T) {
	for body, want := range map[string]string{
		"targets:\n  - name: a\n":                                  "set exactly one of pid, comm or cgroup",
		"targets:\n  - name: a\n    pid: 1\n    comm: x\n":         "set exactly one",
		"targets:\n  - name: 'a b'\n    pid: 1\n":                  "must be 1-64 characters",
		"targets:\n  - name: host\n    pid: 1\n":                   "reserved name host",
		"targets:\n  - name: a\n    cgroup: system.slice\n":        "absolute cgroup path",
		"targets:\n  - name: a\n    comm: averyveryverylongname\n": "15 characters",
		"refresh_interval: -1s\n":                                  "refresh_interval must be positive",
		"listen_adress: :1\n":                                      "field listen_adress not found",
		"targets: [\n":                                             "yaml",
		"incidents:\n  rule: {cause: gpu, share: 0.5}\n":           "cause \"gpu\" is not one of",
		"incidents:\n  rule: {for: 10s}\n":                         "no criterion",
		"incidents:\n  targets: {nope: {p99_ms: 10}}\n":            "not the name of a configured target",
		"incidents:\n  keep: -1\n":                                 "must not be negative",
	} {
		_, err := LoadConfig(writeConfig(t, body))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("config %q: error %v, want it to say %q", body, err, want)
		}
	}
	if _, err := LoadConfig("/nonexistent/bpfbench.yaml"); err == nil || !strings.Contains(err.Error(), "reading config") {
		t.Errorf("missing file: %v", err)
	}
}

func TestResolver(t *testing.T) {
	proc := t.TempDir()
	mk := func(pid, comm, cgroup string) {
		d := filepath.Join(proc, pid)
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, "comm"), []byte(comm+"\n"), 0o644)
		os.WriteFile(filepath.Join(d, "cgroup"), []byte("12:cpu:"+cgroup+"\n0::"+cgroup+"\n"), 0o644)
	}
	mk("10", "python3", "/system.slice/vllm.service")
	mk("11", "python3", "/user.slice")
	mk("12", "tokenizer", "/system.slice/vllm.service/worker")
	mk("13", "bash", "/system.slice/vllm.service2")
	got, err := Resolver{Proc: proc, Targets: []Target{
		{Name: "byPid", Pid: 13},
		{Name: "byCgroup", Cgroup: "/system.slice/vllm.service"},
		{Name: "byComm", Comm: "python3"},
		{Name: "gone", Pid: 99},
	}}.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint32]uint32{13: 1, 10: 2, 12: 2, 11: 3}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("pid %d: slot %d, want %d", k, got[k], v)
		}
	}
}
