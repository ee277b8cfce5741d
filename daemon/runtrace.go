package daemon

import (
	"fmt"
	"hash/fnv"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/correlate"
	"github.com/bpfbench/bpfbench/exporter/trace"
	"github.com/bpfbench/bpfbench/loadgen"
)

// maxTraceSpans bounds the server-side slices written to trace.json so the
// file stays loadable; the longest spans are the ones worth seeing.
const maxTraceSpans = 300000

// buildTrace lays the run out as a Perfetto/Chrome timeline.
func buildTrace(res *loadgen.Result, blames []correlate.Blame, spans []collectors.Span, sess *Session) *trace.Trace {
	tr := trace.New(res.StartNs)
	for i := range res.Records {
		r := &res.Records[i]
		tid := r.Index + 1
		tr.NameTrack(trace.PidRequests, tid, fmt.Sprintf("request %d (port %d)", r.Index, r.LocalPort))
		if !r.Success {
			tr.Slice(trace.PidRequests, tid, "failed: "+r.Failure, "request", r.StartNs, max(r.EndNs, r.StartNs), map[string]any{"error": r.Error})
		}
	}
	for _, b := range blames {
		name := "ttft"
		if b.Index > 0 {
			name = "token"
		}
		args := map[string]any{"index": b.Index, "duration_ms": float64(b.Duration()) / 1e6, "excess_ms": float64(b.ExcessNs) / 1e6}
		if b.ExcessNs > 0 {
			for c, v := range b.Shares() {
				if v > 0 {
					args[correlate.CauseNames()[c]] = v
				}
			}
		}
		tr.Slice(trace.PidRequests, b.Request+1, name, "latency", b.Start, b.End, args)
	}

	// Keep the longest server-side spans when there are too many.
	keep := spans
	if len(spans) > maxTraceSpans {
		keep = longest(spans, maxTraceSpans)
	}
	devTid := map[string]int{}
	for _, s := range keep {
		switch s.Kind {
		case collectors.SpanRunqueue:
			tr.NameTrack(trace.PidServer, int(s.Tid), fmt.Sprintf("thread %d", s.Tid))
			tr.Slice(trace.PidServer, int(s.Tid), "runnable (waiting for a CPU)", "sched", s.Start, s.End, nil)
		case collectors.SpanOffCPU:
			tr.NameTrack(trace.PidServer, int(s.Tid), fmt.Sprintf("thread %d", s.Tid))
			tr.Slice(trace.PidServer, int(s.Tid), "off-CPU "+s.Detail, "sched", s.Start, s.End, nil)
		case collectors.SpanBlockIO:
			tid, ok := devTid[s.Detail]
			if !ok {
				tid = len(devTid) + 1
				devTid[s.Detail] = tid
				tr.NameTrack(trace.PidBlock, tid, s.Detail)
			}
			tr.Slice(trace.PidBlock, tid, s.Detail, "blockio", s.Start, s.End, map[string]any{"bytes": s.Bytes, "thread": s.Tid})
		case collectors.SpanCUDA:
			tr.NameTrack(trace.PidCUDA, int(s.Tid), fmt.Sprintf("thread %d", s.Tid))
			tr.Slice(trace.PidCUDA, int(s.Tid), s.Detail, "cuda", s.Start, s.End, map[string]any{"bytes": s.Bytes})
		case collectors.SpanTCP:
			tid := int(s.Port)
			if tid == 0 {
				h := fnv.New32a()
				h.Write([]byte(s.Detail))
				tid = 70000 + int(h.Sum32()%1000)
			}
			tr.NameTrack(trace.PidNetwork, tid, fmt.Sprintf("client port %d", s.Port))
			if s.End > s.Start {
				tr.Slice(trace.PidNetwork, tid, s.Detail, "tcp", s.Start, s.End, nil)
			} else {
				tr.Instant(trace.PidNetwork, tid, s.Detail, "tcp", s.Start, nil)
			}
		}
	}
	for _, sec := range sess.Sections() {
		if w, ok := sec.(interface{ WriteTrace(*trace.Trace) }); ok {
			w.WriteTrace(tr)
		}
	}
	return tr
}

// longest returns the n longest spans.
func longest(spans []collectors.Span, n int) []collectors.Span {
	// A histogram of log2 durations finds the cut without sorting everything.
	var counts [64]int
	lg := func(d int64) int {
		b := 0
		for d > 1 && b < 63 {
			d >>= 1
			b++
		}
		return b
	}
	for _, s := range spans {
		counts[lg(s.End-s.Start)]++
	}
	cut, total := 63, 0
	for ; cut > 0; cut-- {
		if total+counts[cut] > n {
			break
		}
		total += counts[cut]
	}
	out := make([]collectors.Span, 0, n)
	for _, s := range spans {
		if lg(s.End-s.Start) > cut {
			out = append(out, s)
		}
	}
	for _, s := range spans {
		if len(out) >= n {
			break
		}
		if lg(s.End-s.Start) == cut {
			out = append(out, s)
		}
	}
	return out
}
