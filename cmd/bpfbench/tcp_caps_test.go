package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testproc"
)

func init() { testproc.Register("tcpheld", childHeldConnection) }

// childHeldConnection listens on 127.0.0.1, connects to itself, sends 100
// bytes each way, prints the listener's port through ready and holds the
// three sockets open until told to go on.
func childHeldConnection(_ []string, ready func(...int), wait func()) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	c, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		panic(err)
	}
	a, err := l.Accept()
	if err != nil {
		panic(err)
	}
	buf := make([]byte, 100)
	for _, p := range [][2]net.Conn{{c, a}, {a, c}} {
		if _, err := p[0].Write(buf); err != nil {
			panic(err)
		}
		if _, err := p[1].Read(buf); err != nil {
			panic(err)
		}
	}
	ready(l.Addr().(*net.TCPAddr).Port)
	wait()
	l.Close()
	c.Close()
	a.Close()
}

// unitCaps are the capabilities systemd/bpfbench.service and the Helm
// chart grant, as setpriv spells them.
const unitCaps = "-all,+bpf,+perfmon,+sys_ptrace,+dac_read_search"

// TestAttachTCPWithTheUnitsCapabilities runs `bpfbench attach` (the CLI
// binary) as user nobody with only the capabilities of the systemd unit and
// the chart, on a target that holds a listener and a connection to it:
// the tcp section lists the connection both when the target is in
// bpfbench's network namespace (socket diag, no capability) and when it is
// in another one (its descriptors, pidfd_getfd: CAP_SYS_PTRACE), with
// bytes counted, and no error. Without CAP_SYS_PTRACE the section lists no
// connection and its JSON says why and names the capability.
func TestAttachTCPWithTheUnitsCapabilities(t *testing.T) {
	privtest.Require(t)
	setpriv := privtest.RequireTool(t, "setpriv", "apt-get install util-linux")
	ip := privtest.RequireTool(t, "ip", "apt-get install iproute2")
	exe := unprivilegedCopy(t)

	name := fmt.Sprintf("bbcaps%d", os.Getpid())
	if out, err := exec.Command(ip, "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() { _ = exec.Command(ip, "netns", "del", name).Run() })
	if out, err := exec.Command(ip, "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("ip -n %s link set lo up: %v: %s", name, err, out)
	}

	for _, tc := range []struct {
		name    string
		wrapper []string
		caps    string
		// wantErr: the section must list no connection and say this;
		// "": it must list the target's connection and no error.
		wantErr string
	}{
		{"bpfbench's namespace", nil, unitCaps, ""},
		{"another namespace", []string{ip, "netns", "exec", name}, unitCaps, ""},
		{"another namespace without CAP_SYS_PTRACE", []string{ip, "netns", "exec", name}, "-all,+bpf,+perfmon,+dac_read_search", "CAP_SYS_PTRACE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			child := testproc.StartWrapped(t, tc.wrapper, "tcpheld")
			port := uint16(child.Tids[0])
			cmd := exec.Command(setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups",
				"--inh-caps="+tc.caps, "--ambient-caps="+tc.caps, "--bounding-set="+tc.caps,
				exe, "attach", strconv.Itoa(child.Pid()), "--duration", "2s", "--output", "json")
			cmd.Env = append(os.Environ(), envCLI+"=1")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("attach as nobody with %s: %v\n%s", tc.caps, err, stderr.String())
			}
			var doc struct {
				TCP struct {
					Error       string `json:"error"`
					Connections []struct {
						Local     string `json:"local"`
						Remote    string `json:"remote"`
						BytesSent uint64 `json:"bytes_sent"`
					} `json:"connections"`
				} `json:"tcp"`
			}
			if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil {
				t.Fatalf("decoding attach's JSON: %v\n%s", err, stdout.String())
			}
			sec := doc.TCP
			t.Logf("tcp section: error %q, %d connections %+v", sec.Error, len(sec.Connections), sec.Connections)
			ours, sent := 0, uint64(0)
			for _, c := range sec.Connections {
				if strings.HasSuffix(c.Local, ":"+strconv.Itoa(int(port))) || strings.HasSuffix(c.Remote, ":"+strconv.Itoa(int(port))) {
					ours++
					sent += c.BytesSent
				}
			}
			if tc.wantErr != "" {
				if ours != 0 || !strings.Contains(sec.Error, tc.wantErr) {
					t.Errorf("the tcp section lists %d of the target's connections with error %q; want none, and an error naming %s", ours, sec.Error, tc.wantErr)
				}
				if n := strings.Count(stderr.String(), "reading the targets' sockets"); n != 1 {
					t.Errorf("the refusal logged %d times over the session, want once:\n%s", n, stderr.String())
				}
				return
			}
			if sec.Error != "" || ours != 2 || sent < 200 {
				t.Errorf("the tcp section: error %q, %d of the target's connections, %d bytes sent; want no error and both ends of its connection (200 bytes)", sec.Error, ours, sent)
			}
			if strings.Contains(stderr.String(), "level=WARN") && strings.Contains(stderr.String(), "component=tcp") {
				t.Errorf("the tcp collector warned:\n%s", stderr.String())
			}
		})
	}
}

// unprivilegedCopy copies the test binary where user nobody can run it.
func unprivilegedCopy(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "bpfbench-caps")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "bpfbench")
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return exe
}
