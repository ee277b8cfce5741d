// Package spawn starts the child processes bpfbench runs (the simulated
// server, the perturbations, an engine) so that they end with bpfbench,
// however it ends: a SIGKILL, a test's timeout, a crash.
//
// The kernel's parent-death signal (PR_SET_PDEATHSIG) follows the thread
// that forked the child, not the process: a thread of Go's pool can end at
// any time (a goroutine that locks it and exits without unlocking takes it
// down, as the collectors' readers and the network-namespace code do on
// purpose), and the child would get its signal with bpfbench alive. So
// every child is forked from one thread kept locked for the process's
// life: its parent-death signal fires when the process exits, and only
// then. The same thread enters a network namespace or takes a CPU set for
// the fork alone (a child inherits both from the thread that forks it),
// and goes back before the next.
package spawn

import (
	"fmt"
	"os/exec"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Options say how a child starts.
type Options struct {
	// Signal is the child's parent-death signal (default SIGKILL): SIGTERM
	// for a child that has something to undo (a perturbation restoring a
	// qdisc), SIGKILL for one that has not.
	Signal syscall.Signal
	// CPUs, when set, is the child's CPU affinity.
	CPUs []int
	// Netns, when above 0, is a network namespace's file descriptor to
	// start the child in (netns.NsHandle); 0 or less: this one.
	Netns int
}

type request struct {
	cmd  *exec.Cmd
	opt  Options
	done chan error
}

var (
	mu   sync.Mutex
	reqs chan request
)

// Start starts cmd (exec.Cmd.Start) from the kept thread with opt. The
// caller waits for it as for any command (cmd.Wait, from any goroutine).
func Start(cmd *exec.Cmd, opt Options) error {
	if opt.Signal == 0 {
		opt.Signal = syscall.SIGKILL
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = opt.Signal
	r := request{cmd: cmd, opt: opt, done: make(chan error, 1)}
	thread() <- r
	return <-r.done
}

// thread returns the kept thread's queue, starting one when there is none
// (the first call, or after a thread that could not leave a namespace or
// a CPU set it had entered retired).
func thread() chan<- request {
	mu.Lock()
	defer mu.Unlock()
	if reqs == nil {
		reqs = make(chan request)
		go keep(reqs)
	}
	return reqs
}

// keep is the kept thread: it forks each request's child, and never
// returns (nor unlocks), so that the thread lives as long as the process.
// One that cannot go back to its own namespace or CPU set stops taking
// requests (a later Start gets a new thread) but stays alive for the
// children it forked.
func keep(q chan request) {
	runtime.LockOSThread()
	var home unix.CPUSet
	homeErr := unix.SchedGetaffinity(0, &home)
	homeNs, nsErr := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	for r := range q {
		err, tainted := fork(r, &home, homeErr, homeNs, nsErr)
		r.done <- err
		if tainted {
			mu.Lock()
			if reqs == q {
				reqs = nil
			}
			mu.Unlock()
			select {} // alive for the children forked here
		}
	}
}

// fork starts r's command on this thread; tainted says the thread could
// not go back to its own namespace or CPU set.
func fork(r request, home *unix.CPUSet, homeErr error, homeNs int, nsErr error) (err error, tainted bool) {
	if len(r.opt.CPUs) > 0 {
		if homeErr != nil {
			return fmt.Errorf("reading this thread's CPU affinity: %w", homeErr), false
		}
		var set unix.CPUSet
		for _, c := range r.opt.CPUs {
			set.Set(c)
		}
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			return fmt.Errorf("pinning the child to CPUs %v: %w", r.opt.CPUs, err), false
		}
		defer func() {
			if unix.SchedSetaffinity(0, home) != nil {
				tainted = true
			}
		}()
	}
	if r.opt.Netns > 0 {
		if nsErr != nil {
			return fmt.Errorf("opening this thread's network namespace: %w", nsErr), false
		}
		if err := unix.Setns(r.opt.Netns, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("entering the child's network namespace: %w", err), false
		}
		defer func() {
			if unix.Setns(homeNs, unix.CLONE_NEWNET) != nil {
				tainted = true
			}
		}()
	}
	return r.cmd.Start(), false
}
