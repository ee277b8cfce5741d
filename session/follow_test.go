package session

import (
	"os"
	"os/exec"
	"slices"
	"testing"
)

func TestDescendants(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 30 & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, p := range Descendants(cmd.Process.Pid) {
			if pr, err := os.FindProcess(p); err == nil {
				pr.Kill()
			}
		}
		cmd.Process.Kill()
		cmd.Wait()
	}()
	var kids []int
	for range 100 {
		if kids = Descendants(cmd.Process.Pid); len(kids) > 0 {
			break
		}
		exec.Command("sleep", "0.02").Run()
	}
	if len(kids) != 1 {
		t.Fatalf("descendants of sh: %v, want its sleep", kids)
	}
	if slices.Contains(Descendants(os.Getpid()), os.Getpid()) {
		t.Error("a process is not its own descendant")
	}
}

func TestKernelThread(t *testing.T) {
	if !KernelThread(2) {
		t.Error("kthreadd (pid 2) is not taken for a kernel thread")
	}
	if KernelThread(os.Getpid()) {
		t.Error("the test is taken for a kernel thread")
	}
	if KernelThread(1 << 30) {
		t.Error("a missing pid is taken for a kernel thread")
	}
}
