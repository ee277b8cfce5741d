// Package blockio is the block IO collector: per-request queue time
// (insert -> issue), service time (issue -> complete), bytes and op by
// device, for the host and for target processes, from the block_rq_insert,
// block_rq_issue, block_rq_merge and block_rq_complete tp_btf tracepoints
// (bpf/blockio.bpf.c).
//
// The issuing process is the one that inserted the request (or issued it,
// for requests that skip the IO scheduler). IO that the kernel submits on a
// process's behalf from a worker (writeback, or bios held back by the
// blk-throttle cgroup controller and released by its dispatch worker) is
// attributed to that worker, not to the process.
package blockio

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/bpfbench/bpfbench/collectors/bpfutil"
	"github.com/bpfbench/bpfbench/internal/hist"
)

// Op is a request's operation, as numbered by bpf/blockio.bpf.c.
type Op uint8

// The operations.
const (
	Read    Op = 0
	Write   Op = 1 // includes write-zeroes
	Flush   Op = 2
	Discard Op = 3 // includes secure erase
	Other   Op = 4
	NumOps     = 5
)

func (o Op) String() string {
	switch o {
	case Read:
		return "read"
	case Write:
		return "write"
	case Flush:
		return "flush"
	case Discard:
		return "discard"
	}
	return "other"
}

// Event flags.
const (
	FlagSync   = 1 // the request had REQ_SYNC
	FlagQueued = 2 // the request was inserted into a queue: QueueNs is valid
)

// Event is one completed request of a streamed target, as the kernel wrote
// it. Ts is the completion in CLOCK_MONOTONIC ns; the request was issued at
// Ts-ServiceNs and, when Flags&FlagQueued, inserted at Ts-ServiceNs-QueueNs.
// Dev is the kernel's dev_t (major<<20 | minor); see DevName.
type Event = blockioEvent

// Latency is the request's time in the block layer and device, in ns.
func (e *Event) Latency() uint64 { return e.QueueNs + e.ServiceNs }

// Tracepoints are the tracepoints the collector attaches to.
var Tracepoints = []string{"block_rq_complete", "block_rq_insert", "block_rq_issue", "block_rq_merge"}

// MaxTargets bounds the aggregate slots; index 0 is host-wide.
const MaxTargets = bpfutil.MaxTargets

// Config configures a Collector.
type Config struct {
	// HostWide aggregates every request of the host (the daemon);
	// otherwise only those of targets (a session).
	HostWide bool
	// RingBufferBytes sizes the event ring buffer (a power of two, default 4 MiB).
	RingBufferBytes uint32
	// DrainPeriod is how often the ring buffer is read (default 100 ms);
	// the kernel wakes the reader earlier only when a quarter of the ring
	// is full.
	DrainPeriod time.Duration
	// OnEvent receives each request of a streamed target from the reader
	// goroutine. It must be quick; the pointer is valid during the call only.
	OnEvent func(*Event)
	Logger  *slog.Logger

	// rename attaches a program to another tracepoint (tests simulate a
	// kernel that lacks one).
	rename map[string]string
}

// Collector loads and runs the block IO programs.
type Collector struct {
	*bpfutil.Base
	cfg  Config
	objs blockioObjects
}

// New returns a collector; Start loads it.
func New(cfg Config) *Collector {
	return &Collector{cfg: cfg, Base: bpfutil.NewBase("blockio", cfg.Logger)}
}

// Start loads the programs whose tracepoints the kernel has and attaches
// them; missing tracepoints are logged and listed by Missing
// (without block_rq_insert there is no queue time). On error it releases
// everything it took.
func (c *Collector) Start(context.Context) error {
	return c.Load(bpfutil.Object{Spec: loadBlockio, Objs: &c.objs, RingBytes: c.cfg.RingBufferBytes,
		Consts: map[string]any{blockioVarHostWide: c.cfg.HostWide}, Rename: c.cfg.rename})
}

// Run drains the ring buffer into OnEvent until ctx is done (after
// delivering what the kernel wrote until then) or Close.
func (c *Collector) Run(ctx context.Context) error {
	return bpfutil.Drain(ctx, c.Base, c.cfg.DrainPeriod, c.cfg.OnEvent)
}

// SetTarget aggregates the requests of tgid under slot idx (1..MaxTargets-1)
// and, with stream, sends them through the ring buffer.
func (c *Collector) SetTarget(tgid uint32, idx uint32, stream bool) error {
	return c.Base.SetTarget(tgid, idx, bpfutil.StreamFlags(stream))
}

// Stats is the in-kernel aggregate of one (device, target slot, op).
type Stats struct {
	Dev    uint32
	Target uint32 // 0 = host-wide
	Op     Op
	Count  uint64
	Bytes  uint64
	// Latency is queue + service time; Queue covers inserted requests only.
	Latency, Queue, Service hist.Log2
}

func log2Of(slots []uint64, sum uint64, count uint64) hist.Log2 {
	return hist.Log2{Slots: append([]uint64(nil), slots...), Count: count, SumNs: sum}
}

// Stats reads every in-kernel aggregate, ordered by device, target and op.
func (c *Collector) Stats() ([]Stats, error) {
	var (
		k   blockioDevKey
		per []blockioIoStats
		out []Stats
	)
	it := c.objs.Stats.Iterate()
	for it.Next(&k, &per) {
		s := Stats{Dev: k.Dev, Target: uint32(k.Target), Op: Op(k.Op)}
		for i := range per {
			p := &per[i]
			s.Count += p.Count
			s.Bytes += p.Bytes
			s.Latency.Add(log2Of(p.Latency[:], p.LatencyNs, p.Count))
			s.Queue.Add(log2Of(p.Queue[:], p.QueueNs, p.Queued))
			s.Service.Add(log2Of(p.Service[:], p.ServiceNs, p.Count))
		}
		out = append(out, s)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("reading blockio stats: %w", err)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Dev != b.Dev {
			return a.Dev < b.Dev
		}
		if a.Target != b.Target {
			return a.Target < b.Target
		}
		return a.Op < b.Op
	})
	return out, nil
}

// Major and Minor split a kernel dev_t.
func Major(dev uint32) uint32 { return dev >> 20 }

// Minor is the minor number of a kernel dev_t.
func Minor(dev uint32) uint32 { return dev & (1<<20 - 1) }

// MkDev builds a kernel dev_t (as the programs report it) from major and minor.
func MkDev(major, minor uint32) uint32 { return major<<20 | minor }

var devNames sync.Map // uint32 -> string

// DevName names a kernel dev_t from /sys/dev/block/MAJ:MIN/uevent
// (DEVNAME), or "MAJ:MIN" when the device is unknown. Names are cached.
func DevName(dev uint32) string {
	if v, ok := devNames.Load(dev); ok {
		return v.(string)
	}
	mm := fmt.Sprintf("%d:%d", Major(dev), Minor(dev))
	name := mm
	if f, err := os.Open("/sys/dev/block/" + mm + "/uevent"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "DEVNAME="); ok && v != "" {
				name = v
				break
			}
		}
		f.Close()
		// Only cache names of devices that exist: a dev_t can be reused.
		devNames.Store(dev, name)
	}
	return name
}

// Probe loads and attaches the collector's programs as the commands do,
// then releases them; `bpfbench check` runs it.
func Probe(hostWide bool) (bpfutil.LoadReport, error) {
	c := New(Config{HostWide: hostWide, RingBufferBytes: 1 << 16, Logger: slog.New(slog.DiscardHandler)})
	if err := c.Start(context.Background()); err != nil {
		return bpfutil.LoadReport{}, err
	}
	defer c.Close()
	return c.Report(), nil
}
