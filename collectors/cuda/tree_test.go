package cuda

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testutil"
)

// TestSectionFollowsTheProcessTree targets a shell that maps no CUDA
// library (as vLLM's API server maps none) with two drivers below it: one
// running when the section starts, one the shell starts afterwards. Both
// are attached (the second by the tree scan) before they make their
// calls, and the section counts the synchronizes of both, exactly.
func TestSectionFollowsTheProcessTree(t *testing.T) {
	privtest.Require(t)
	drv := filepath.Join(stubDir, "cudastub-driver")
	args := func(syncs int) string {
		return strings.Join([]string{"--api", "driver", "--lib", libPath("driver"), "--launches", "3", "--syncs", strconv.Itoa(syncs),
			"--kernel-us", "1000", "--wait-start"}, " ")
	}
	// The drivers wait for SIGUSR1 on a pipe nobody writes (fd 3): an
	// asynchronous command's own stdin would be /dev/null.
	script := `"$0" ` + args(7) + ` >/dev/null <&3 & read go; "$0" ` + args(5) + ` >/dev/null <&3 & wait`
	sh := exec.Command("sh", "-c", script, drv)
	idle, idleW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	defer idleW.Close()
	sh.ExtraFiles = []*os.File{idle}
	stdin, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := sh.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sh.Process.Kill()
		_ = sh.Wait()
	})
	ready := make(chan int, 2)
	go func() {
		br := bufio.NewReader(stderr)
		for {
			line, err := br.ReadString('\n')
			if i := strings.Index(line, "ready pid="); i >= 0 {
				if p, err := strconv.Atoi(strings.TrimSpace(line[i+len("ready pid="):])); err == nil {
					ready <- p
				}
			} else if line != "" {
				t.Logf("driver: %s", strings.TrimSpace(line))
			}
			if err != nil {
				_, _ = io.Copy(io.Discard, br)
				return
			}
		}
	}()
	waitReady := func() int {
		select {
		case p := <-ready:
			return p
		case <-time.After(20 * time.Second):
			t.Fatal("a driver did not get ready")
			return 0
		}
	}
	first := waitReady()
	t.Logf("first driver: pid %d; below the shell: %v", first, collectors.Descendants(sh.Process.Pid))
	s, stop := runSection(t, sh.Process.Pid, SectionConfig{})
	attached := func(p int) bool { return slices.Contains(s.pids(), uint32(p)) }
	if !attached(first) {
		t.Fatalf("the driver below the target (pid %d) is not attached: %v", first, s.pids())
	}
	if attached(sh.Process.Pid) {
		t.Fatalf("the shell, which maps no CUDA library, is attached")
	}
	if err := syscall.Kill(first, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	second := waitReady()
	if !testutil.Until(10*treeScan, func() bool { return attached(second) }) {
		t.Fatalf("the driver started after the section (pid %d) was not attached within %v: %v", second, 10*treeScan, s.pids())
	}
	if err := syscall.Kill(second, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if err := sh.Wait(); err != nil {
		t.Fatalf("the drivers' shell: %v", err)
	}
	stop()
	sum := s.Summary().(Summary)
	c, ok := findCall(sum, "cuStreamSynchronize")
	if !ok || c.Count != 12 {
		t.Fatalf("cuStreamSynchronize: counted %d (found %v), want 7 + 5 = 12 from the two drivers", c.Count, ok)
	}
	if len(sum.Libraries) != 1 {
		t.Errorf("libraries: %+v, want the stub's libcuda once", sum.Libraries)
	}
	t.Logf("synchronizes counted: %d of 12, over pids %d and %d", c.Count, first, second)
}
