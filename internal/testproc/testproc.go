// Package testproc runs child processes with a known behaviour for
// privileged tests: the test binary re-executes itself in a child mode,
// the child reports its thread ids, waits for a go-ahead on stdin (so the
// test can attach first), does its work and exits.
package testproc

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

const envMode = "BPFBENCH_TESTPROC_MODE"

// Modes maps a mode name to the child's work. It runs after the go-ahead;
// ready() must be called first with the tids the test should know about.
type Mode func(args []string, ready func(tids ...int), wait func())

var modes = map[string]Mode{}

// Register adds a child mode; call it from TestMain before Main.
func Register(name string, m Mode) { modes[name] = m }

// Main runs the child mode when this process is a child; otherwise it
// returns and the caller runs the tests.
func Main() {
	name := os.Getenv(envMode)
	if name == "" {
		return
	}
	m, ok := modes[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown child mode %q\n", name)
		os.Exit(2)
	}
	in := bufio.NewReader(os.Stdin)
	ready := func(tids ...int) {
		s := make([]string, len(tids))
		for i, t := range tids {
			s[i] = strconv.Itoa(t)
		}
		fmt.Printf("ready %s\n", strings.Join(s, " "))
	}
	wait := func() { _, _ = in.ReadString('\n') }
	m(os.Args[1:], ready, wait)
	os.Exit(0)
}

// Child is a running child process.
type Child struct {
	Cmd   *exec.Cmd
	Tids  []int
	stdin io.WriteCloser
	done  chan error
	rest  chan string // stdout after the ready line, at exit
}

// Start starts the child in mode with args and waits for its ready line.
func Start(t testing.TB, mode string, args ...string) *Child {
	t.Helper()
	return StartWrapped(t, nil, mode, args...)
}

// StartWrapped is Start with the child run by a wrapper command, such as
// "ip netns exec NAME" or "unshare --net": wrapper[0] runs wrapper[1:],
// the test binary, then args. Pid is then the wrapper's, which must exec
// the test binary.
func StartWrapped(t testing.TB, wrapper []string, mode string, args ...string) *Child {
	t.Helper()
	argv := append(append(append([]string{}, wrapper...), os.Args[0]), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), envMode+"="+mode)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting child %s: %v", mode, err)
	}
	c := &Child{Cmd: cmd, stdin: stdin, done: make(chan error, 1), rest: make(chan string, 1)}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.done
	})
	br := bufio.NewReader(stdout)
	line, err := br.ReadString('\n')
	go func() {
		b, _ := io.ReadAll(br)
		c.rest <- string(b)
		c.done <- cmd.Wait()
	}()
	if err != nil || !strings.HasPrefix(line, "ready") {
		t.Fatalf("child %s did not get ready: %q %v", mode, line, err)
	}
	for _, f := range strings.Fields(line)[1:] {
		n, _ := strconv.Atoi(f)
		c.Tids = append(c.Tids, n)
	}
	return c
}

// Pid is the child's process id.
func (c *Child) Pid() int { return c.Cmd.Process.Pid }

// Go tells the child to start its work.
func (c *Child) Go(t testing.TB) {
	t.Helper()
	if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
		t.Fatalf("starting child work: %v", err)
	}
}

// Wait waits for the child to exit, failing the test after timeout, and
// returns what it printed after its ready line.
func (c *Child) Wait(t testing.TB, timeout time.Duration) string {
	t.Helper()
	select {
	case out := <-c.rest:
		c.rest <- out
		err := <-c.done
		c.done <- err
		if err != nil {
			t.Fatalf("child: %v", err)
		}
		return out
	case <-time.After(timeout):
		t.Fatalf("child did not exit within %v", timeout)
	}
	return ""
}
