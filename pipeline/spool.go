package pipeline

import (
	"math"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/loadgen"
)

// The spool between the recorders and the correlation of a run.
//
// On a saturated server every CPU-second bpfbench spends while the load
// runs is taken from the server (on a 2-core host with llama.cpp's two
// spinning threads, the ~6% of a CPU the correlation takes cost the
// engine ~10% of its throughput). So the readers and the load generator
// only append what they hand over to this spool (a span, a finished
// request, a tick of the stream's clock), under a lock held for the append
// alone, and the correlation replays it later in the same order with the
// same clock: after the load, or at once when the spool passes its bound
// (then the run goes on correlating live, and says when it switched).
// The replay gives exactly what correlating as the entries arrived would
// have given: same order, same watermarks.

type spoolKind uint8

const (
	spoolSpan spoolKind = iota
	spoolRecord
	spoolTick
)

// spoolEntry holds no pointer, so that the garbage collector never scans
// the spool while the load runs: a span's strings are interned (few
// distinct: thread names, wakeup contexts) and a request is an index.
type spoolEntry struct {
	t  int64 // the tick's clock; a record's index in recs
	sp packedSpan
}

func (e *spoolEntry) kind() spoolKind { return e.sp.entry }

// packedSpan is a collectors.Span with its strings as indexes of the
// spool's strings (TestSpoolRoundTrip keeps the two in step).
type packedSpan struct {
	Kind collectors.SpanKind
	// entry is the spool entry's kind (here, where it costs no padding).
	entry                                  spoolKind
	Blocking, Client                       bool
	Port, LocalPort                        uint16
	Tid, Tgid, WakerTid, WakerTgid         uint32
	HolderTid, HolderTgid                  uint32
	Detail, WakerComm, WakeCtx, HolderComm uint32
	// IRQBlockNs, IRQNetNs, StealNs saturate at 4.3 s (interrupt and
	// steal time within one running stretch).
	IRQBlockNs, IRQNetNs, StealNs uint32
	// FoldSleepNs, FoldRunqNs, FoldIONs: as much, folded off-CPU time
	// within one running stretch (the kernel flushes its sums within 0.25 s).
	FoldSleepNs, FoldRunqNs, FoldIONs uint32
	Seq                               uint32 // in the padding before Start
	Start, End, WakeTs                int64
	Bytes                             uint64
}

// spoolInterned bounds the strings looked up for reuse; past it, each new
// one is kept once per span, as the span itself would.
const spoolInterned = 1 << 16

// spoolChunk entries are appended in chunks that are never copied.
const spoolChunk = 4096

// spoolEntryBytes is the size of an entry, for the bound.
const spoolEntryBytes = int64(unsafe.Sizeof(spoolEntry{}))

type spool struct {
	mu     sync.Mutex
	chunks [][]spoolEntry
	n      int64 // entries queued
	peak   int64
	free   [][]spoolEntry
	strs   []string
	ids    map[string]uint32
	recs   []*loadgen.Record
}

func (q *spool) intern(s string) uint32 {
	if s == "" {
		return 0
	}
	if id, ok := q.ids[s]; ok {
		return id
	}
	if q.ids == nil {
		q.ids, q.strs = map[string]uint32{}, []string{""}
	}
	id := uint32(len(q.strs))
	q.strs = append(q.strs, s)
	if len(q.ids) < spoolInterned {
		q.ids[s] = id
	}
	return id
}

func (q *spool) pushSpan(sp *collectors.Span) {
	q.mu.Lock()
	e := spoolEntry{sp: packedSpan{
		Kind: sp.Kind, entry: spoolSpan, Blocking: sp.Blocking, Client: sp.Client,
		Port: sp.Port, LocalPort: sp.LocalPort,
		Tid: sp.Tid, Tgid: sp.Tgid, WakerTid: sp.WakerTid, WakerTgid: sp.WakerTgid,
		HolderTid: sp.HolderTid, HolderTgid: sp.HolderTgid,
		Detail: q.intern(sp.Detail), WakerComm: q.intern(sp.WakerComm),
		WakeCtx: q.intern(sp.WakeCtx), HolderComm: q.intern(sp.HolderComm),
		IRQBlockNs: sat32(sp.IRQBlockNs), IRQNetNs: sat32(sp.IRQNetNs), StealNs: sat32(sp.StealNs),
		FoldSleepNs: sat32(sp.FoldSleepNs), FoldRunqNs: sat32(sp.FoldRunqNs), FoldIONs: sat32(sp.FoldIONs),
		Seq: sp.Seq, Start: sp.Start, End: sp.End, WakeTs: sp.WakeTs, Bytes: sp.Bytes,
	}}
	q.appendLocked(&e)
	q.mu.Unlock()
}

func (q *spool) pushRecord(r *loadgen.Record) {
	q.mu.Lock()
	e := spoolEntry{t: int64(len(q.recs)), sp: packedSpan{entry: spoolRecord}}
	q.recs = append(q.recs, r)
	q.appendLocked(&e)
	q.mu.Unlock()
}

// pushTick returns the entries queued.
func (q *spool) pushTick(now int64) int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	e := spoolEntry{t: now, sp: packedSpan{entry: spoolTick}}
	q.appendLocked(&e)
	return q.n
}

func (q *spool) appendLocked(e *spoolEntry) {
	last := len(q.chunks) - 1
	if last < 0 || len(q.chunks[last]) == spoolChunk {
		var c []spoolEntry
		if k := len(q.free); k > 0 {
			c, q.free = q.free[k-1], q.free[:k-1]
		} else {
			c = make([]spoolEntry, 0, spoolChunk)
		}
		q.chunks = append(q.chunks, c)
		last++
	}
	q.chunks[last] = append(q.chunks[last], *e)
	q.n++
	q.peak = max(q.peak, q.n)
}

// take hands over every entry queued, with the strings and requests they
// name (the strings only grow; the requests are the taker's).
func (q *spool) take() ([][]spoolEntry, []string, []*loadgen.Record) {
	q.mu.Lock()
	defer q.mu.Unlock()
	cs, recs := q.chunks, q.recs
	q.chunks, q.n, q.recs = nil, 0, nil
	return cs, q.strs, recs
}

// span is the entry's span again.
func (p *packedSpan) span(strs []string) collectors.Span {
	return collectors.Span{
		Kind: p.Kind, Blocking: p.Blocking, Client: p.Client,
		Port: p.Port, LocalPort: p.LocalPort,
		Tid: p.Tid, Tgid: p.Tgid, WakerTid: p.WakerTid, WakerTgid: p.WakerTgid,
		HolderTid: p.HolderTid, HolderTgid: p.HolderTgid,
		Detail: strs[p.Detail], WakerComm: strs[p.WakerComm],
		WakeCtx: strs[p.WakeCtx], HolderComm: strs[p.HolderComm],
		IRQBlockNs: int64(p.IRQBlockNs), IRQNetNs: int64(p.IRQNetNs), StealNs: int64(p.StealNs),
		FoldSleepNs: int64(p.FoldSleepNs), FoldRunqNs: int64(p.FoldRunqNs), FoldIONs: int64(p.FoldIONs),
		Seq: p.Seq, Start: p.Start, End: p.End, WakeTs: p.WakeTs, Bytes: p.Bytes,
	}
}

// sat32 is ns in a uint32, saturated (negative: 0).
func sat32(ns int64) uint32 { return uint32(min(max(ns, 0), math.MaxUint32)) }

// recycle returns a replayed chunk for the next appends (a few are kept).
func (q *spool) recycle(c []spoolEntry) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.free) < 4 {
		q.free = append(q.free, c[:0])
	}
}

// peakBytes is the most the spool held at once.
func (q *spool) peakBytes() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.peak * spoolEntryBytes
}

// DefaultSpoolBytes is the spool's bound unless set: 2.2 million entries
// of 120 bytes, about four minutes of a saturated llama-server's events.
const DefaultSpoolBytes = 256 << 20

// processCPU is the CPU time this process has used, in seconds.
func processCPU() float64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
