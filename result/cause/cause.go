// Package cause is the critical path's vocabulary on the wire: the causes
// a part of a token gap is given to, their names in result.json and the
// gaps file, and which kernel threads count as the block layer's. It is a
// leaf: correlate/critpath walks with these values, result writes their
// names.
package cause

import (
	"strconv"
	"strings"
)

// Cause is one reason a part of a token gap took the time it did. The
// first four are correlate's causes, with the same values and names (a
// test in correlate/critpath holds them equal); the critical path adds
// the server's own work and sleeps, the client, and unexplained as a
// cause of its own.
type Cause uint8

// The causes.
const (
	CPURunqueue     Cause = iota // runnable, another task on the CPU
	IOBlock                      // D state, or woken by a block completion
	GPUSync                      // inside a blocking CUDA call (running or asleep)
	NetBackpressure              // the chunk in flight, or waiting on this connection
	ServerCompute                // running the server's own work
	ServerSleep                  // asleep until a timer or an outside process
	ServerStopped                // stopped: a stop signal, a tracer or a freezer
	Client                       // the chunk in the client's socket, not yet read
	Unexplained                  // no event covers it
	NumCauses
)

var names = [NumCauses]string{"cpu_runqueue", "io_block", "gpu_sync", "net_backpressure",
	"server_compute", "server_sleep", "server_stopped", "client", "unexplained"}

func (c Cause) String() string {
	if c < NumCauses {
		return names[c]
	}
	return "cause(" + strconv.Itoa(int(c)) + ")"
}

// Names lists every cause's name, in Cause order.
func Names() []string {
	out := make([]string, NumCauses)
	copy(out, names[:])
	return out
}

// ByName is the cause called name.
func ByName(name string) (Cause, bool) {
	for c := range NumCauses {
		if names[c] == name {
			return c, true
		}
	}
	return 0, false
}

// BlockWorker reports whether comm names a kernel thread that does the
// block layer's work on a CPU: kblockd's workqueue runs in the
// high-priority worker pool ("kworker/1:1H"; /proc/PID/comm adds the
// workqueue, "kworker/1:1H-kblockd"), which dispatches requests and
// restarts a queue as completions free it, on the CPU that took the
// completion. On a host busy with IO it takes the CPU of whatever runs
// there, the server included. Other high-priority work shares the pool.
func BlockWorker(comm string) bool {
	if strings.HasPrefix(comm, "kblockd") {
		return true
	}
	rest, ok := strings.CutPrefix(comm, "kworker/")
	if !ok {
		return false
	}
	name, wq, _ := strings.Cut(rest, "-")
	return strings.HasSuffix(name, "H") && (wq == "" || wq == "kblockd")
}
