package blockio

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/collectors/bpfutil"
)

// Section is the block IO part of a session on one process.
type Section struct {
	*Collector
	pid      int
	total    *Aggregator
	interval *Aggregator
}

var _ collectors.Section = (*Section)(nil)

// NewSection follows the block requests of opts.Pid, streaming them.
func NewSection(opts collectors.Options) (*Section, error) {
	if opts.Pid <= 0 {
		return nil, fmt.Errorf("blockio: target pid %d is not a process id", opts.Pid)
	}
	s := &Section{pid: opts.Pid, total: NewAggregator(), interval: NewAggregator()}
	s.Collector = New(Config{
		Logger: opts.Logger,
		OnEvent: func(e *Event) {
			s.total.Add(e)
			s.interval.Add(e)
			if r := opts.Recorder; r != nil {
				r.Record(collectors.Span{
					Kind: collectors.SpanBlockIO, Start: int64(e.Ts - e.QueueNs - e.ServiceNs), End: int64(e.Ts),
					Tid: e.Tid, Detail: DevName(e.Dev) + " " + Op(e.Op).String(), Bytes: uint64(e.Bytes), Blocking: true,
				})
			}
		},
	})
	return s, nil
}

// Start loads the programs and targets the process.
func (s *Section) Start(ctx context.Context) error {
	if err := s.Collector.Start(ctx); err != nil {
		return err
	}
	if err := s.SetTarget(uint32(s.pid), 1, true); err != nil {
		s.Close()
		return err
	}
	return nil
}

// Summary is the session's `blockio` JSON section.
func (s *Section) Summary() any { return s.total.Summary() }

// WriteInterval writes one line per device for the interval that just ended.
func (s *Section) WriteInterval(w io.Writer) {
	devs := s.interval.Devices()
	s.interval.Reset()
	if len(devs) == 0 {
		fmt.Fprintln(w, "blockio  -")
		return
	}
	for _, d := range devs {
		fmt.Fprintf(w, "blockio  %-8s r=%-6d %-9s w=%-6d %-9s lat p50=%-8s p99=%-8s max=%-8s queue p99=%s\n",
			d.Device.Device, d.Reads, Bytes(d.ReadBytes), d.Writes, Bytes(d.WriteBytes),
			bpfutil.Dur(d.Latency.P50), bpfutil.Dur(d.Latency.P99), bpfutil.Dur(d.Latency.Max), bpfutil.Dur(d.Queue.P99))
	}
}

// WriteSummary writes the end-of-session table.
func (s *Section) WriteSummary(w io.Writer) {
	devs := s.total.Devices()
	fmt.Fprintln(w, "Block IO")
	if len(devs) == 0 {
		fmt.Fprintln(w, "  no block requests")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  device\treads\tread bytes\twrites\twrite bytes\tlat p50\tlat p99\tlat max\tqueue p50\tqueue p99\t")
	for _, d := range devs {
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", d.Device.Device, d.Reads, Bytes(d.ReadBytes),
			d.Writes, Bytes(d.WriteBytes), bpfutil.Dur(d.Latency.P50), bpfutil.Dur(d.Latency.P99), bpfutil.Dur(d.Latency.Max),
			bpfutil.Dur(d.Queue.P50), bpfutil.Dur(d.Queue.P99))
	}
	tw.Flush()
}

// Bytes formats a byte count compactly: 512B, 4.0KiB, 1.5MiB.
func Bytes(n uint64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%dB", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1fKiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%.2fGiB", float64(n)/(1<<30))
	}
}
