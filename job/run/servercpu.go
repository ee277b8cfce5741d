package run

import (
	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/result"
)

// serverCPU is the server's CPU over the load: the kernel's account of
// its processes (collectors.TreeCPU of the target's tree) read when the
// load starts and when it ends. A run through agents reads none (the
// server's /proc is elsewhere).
type serverCPU struct {
	proc         string // "/proc"
	pid          int
	roots        []int
	ns0, ns1     int64
	procs        int
	read0, read1 bool
}

func newServerCPU(pid int, roots []int) *serverCPU {
	return &serverCPU{proc: "/proc", pid: pid, roots: roots}
}

// start reads the server's CPU at the load's start.
func (s *serverCPU) start() {
	if s == nil || s.pid <= 0 {
		return
	}
	ns, n := collectors.TreeCPU(s.proc, collectors.Tree(s.pid, s.roots))
	s.ns0, s.read0 = ns, n > 0
}

// end reads it at the load's end: the tree then (a worker started during
// the load counts from nothing; one that ended was reaped into its
// parent's children's times).
func (s *serverCPU) end() {
	if s == nil || !s.read0 {
		return
	}
	ns, n := collectors.TreeCPU(s.proc, collectors.Tree(s.pid, s.roots))
	s.ns1, s.procs, s.read1 = ns, n, n > 0
}

// result is the CPU a token over every request the load sent (its
// warm-up's too: they ran within the readings); nil when it was not read
// or no token came.
func (s *serverCPU) result(res *loadgen.Result) *result.ServerCPU {
	if s == nil || !s.read1 || res == nil {
		return nil
	}
	var out, in int
	for _, rs := range [][]loadgen.Record{res.Records, res.Warmup} {
		for i := range rs {
			out += rs[i].OutputTokens
			in += rs[i].PromptLen
		}
	}
	if out == 0 {
		return nil
	}
	ns := max(s.ns1-s.ns0, 0)
	tick := float64(1e3 / collectors.UserHZ) // ms
	return &result.ServerCPU{
		Seconds: float64(ns) / 1e9, Tokens: out, PromptTokens: in, Processes: s.procs,
		MsPerToken: float64(ns) / 1e6 / float64(out),
		ErrorMs:    4 * tick * float64(s.procs) / float64(out),
	}
}
