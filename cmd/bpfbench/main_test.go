package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"golang.org/x/crypto/bcrypt"
	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testproc"
	"github.com/bpfbench/bpfbench/internal/testutil"
	"github.com/bpfbench/bpfbench/perturb"
)

const envCLI = "BPFBENCH_TEST_AS_CLI"

func TestMain(m *testing.M) {
	// Nothing of a killed test runs on; the reaper outlives its parent by
	// design.
	isReaper := func(argv []string) bool { return len(argv) > 1 && argv[1] == "reap" }
	if !isReaper(os.Args) {
		testutil.EndWithParent(os.Getenv(envCLI) != "1", isReaper)
	}
	if os.Getenv(envCLI) == "1" {
		processSetup()
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	testproc.Register("sleep", func(args []string, ready func(...int), wait func()) {
		runtime.LockOSThread()
		n, _ := strconv.Atoi(args[0])
		ready(unix.Gettid())
		wait()
		for range n {
			time.Sleep(20 * time.Millisecond)
		}
	})
	testproc.Main()
	// Perturbations run as `bpfbench perturb ...` children: this binary,
	// acting as the CLI.
	perturb.SelfCommand = func(args ...string) (*exec.Cmd, error) { return cliCmd(args...), nil }
	os.Exit(m.Run())
}

// cli returns a command running this test binary as bpfbench.
func cliCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), envCLI+"=1")
	return cmd
}

// runCLI runs the CLI in-process. Commands that change the whole process
// (attach lowers every thread to nice 19; --cpus restricts every thread)
// run through runCLIChild, so that nothing outlives them in the tests.
func runCLI(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

// cliProc is the CLI running as a child process, its stderr read as it
// comes (for a ready line).
type cliProc struct {
	cmd    *exec.Cmd
	stdout *bytes.Buffer
	stderr *testutil.Lines
}

// startCLI starts the CLI as a child process; it is killed at the test's
// end if still running.
func startCLI(t *testing.T, args ...string) *cliProc {
	t.Helper()
	p := &cliProc{cmd: cliCmd(args...), stdout: &bytes.Buffer{}}
	p.cmd.Stdout = p.stdout
	errPipe, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.stderr = testutil.WatchLines(errPipe)
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	return p
}

// wait waits for the child's exit and returns its status (-1 when it was
// killed), or kills it and fails t with why after timeout.
func (p *cliProc) wait(t *testing.T, timeout time.Duration, why string) int {
	t.Helper()
	select {
	case <-p.stderr.Done():
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.stderr.Done()
		_ = p.cmd.Wait()
		t.Fatalf("%s (within %v):\n%s", why, timeout, p.stderr)
	}
	_ = p.cmd.Wait()
	return p.cmd.ProcessState.ExitCode()
}

func oneLine(t *testing.T, stderr string) string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if len(lines) != 1 || lines[0] == "" {
		t.Errorf("want exactly one line on stderr, got %q", stderr)
	}
	return lines[0]
}

func TestAttachBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"non-numeric", []string{"attach", "vllm"}, "not a process id"},
		{"pid 0", []string{"attach", "0"}, "pid 0 is not a process"},
		{"missing pid", []string{"attach", "999999999"}, "no process with pid 999999999"},
		{"no pid", []string{"attach"}, "needs exactly one pid"},
		{"bad output", []string{"attach", "1", "--output", "xml"}, "use table or json"},
		{"bad port", []string{"attach", "1", "--port", "70000"}, "out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(tc.args...)
			if code == 0 {
				t.Fatalf("exit status 0, want non-zero")
			}
			if line := oneLine(t, stderr); !strings.Contains(line, tc.want) {
				t.Errorf("stderr %q does not say %q", line, tc.want)
			}
		})
	}
}

func TestAttachWithoutPrivileges(t *testing.T) {
	privtest.Require(t)
	// Copy the test binary where an unprivileged user can run it.
	dir, err := os.MkdirTemp("", "bpfbench-unpriv")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "bpfbench")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "attach", strconv.Itoa(os.Getpid()), "--duration", "1s")
	cmd.Env = append(os.Environ(), envCLI+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	if err == nil {
		t.Fatal("attach as nobody succeeded, want an error")
	}
	line := oneLine(t, stderr.String())
	if !strings.Contains(line, "needs privileges") || !strings.Contains(line, "CAP_BPF") {
		t.Errorf("stderr %q does not name the fix", line)
	}
}

func TestAttachJSONAndTargetExit(t *testing.T) {
	privtest.Require(t)
	child := testproc.Start(t, "sleep", "25")
	// The ready line (info) says the programs are loaded and attached.
	a := startCLI(t, "attach", strconv.Itoa(child.Pid()), "--output", "json", "--log.level", "info")
	a.stderr.Wait(t, "msg=attached", 60*time.Second)
	child.Go(t)
	var r struct {
		code           int
		stdout, stderr string
	}
	r.code = a.wait(t, 30*time.Second, "attach did not end when its target exited")
	r.stdout, r.stderr = a.stdout.String(), a.stderr.String()
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "exited") {
		t.Errorf("stderr does not say the target exited: %q", r.stderr)
	}
	var out struct {
		Pid      int     `json:"pid"`
		Comm     string  `json:"comm"`
		Duration float64 `json:"duration_seconds"`
		Lost     *uint64 `json:"lost_events"`
		Sched    struct {
			Runq struct {
				Count uint64  `json:"count"`
				P50   float64 `json:"p50"`
				P99   float64 `json:"p99"`
				Max   float64 `json:"max"`
				Sum   float64 `json:"sum"`
			} `json:"runqueue_latency_seconds"`
			OffCPU map[string]float64 `json:"offcpu_seconds"`
		} `json:"sched"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, r.stdout)
	}
	t.Logf("%s", r.stdout)
	if out.Pid != child.Pid() || out.Comm == "" || out.Duration <= 0 || out.Lost == nil {
		t.Errorf("header fields wrong: %+v", out)
	}
	for _, k := range []string{"preempted", "io_wait", "sleep"} {
		if _, ok := out.Sched.OffCPU[k]; !ok {
			t.Errorf("offcpu_seconds has no %q", k)
		}
	}
	if out.Sched.OffCPU["sleep"] < 0.4 || out.Sched.Runq.Count == 0 {
		t.Errorf("a child sleeping 25 x 20 ms shows sleep %.3fs, %d run-queue waits", out.Sched.OffCPU["sleep"], out.Sched.Runq.Count)
	}
}

func TestCheck(t *testing.T) {
	privtest.Require(t)
	code, stdout, stderr := runCLI("check")
	t.Logf("\n%s%s", stdout, stderr)
	if code != 0 {
		t.Fatalf("check exit %d on the CI kernel", code)
	}
	for _, want := range []string{"ok    kernel", "tp_btf sched_switch", "uprobes"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("check output lacks %q", want)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || (f[0] != "ok" && f[0] != "warn" && f[0] != "fail") {
			t.Errorf("malformed check line %q", line)
		}
	}
}

// daemonProc is a daemon running as a child process.
type daemonProc struct {
	cmd   *exec.Cmd
	addr  string
	progs []ebpf.ProgramID
	links []link.ID
	logs  *bytes.Buffer
	done  chan error
}

func startDaemon(t *testing.T, args ...string) *daemonProc {
	t.Helper()
	cmd := cliCmd(append([]string{"daemon", "--web.listen-address", "127.0.0.1:0", "--log.format", "json"}, args...)...)
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemonProc{cmd: cmd, logs: &bytes.Buffer{}, done: make(chan error, 1)}
	go func() { d.done <- cmd.Wait(); pw.Close() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	found := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			d.logs.WriteString(sc.Text() + "\n")
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) != nil {
				continue
			}
			switch rec["msg"] {
			case "collector started":
				progs, _ := rec["programs"].([]any)
				for _, id := range progs {
					d.progs = append(d.progs, ebpf.ProgramID(id.(float64)))
				}
				links, _ := rec["links"].([]any)
				for _, id := range links {
					d.links = append(d.links, link.ID(id.(float64)))
				}
			case "serving metrics":
				d.addr = rec["address"].(string)
				close(found)
			}
		}
	}()
	select {
	case <-found:
	case err := <-d.done:
		t.Fatalf("daemon exited: %v\n%s", err, d.logs)
	case <-time.After(20 * time.Second):
		t.Fatalf("daemon did not start serving\n%s", d.logs)
	}
	return d
}

func (d *daemonProc) stop(t *testing.T) {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-d.done:
		if err != nil {
			t.Fatalf("daemon exit after SIGTERM: %v\n%s", err, d.logs)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("daemon did not exit on SIGTERM\n%s", d.logs)
	}
}

func TestDaemonMetricsAndSIGTERM(t *testing.T) {
	privtest.Require(t)
	child := testproc.Start(t, "sleep", "100")
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	body := fmt.Sprintf("refresh_interval: 200ms\ntargets:\n  - name: sleeper\n    pid: %d\n  - name: nothing\n    comm: no-such-comm\n", child.Pid())
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, "--config", cfg)
	if len(d.progs) == 0 || len(d.links) == 0 {
		t.Fatalf("daemon logged no program or link ids\n%s", d.logs)
	}
	// A refresh has assigned the target its process.
	testutil.WaitMetric(t, "http://"+d.addr+"/metrics", `bpfbench_target_processes{target="sleeper"} 1`, 10*time.Second)
	child.Go(t)
	child.Wait(t, 10*time.Second)
	resp, err := http.Get("http://" + d.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body2, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	metrics := string(body2)
	for _, want := range []string{
		`bpfbench_build_info{`,
		`bpfbench_sched_runqueue_latency_seconds_bucket{target="host"`,
		`bpfbench_sched_runqueue_latency_seconds_count{target="sleeper"}`,
		`bpfbench_sched_offcpu_duration_seconds_sum{state="sleep",target="sleeper"}`,
		`bpfbench_ringbuf_lost_events_total{collector="sched"} 0`,
		`bpfbench_decode_errors_total{collector="sched"} 0`,
		`bpfbench_target_processes{target="nothing"} 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	problems, err := promlint.New(bytes.NewReader(body2)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	var sleepSum float64
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, `bpfbench_sched_offcpu_duration_seconds_sum{state="sleep",target="sleeper"}`) {
			sleepSum, _ = strconv.ParseFloat(strings.Fields(line)[1], 64)
		}
	}
	if sleepSum < 1.5 {
		t.Errorf("target slept 100 x 20 ms, daemon shows %.3fs", sleepSum)
	}
	d.stop(t)
	privtest.AssertReleased(t, d.progs, d.links)
}

func TestDaemonTLSAndBasicAuth(t *testing.T) {
	privtest.Require(t)
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	os.WriteFile(filepath.Join(dir, "cert.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	hash, _ := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	web := fmt.Sprintf("tls_server_config:\n  cert_file: %s/cert.pem\n  key_file: %s/key.pem\nbasic_auth_users:\n  prom: %s\n", dir, dir, hash)
	webFile := filepath.Join(dir, "web.yaml")
	os.WriteFile(webFile, []byte(web), 0o600)

	d := startDaemon(t, "--web.config.file", webFile)
	pool := x509.NewCertPool()
	pool.AddCert(&x509.Certificate{Raw: der})
	cert, _ := x509.ParseCertificate(der)
	pool.AddCert(cert)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	get := func(user, pass string) int {
		req, _ := http.NewRequestWithContext(context.Background(), "GET", "https://"+d.addr+"/metrics", nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := get("", ""); c != http.StatusUnauthorized {
		t.Errorf("no credentials: status %d, want 401", c)
	}
	if c := get("prom", "wrong"); c != http.StatusUnauthorized {
		t.Errorf("wrong password: status %d, want 401", c)
	}
	if c := get("prom", "s3cret"); c != http.StatusOK {
		t.Errorf("right password: status %d, want 200", c)
	}
	if resp, err := http.Get("http://" + d.addr + "/metrics"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP served on a TLS listener")
		}
	}
	d.stop(t)
}

func TestDaemonBadConfig(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(cfg, []byte("targets:\n  - name: a\n    pid: 1\n    comm: x\n"), 0o644)
	code, _, stderr := runCLI("daemon", "--config", cfg)
	if code == 0 || !strings.Contains(stderr, "set exactly one of pid, comm or cgroup") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}
