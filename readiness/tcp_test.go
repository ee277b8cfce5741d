package readiness

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/bpfbench/bpfbench/collectors/tcp"
	"github.com/bpfbench/bpfbench/internal/privtest"
)

func TestTCPSocketsCheck(t *testing.T) {
	refusedErr := errors.New("pidfd_getfd: operation not permitted")
	for _, tc := range []struct {
		name   string
		a      tcp.Access
		status Status
		want   string // in the detail or the fix
	}{
		{"the four capabilities", tcp.Access{Ptrace: true}, OK, "pidfd_getfd, CAP_SYS_PTRACE"},
		{"pidfd_getfd refused, CAP_SYS_ADMIN", tcp.Access{Descriptors: refusedErr, Ptrace: true, Setns: true}, OK, "setns (CAP_SYS_ADMIN)"},
		{"pidfd_getfd refused by a filter", tcp.Access{Descriptors: refusedErr, Ptrace: true}, Warn, "SystemCallFilter="},
		{"no CAP_SYS_PTRACE", tcp.Access{}, Warn, "grant CAP_SYS_PTRACE"},
		{"no socket diag", tcp.Access{Own: errors.New("address family not supported")}, Warn, "AF_NETLINK"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := checkTCPSockets(tc.a)
			if c.Status != tc.status || !strings.Contains(c.Detail+" "+c.Fix, tc.want) {
				t.Errorf("%+v, want %s naming %q", c, tc.status, tc.want)
			}
		})
	}
}

// envRefusalChild makes the test binary print the checks
// TestRefusalNamesCapability needs, under the privileges it was given.
const envRefusalChild = "BPFBENCH_READINESS_REFUSAL_CHILD"

// TestRefusalNamesCapability: without capabilities the map-type probes
// are refused (EPERM) and the fix names the capabilities, not a kernel
// version; with the four capabilities of the chart and the unit, the tcp
// collector reads sockets in this namespace (socket diag) and through
// descriptors (pidfd_getfd) for the others.
func TestRefusalNamesCapability(t *testing.T) {
	if os.Getenv(envRefusalChild) == "1" {
		json.NewEncoder(os.Stdout).Encode([]Check{
			checkMap("ring buffer", ebpf.RingBuf, "kernel 5.8 or later"),
			checkTCPSockets(tcp.CheckAccess()),
		})
		return
	}
	privtest.Require(t)
	setpriv := privtest.RequireTool(t, "setpriv", "apt-get install util-linux")
	run := func(capset string) []Check {
		t.Helper()
		cmd := exec.Command(setpriv, "--inh-caps="+capset, "--ambient-caps="+capset, "--bounding-set="+capset,
			os.Args[0], "-test.run", "^TestRefusalNamesCapability$")
		cmd.Env = append(os.Environ(), envRefusalChild+"=1")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("the checks under %s: %v\n%s", capset, err, out)
		}
		var cs []Check
		line, _, _ := strings.Cut(string(out), "\n")
		if err := json.Unmarshal([]byte(line), &cs); err != nil || len(cs) != 2 {
			t.Fatalf("decoding %q: %v", out, err)
		}
		t.Logf("with %s: %+v", capset, cs)
		return cs
	}
	none := run("-all")
	if c := none[0]; c.Status != Fail || strings.Contains(c.Fix, "kernel") || !strings.Contains(c.Fix, "CAP_BPF") {
		t.Errorf("ring buffer without capabilities: %+v, want a failure whose fix names CAP_BPF, not a kernel", c)
	}
	if c := none[1]; c.Status != Warn || !strings.Contains(c.Fix, "CAP_SYS_PTRACE") {
		t.Errorf("tcp sockets without capabilities: %+v, want a warning naming CAP_SYS_PTRACE", c)
	}
	four := run(fourCaps)
	if c := four[0]; c.Status != OK {
		t.Errorf("ring buffer with %s: %+v", fourCaps, c)
	}
	if c := four[1]; c.Status != OK || !strings.Contains(c.Detail, "pidfd_getfd") {
		t.Errorf("tcp sockets with %s: %+v, want ok through pidfd_getfd", fourCaps, c)
	}
}
