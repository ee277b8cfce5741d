// Package agent is the session API of the daemon, server and client: a
// remote `bpfbench run` starts a session on a target of the agent's node,
// streams its spans back, stops it, and maps the agent's CLOCK_MONOTONIC
// onto its own by an NTP-style exchange.
//
// The protocol is HTTP/1.1 with newline-delimited JSON, served on the
// daemon's /metrics listener: it inherits exporter-toolkit's TLS and basic
// auth with no second listener or credential store, needs no generated
// code, and can be driven with curl:
//
//	POST   /api/v1/sessions             StartRequest -> StartResponse (403 outside agent.allow, 429 past agent.max_sessions)
//	GET    /api/v1/sessions/{id}/spans  a stream of Line, one JSON object a line
//	DELETE /api/v1/sessions/{id}        stops the session -> StopResponse
//	GET    /api/v1/clock                ClockReading: the agent's CLOCK_MONOTONIC, read last
//
// A session follows only a process agent.allow lists (Allow), never the
// agent itself nor a kernel thread, and opens only the cuda_libs its
// target maps; an error answer never quotes a file.
//
// Every time on the wire is the agent's CLOCK_MONOTONIC in nanoseconds;
// the Client maps spans onto the local clock before handing them over.
package agent

import (
	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/internal/clock"
)

// The routes of the session API.
const (
	PathSessions = "/api/v1/sessions"
	PathClock    = "/api/v1/clock"
)

// Target selects the process a session follows: exactly one of Pid, Port
// (the process listening on that local TCP port), Cgroup (every process
// in that cgroup path or below it, as /proc/PID/cgroup writes it, e.g.
// /system.slice/vllm.service: collectors.ResolveCgroup) or Pod (the root of the process tree of a container of a pod on the
// agent's node, resolved by the daemon's Kubernetes pod list).
type Target struct {
	Pid    int     `json:"pid,omitempty"`
	Port   int     `json:"port,omitempty"`
	Cgroup string  `json:"cgroup,omitempty"`
	Pod    *PodRef `json:"pod,omitempty"`
}

// PodRef names a pod of the agent's node and, optionally, one of its
// containers (needed when the pod runs more than one).
type PodRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Container string `json:"container,omitempty"`
}

// String is NAMESPACE/POD[/CONTAINER], as ParsePodRef reads it.
func (p PodRef) String() string {
	s := p.Namespace + "/" + p.Name
	if p.Container != "" {
		s += "/" + p.Container
	}
	return s
}

// StartRequest is the body of POST /api/v1/sessions.
type StartRequest struct {
	Target
	// TCPPort restricts the network sections to connections on this local
	// port of the target (collectors.Options.Port); 0: Port when the target
	// is given by port, else every connection.
	TCPPort int `json:"tcp_port,omitempty"`
	// CUDALibs are probed instead of the CUDA libraries found by name in
	// the target's maps; each must be a path the target (or a process
	// below it) maps, as /proc/PID/maps writes it, else the start is
	// refused (403).
	CUDALibs []string `json:"cuda_libs,omitempty"`
}

// StartResponse describes a started session.
type StartResponse struct {
	ID   string `json:"id"`
	Pid  int    `json:"pid"`
	Comm string `json:"comm"`
	// StartNs is when the sections started (agent clock).
	StartNs int64 `json:"start_ns"`
	// Anchor pairs the agent's wall clock with its monotonic clock.
	Anchor clock.Anchor `json:"anchor"`
	// Unavailable maps each section that could not run to the reason.
	Unavailable map[string]string `json:"unavailable,omitempty"`
	// Pod is the pod and container of a pod target, the container filled
	// in when the request left it out.
	Pod *PodRef `json:"pod,omitempty"`
}

// Line is one line of the span stream: a batch of spans, or a heartbeat.
type Line struct {
	Spans     []collectors.Span `json:"spans,omitempty"`
	Heartbeat *Heartbeat        `json:"heartbeat,omitempty"`
}

// Heartbeat is sent every second of the stream and as its last line.
type Heartbeat struct {
	// MonoNs is the agent's clock when the heartbeat was written.
	MonoNs int64 `json:"mono_ns"`
	// Lost are events the kernel could not hand over or userspace could not
	// decode; Dropped the spans the agent's buffer dropped (oldest first)
	// when the client read too slowly; Sent the spans written so far.
	Lost    uint64 `json:"lost"`
	Dropped uint64 `json:"dropped"`
	Sent    uint64 `json:"sent"`
	// End marks the last line: the session ended (Reason says why) and
	// every span it recorded was sent. EndNs is when collection stopped.
	End    bool   `json:"end,omitempty"`
	EndNs  int64  `json:"end_ns,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// StopResponse is the answer to DELETE /api/v1/sessions/{id}.
type StopResponse struct {
	ID string `json:"id"`
	// EndNs is when collection stopped (agent clock); Reason why.
	EndNs   int64          `json:"end_ns"`
	Reason  string         `json:"reason"`
	Dropped uint64         `json:"dropped"`
	Sent    uint64         `json:"sent"`
	Summary map[string]any `json:"summary"`
}

// ClockReading is the answer to GET /api/v1/clock.
type ClockReading struct {
	MonoNs int64 `json:"mono_ns"`
}

// ErrorResponse is the body of every error answer.
type ErrorResponse struct {
	Error string `json:"error"`
}
