package daemon

// Pod targets of the agent API: `bpfbench run --agent HOST:PORT
// --agent.pod NAMESPACE/POD[/CONTAINER]` starts a session on the root of
// the process tree of that container on the agent's node. The pod's
// containers come from the same pod list as the Kubernetes targets
// (k8s.go); the processes from the container id in /proc/PID/cgroup.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bpfbench/bpfbench/agent"
	"github.com/bpfbench/bpfbench/collectors"
)

// podRelist is how old a pod list may be before a pod target missing
// from it is looked up again (a pod started just before the run).
const podRelist = time.Second

// resolveAgentPod is the agent API's agent.PodResolver.
func (d *Daemon) resolveAgentPod(ctx context.Context, ref agent.PodRef) (int, agent.PodRef, error) {
	d.agentPodsOnce.Do(func() {
		d.mu.Lock()
		pods, cfg := d.pods, d.cfg
		d.mu.Unlock()
		d.agentPods = pods
		if d.agentPods == nil {
			d.agentPods = newPodSource(cfg, d.log)
			d.agentPods.log = d.log // already the daemon's component
		}
	})
	ix, err := d.agentPods.within(ctx, time.Duration(1<<62))
	if err != nil {
		return 0, ref, err
	}
	pid, got, err := podProcess(d.proc, ix, ref)
	if errors.Is(err, agent.ErrPodNotFound) {
		// Perhaps newer than the list: list again (at most every podRelist).
		if ix, err2 := d.agentPods.within(ctx, podRelist); err2 == nil {
			pid, got, err = podProcess(d.proc, ix, ref)
		}
	}
	return pid, got, err
}

// within returns the pods of the node listed at most maxAge ago, listing
// them now when the last list is older (and the last try is too). With no
// list ever made it says why, wrapping agent.ErrNoKubernetes.
func (s *podSource) within(ctx context.Context, maxAge time.Duration) (*PodIndex, error) {
	s.mu.Lock()
	fresh := s.index != nil && time.Since(s.listed) < maxAge
	recent := !s.tried.IsZero() && time.Since(s.tried) < min(maxAge, podRelist)
	if fresh || recent {
		ix, err := s.index, s.err
		s.mu.Unlock()
		return ix, noPods(ix, err)
	}
	s.tried = time.Time{} // Index lists now
	s.mu.Unlock()
	ix := s.Index(ctx)
	s.mu.Lock()
	err := s.err
	s.mu.Unlock()
	return ix, noPods(ix, err)
}

func noPods(ix *PodIndex, err error) error {
	if ix != nil {
		return nil
	}
	if err == nil {
		err = errors.New("the pods were not listed yet")
	}
	return fmt.Errorf("%w: %v", agent.ErrNoKubernetes, err)
}

// podProcess is the process a pod target follows: the pod's container
// (the only one, when ref names none), its processes in proc (their
// cgroup paths carry its id) and of them the root of the tree, the
// lowest pid whose parent is outside the container.
func podProcess(proc string, ix *PodIndex, ref agent.PodRef) (int, agent.PodRef, error) {
	if proc == "" {
		proc = "/proc"
	}
	containers, ok := ix.pods[ref.Namespace+"/"+ref.Name]
	if !ok {
		return 0, ref, fmt.Errorf("pod %s/%s: %w (the node's pod list has %d pods; is it scheduled on another node?)", ref.Namespace, ref.Name, agent.ErrPodNotFound, len(ix.pods))
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range containers {
			if !yield(n) {
				return
			}
		}
	})
	if ref.Container == "" {
		if len(names) != 1 {
			return 0, ref, fmt.Errorf("pod %s/%s has %d containers (%s): name one, NAMESPACE/POD/CONTAINER", ref.Namespace, ref.Name, len(names), strings.Join(names, ", "))
		}
		ref.Container = names[0]
	}
	id, ok := containers[ref.Container]
	if !ok {
		return 0, ref, fmt.Errorf("pod %s/%s has no container %q (it has %s): %w", ref.Namespace, ref.Name, ref.Container, strings.Join(names, ", "), agent.ErrPodNotFound)
	}
	if id == "" {
		return 0, ref, fmt.Errorf("container %s of pod %s/%s has not started (no container id in its status): %w", ref.Container, ref.Namespace, ref.Name, agent.ErrPodNotFound)
	}
	ents, err := os.ReadDir(proc)
	if err != nil {
		return 0, ref, err
	}
	in := map[int]bool{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if containerOf(readCgroups(proc+"/"+e.Name()+"/cgroup")) == id {
			in[pid] = true
		}
	}
	best := 0
	for pid := range in {
		if in[collectors.ParentPid(proc, pid)] {
			continue
		}
		if best == 0 || pid < best {
			best = pid
		}
	}
	if best == 0 {
		return 0, ref, fmt.Errorf("container %s of pod %s/%s (id %.12s) has no process in %s: the daemon needs the host's PID namespace (hostPID: true)", ref.Container, ref.Namespace, ref.Name, id, proc)
	}
	return best, ref, nil
}
