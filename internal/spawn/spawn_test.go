package spawn

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A child started by Start outlives the goroutine (and the thread) that
// asked for it, gets the parent-death signal asked for, and takes the CPU
// set asked for while the kept thread keeps its own.
func TestChildOutlivesTheAskingThread(t *testing.T) {
	var cmd *exec.Cmd
	done := make(chan error, 1)
	go func() {
		// A goroutine that locks its thread and exits without unlocking
		// takes the thread down: a child forked from it would get its
		// parent-death signal now.
		runtime.LockOSThread()
		cmd = exec.Command("sleep", "30")
		done <- Start(cmd, Options{Signal: syscall.SIGTERM, CPUs: []int{0}})
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	time.Sleep(200 * time.Millisecond) // the asking thread's end, if it were the parent
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the child died with the thread that asked for it: %v", err)
	}
	st, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok && strings.TrimSpace(v) != "0" {
			t.Errorf("the child's CPUs %q, want 0", strings.TrimSpace(v))
		}
	}
	var set unix.CPUSet
	if runtime.NumCPU() > 1 {
		// The next child, with no CPUs asked, has the process's set.
		c2 := exec.Command("sleep", "30")
		if err := Start(c2, Options{}); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c2.Process.Kill(); _ = c2.Wait() }()
		if err := unix.SchedGetaffinity(c2.Process.Pid, &set); err != nil {
			t.Fatal(err)
		}
		if set.Count() < 2 {
			t.Errorf("a child with no CPUs asked runs on %d CPUs: the kept thread kept the last child's set", set.Count())
		}
	}
	if cmd.SysProcAttr.Pdeathsig != syscall.SIGTERM {
		t.Errorf("parent-death signal %v, want SIGTERM", cmd.SysProcAttr.Pdeathsig)
	}
}

// TestMain runs the helper of TestChildEndsWithTheProcess when asked.
func TestMain(m *testing.M) {
	if os.Getenv("SPAWN_TEST_HELPER") == "1" {
		helper()
		return
	}
	os.Exit(m.Run())
}

// helper starts a child through Start from a goroutine that ends, prints
// its pid and waits to be killed.
func helper() {
	done := make(chan *exec.Cmd)
	go func() {
		runtime.LockOSThread() // the asking thread ends with the goroutine
		c := exec.Command("sleep", "60")
		if err := Start(c, Options{}); err != nil {
			panic(err)
		}
		done <- c
	}()
	c := <-done
	os.Stdout.WriteString(strconv.Itoa(c.Process.Pid) + "\n")
	select {}
}

// A child started by Start ends when its process is killed (SIGKILL: no
// code of the parent's runs).
func TestChildEndsWithTheProcess(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h := exec.Command(exe, "-test.run", "^$")
	h.Env = append(os.Environ(), "SPAWN_TEST_HELPER=1")
	out, err := h.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 32)
	n, _ := out.Read(buf)
	pid, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil {
		_ = h.Process.Kill()
		t.Fatalf("helper's output %q: %v", buf[:n], err)
	}
	time.Sleep(200 * time.Millisecond) // the asking goroutine's thread gone: the child must live on
	if err := unix.Kill(pid, 0); err != nil {
		t.Errorf("the child died before its process: %v", err)
	}
	_ = h.Process.Kill()
	_ = h.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for unix.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			_ = unix.Kill(pid, unix.SIGKILL)
			t.Fatalf("child %d still runs 5 s after its process was killed", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
