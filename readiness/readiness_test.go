package readiness

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/uprobecost"
)

// envChild makes the test binary print the uprobe links check and exit
// (the privileges-dropped half of TestUprobeLinksCheck).
const envChild = "BPFBENCH_READINESS_UPROBE_LINKS_CHILD"

// The four capabilities deploy/helm and systemd/bpfbench.service grant.
const fourCaps = "-all,+bpf,+perfmon,+sys_ptrace,+dac_read_search"

// TestUprobeLinksCheck places uprobes on the test binary: as root both
// kinds of link work (uprobe_multi where the kernel has it); with the four
// capabilities of the chart and the unit (setpriv), uprobe_multi still
// works, and perf uprobes need CAP_SYS_ADMIN from Linux 6.16 on (before,
// CAP_PERFMON was enough unless a stable kernel has the same change).
func TestUprobeLinksCheck(t *testing.T) {
	if os.Getenv(envChild) == "1" {
		json.NewEncoder(os.Stdout).Encode(checkUprobeLinks())
		return
	}
	privtest.Require(t)
	multi := uprobecost.HaveMulti()
	c := checkUprobeLinks()
	t.Logf("as root: %+v", c)
	if c.Status != OK || !strings.Contains(c.Detail, "perf uprobes: ok") {
		t.Errorf("as root: %+v, want ok with perf uprobes ok", c)
	}
	if multi != strings.Contains(c.Detail, "uprobe_multi: ok") {
		t.Errorf("as root, the kernel has uprobe_multi %v: %+v", multi, c)
	}

	setpriv := privtest.RequireTool(t, "setpriv", "apt-get install util-linux")
	cmd := exec.Command(setpriv, "--inh-caps="+fourCaps, "--ambient-caps="+fourCaps, "--bounding-set="+fourCaps,
		os.Args[0], "-test.run", "^TestUprobeLinksCheck$")
	cmd.Env = append(os.Environ(), envChild+"=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the check under %s: %v\n%s", fourCaps, err, out)
	}
	var four Check
	line, _, _ := strings.Cut(string(out), "\n")
	if err := json.Unmarshal([]byte(line), &four); err != nil {
		t.Fatalf("decoding %q: %v", out, err)
	}
	t.Logf("with %s: %+v", fourCaps, four)
	_, v := kernelRelease()
	since616 := v[0] > 6 || (v[0] == 6 && v[1] >= 16)
	switch {
	case since616 && !strings.Contains(four.Detail, "perf uprobes: need CAP_SYS_ADMIN (Linux >= 6.16)"):
		t.Errorf("Linux %d.%d without CAP_SYS_ADMIN: %+v, want perf uprobes to need it", v[0], v[1], four)
	case !since616 && !strings.Contains(four.Detail, "perf uprobes: ok") && !strings.Contains(four.Detail, "perf uprobes: need CAP_SYS_ADMIN"):
		t.Errorf("Linux %d.%d without CAP_SYS_ADMIN: %+v", v[0], v[1], four)
	}
	if multi && (four.Status != OK || !strings.Contains(four.Detail, "uprobe_multi: ok")) {
		t.Errorf("uprobe_multi with CAP_BPF and CAP_PERFMON: %+v, want ok", four)
	}
	if !multi && strings.Contains(four.Detail, "need CAP_SYS_ADMIN") && (four.Status != Warn || !strings.Contains(four.Fix, "CAP_SYS_ADMIN")) {
		t.Errorf("no uprobe link works without CAP_SYS_ADMIN: %+v, want a warning naming it", four)
	}
}
