package live

import (
	"sort"

	"github.com/bpfbench/bpfbench/correlate/critpath"
)

// The prefill rule, live (run's is pipeline/prefill.go). An engine that
// batches computes a request's prefill in a step with the others'
// decodes, so a decode gap in which another stream's first token was
// written carried that prefill, and the walk rightly calls its extra
// time server_compute. Where the prefill lands is set by when its request
// reached the engine: a neighbour on the CPU that delays a request (the
// server's HTTP thread waiting for a CPU) moves its prefill into another
// stream's decode gap. So a decode gap (Index 2 on: the live view's first
// two writes are the first token's) in which another stream's first
// token (its Index 1 write) was written gives its server_compute above
// normal to what delayed that first token: its gap's excess over the
// normal first token's, the server's causes only (not net_backpressure,
// client, unexplained), server_compute among them (a prefill slowed by a
// slower model keeps its compute). The gaps are walked in the order they
// end, so a first token inside a gap was walked before it; a first token
// left out of the walk (sampled) moves nothing.

// firstToken is a stream's first token: when it was written and what
// delayed it (each server cause's excess over the normal first token).
type firstToken struct {
	at      int64
	request int
	w       [critpath.NumCauses]int64
}

// maxFirsts bounds the first tokens kept (the newest): a gap looks back
// over its own span only.
const maxFirsts = 4096

// prefills is the first tokens of the recent past, by time.
type prefills struct {
	firsts []firstToken
	moved  int64 // ns moved out of server_compute
	gaps   uint64
}

// first keeps g, a first token's gap (Index 1), with its excess over the
// normal first token base.
func (p *prefills) first(g critpath.Gap, base critpath.Baseline) {
	f := firstToken{at: g.End, request: g.Request}
	n := base.For(critpath.Read{Index: 0})
	for c := range f.w {
		if ServerReason(critpath.Cause(c)) {
			f.w[c] = max(g.Ns[c]-n[c], 0)
		}
	}
	if len(p.firsts) >= maxFirsts {
		p.firsts = append(p.firsts[:0], p.firsts[len(p.firsts)/2:]...)
	}
	p.firsts = append(p.firsts, f)
}

// decode applies the rule to g, a decode gap, in place, against the
// normal gap base.
func (p *prefills) decode(g *critpath.Gap, base critpath.Baseline) {
	over := g.Ns[critpath.ServerCompute] - base.For(g.Read)[critpath.ServerCompute]
	var w [critpath.NumCauses]int64
	var total int64
	i := sort.Search(len(p.firsts), func(j int) bool { return p.firsts[j].at > g.Start })
	for _, f := range p.firsts[i:] {
		if f.at > g.End {
			break
		}
		if f.request == g.Request {
			continue
		}
		for c, v := range f.w {
			w[c] += v
			total += v
		}
	}
	if over <= 0 || total <= 0 {
		return
	}
	var given int64
	for c, v := range w {
		if critpath.Cause(c) == critpath.ServerCompute || v <= 0 {
			continue
		}
		part := int64(float64(over) * float64(v) / float64(total))
		g.Ns[c] += part
		given += part
	}
	g.Ns[critpath.ServerCompute] -= given
	if given > 0 {
		p.moved += given
		p.gaps++
	}
}

// expire drops the first tokens written before t.
func (p *prefills) expire(t int64) {
	i := 0
	for i < len(p.firsts) && p.firsts[i].at < t {
		i++
	}
	if i > 0 {
		p.firsts = append(p.firsts[:0], p.firsts[i:]...)
	}
}

// ServerReason says whether excess of cause c is on the server's side (a
// CPU, the disk, the GPU, its sleeps and stops), a reason the batch and
// prefill rules give compute to; not a connection's (net_backpressure
// and client say what held a gap's own connection back: another
// request's slow reader is not this one's), nor unexplained.
func ServerReason(c critpath.Cause) bool {
	switch c {
	case critpath.NetBackpressure, critpath.Client, critpath.Unexplained:
		return false
	}
	return true
}
