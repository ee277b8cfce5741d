package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/bpfbench/bpfbench/perturb"
)

func init() {
	register("perturb", command{
		summary: "inject one known kind of contention (cpu, io, net, client), report what it achieved, undo it",
		run:     runPerturb,
	})
}

const perturbUsage = "perturb cpu|io|net|client [--duration D] [flags]  (bpfbench perturb KIND -h for the flags of each)"

func runPerturb(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprintf(stderr, "usage: bpfbench %s\n", perturbUsage)
			return flag.ErrHelp
		}
		return usageError{"perturb needs a kind: bpfbench " + perturbUsage}
	}
	kind, args := args[0], args[1:]
	switch kind {
	case "cpu":
		return perturbCPU(ctx, args, stdout, stderr)
	case "io":
		return perturbIO(ctx, args, stdout, stderr)
	case "net":
		return perturbNet(ctx, args, stdout, stderr)
	case "client":
		return perturbClient(ctx, args, stdout, stderr)
	}
	return usageError{fmt.Sprintf("unknown perturbation %q: use cpu, io, net or client", kind)}
}

// perturbFlags are the flags every perturbation takes.
type perturbFlags struct {
	duration time.Duration
	json     bool
}

func (p *perturbFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&p.duration, "duration", 0, "stop after this long (default: until Ctrl-C or SIGTERM)")
	fs.BoolVar(&p.json, "json", false, "print the report as one JSON object")
}

func (p *perturbFlags) parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if p.duration < 0 {
		return usageError{"--duration must be positive"}
	}
	return nil
}

// bounded returns ctx ended after the duration, if one is given.
func (p *perturbFlags) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if p.duration > 0 {
		return context.WithTimeout(ctx, p.duration)
	}
	return context.WithCancel(ctx)
}

// emit prints the report: its text, or JSON.
func (p *perturbFlags) emit(stdout io.Writer, kind string, rep any, text string) {
	if p.json {
		b, _ := json.Marshal(map[string]any{"perturbation": kind, "report": rep})
		fmt.Fprintln(stdout, string(b))
		return
	}
	fmt.Fprintln(stdout, text)
}

// cpuList parses "0,2-3".
func cpuList(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || b < a || a < 0 {
			return nil, fmt.Errorf("--cpus %q: use a list like 0,2-3", s)
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out, nil
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func perturbCPU(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("perturb cpu", stderr, "perturb cpu [--threads N] [--cpus 0,2-3] [--duty 1] [--nice 0] [--duration D] [--json]")
	var pf perturbFlags
	pf.register(fs)
	threads := fs.Int("threads", 0, fmt.Sprintf("busy threads (default: one per allowed CPU; at most %d)", perturb.MaxThreads))
	cpus := fs.String("cpus", "", "pin the threads round-robin to these CPUs, e.g. 0,2-3 (default: every allowed CPU)")
	duty := fs.Float64("duty", 1, "fraction of every 10 ms each thread is busy, in (0, 1]")
	nice := fs.Int("nice", 0, "nice level of the busy threads, -20..19")
	if err := pf.parse(fs, args); err != nil {
		return err
	}
	list, err := cpuList(*cpus)
	if err != nil {
		return usageError{err.Error()}
	}
	p := perturb.CPU{Threads: *threads, CPUs: list, Duty: *duty, Nice: *nice}
	if *threads < 0 {
		return usageError{"--threads must be positive"}
	}
	if err := p.Validate(); err != nil {
		return usageError{err.Error()}
	}
	fmt.Fprintf(stderr, "perturb cpu: %d busy threads on CPUs %s at duty %.0f%%, nice %d\n", p.Threads, joinInts(p.CPUs), p.Duty*100, p.Nice)
	rctx, cancel := pf.bounded(ctx)
	defer cancel()
	rep, err := p.Run(rctx)
	if err != nil {
		return err
	}
	pf.emit(stdout, "cpu", rep, fmt.Sprintf("cpu: %d threads on CPUs %s burnt %.2f CPU-s in %.2f s: %.0f%% of each thread's time (duty %.0f%%), %.2f CPUs busy",
		rep.Threads, joinInts(rep.CPUs), rep.CPUSeconds, rep.WallS, rep.Share*100, p.Duty*100, rep.CPUSeconds/max(rep.WallS, 1e-9)))
	return nil
}

func perturbIO(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("perturb io", stderr, "perturb io [--file PATH | --dir DIR --size 256mb] [--block-size 4096] [--depth 8] [--write] [--duration D] [--json]")
	var pf perturbFlags
	pf.register(fs)
	file := fs.String("file", "", "file or block device to read (or write) with O_DIRECT (default: a scratch file in --dir, removed on exit)")
	dir := fs.String("dir", "/var/tmp", "directory of the scratch file (not tmpfs: O_DIRECT needs a real file system)")
	size := fs.String("size", "256mb", "size of the scratch file")
	bs := fs.Int("block-size", 4096, "bytes per IO, a multiple of 4096")
	depth := fs.Int("depth", 8, "IOs in flight")
	write := fs.Bool("write", false, "write instead of read (never to a read-only file)")
	if err := pf.parse(fs, args); err != nil {
		return err
	}
	p := perturb.IO{Path: *file, BlockSize: *bs, Depth: *depth, Write: *write}
	if p.Path == "" {
		p.Path = "scratch" // validated below; replaced by the scratch file
	}
	if err := p.Validate(); err != nil {
		return usageError{err.Error()}
	}
	if *file != "" {
		st, err := os.Stat(*file)
		if err != nil {
			return fmt.Errorf("--file %s: %w", *file, err)
		}
		if *write && st.Mode().Perm()&0o222 == 0 {
			return fmt.Errorf("%s is read-only (mode %v): refusing to write to it; give a scratch file or omit --file", *file, st.Mode().Perm())
		}
	} else {
		n, err := perturb.ParseSize(*size)
		if err != nil {
			return usageError{"--" + err.Error()}
		}
		p.Path = filepath.Join(*dir, fmt.Sprintf("bpfbench-io-%d.img", os.Getpid()))
		if err := perturb.WriteScratch(p.Path, int64(n)); err != nil {
			return fmt.Errorf("writing the scratch file in %s: %w", *dir, err)
		}
		defer os.Remove(p.Path)
	}
	op := map[bool]string{false: "reads", true: "writes"}[p.Write]
	fmt.Fprintf(stderr, "perturb io: random O_DIRECT %s of %d bytes, %d in flight, on %s\n", op, p.BlockSize, p.Depth, p.Path)
	rctx, cancel := pf.bounded(ctx)
	defer cancel()
	rep, err := p.Run(rctx)
	if err != nil {
		return err
	}
	pf.emit(stdout, "io", rep, fmt.Sprintf("io: %d O_DIRECT %s of %d bytes in %.2f s: %.0f IOPS, %.1f MB/s, mean latency %.2f ms",
		rep.Ops, op, p.BlockSize, rep.WallS, rep.IOPS, float64(rep.Bytes)/max(rep.WallS, 1e-9)/1e6, rep.MeanLatency*1e3))
	return nil
}

func perturbNet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("perturb net", stderr, "perturb net --iface NAME [--netns NAME] --rate 8mbit [--burst 32kb] [--limit 512kb] [--duration D] [--json] | perturb net --restore IFACE [--netns NAME]")
	var pf perturbFlags
	pf.register(fs)
	iface := fs.String("iface", "", "interface whose egress to shape with tbf")
	nsName := fs.String("netns", "", "named network namespace of the interface (ip netns list)")
	rate := fs.String("rate", "", "rate, as tc writes it: 8mbit, 500kbit, 1gbit, 1mbps (bytes/s)")
	burst := fs.String("burst", "", "bucket size, e.g. 32kb (default: 20 ms at the rate, at least 32 KiB)")
	limit := fs.String("limit", "", "bytes queued before drops, e.g. 512kb (default: 250 ms at the rate, at least 256 KiB)")
	restore := fs.String("restore", "", "undo the shaping of IFACE left by a bpfbench that did not exit cleanly")
	stateDir := fs.String("state-dir", perturb.DefaultStateDir, "where the previous qdisc of each shaped interface is saved")
	if err := pf.parse(fs, args); err != nil {
		return err
	}
	if *restore != "" {
		what, err := perturb.Restore(*stateDir, *nsName, *restore)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "net: %s restored to %s\n", *restore, what)
		return nil
	}
	n := perturb.Net{Iface: *iface, Netns: *nsName, StateDir: *stateDir}
	var err error
	if *rate != "" {
		if n.Rate, err = perturb.ParseRate(*rate); err != nil {
			return usageError{err.Error()}
		}
	}
	if *burst != "" {
		if n.Burst, err = perturb.ParseSize(*burst); err != nil {
			return usageError{"--burst " + err.Error()}
		}
	}
	if *limit != "" {
		if n.Limit, err = perturb.ParseSize(*limit); err != nil {
			return usageError{"--limit " + err.Error()}
		}
	}
	if err := n.Validate(); err != nil {
		return usageError{err.Error()}
	}
	s, err := n.Apply()
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "perturb net: %s%s shaped to %s (burst %d B, limit %d B); restored on exit, or with bpfbench perturb net --restore %s\n",
		n.Iface, nsSuffix(n.Netns), *rate, n.Burst, n.Limit, n.Iface)
	rctx, cancel := pf.bounded(ctx)
	defer cancel()
	<-rctx.Done()
	rep, err := s.Stop()
	if err != nil {
		return err
	}
	pf.emit(stdout, "net", rep, fmt.Sprintf("net: %s%s shaped to %.3g Mbit/s for %.2f s: the qdisc sent %d bytes in %d packets (%.3g Mbit/s), %d drops, %d overlimits; restored %s",
		rep.Iface, nsSuffix(rep.Netns), float64(rep.RateBps)/1e6, rep.WallS, rep.Bytes, rep.Packets, rep.AchievedBps/1e6, rep.Drops, rep.Overlimits, rep.Restored))
	return nil
}

func nsSuffix(ns string) string {
	if ns == "" {
		return ""
	}
	return " (netns " + ns + ")"
}

func perturbClient(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("perturb client", stderr, "perturb client --target URL (--read-rate BYTES_PER_S | --stop-after D) [--rcvbuf 4096] [--duration D] [--json]")
	var pf perturbFlags
	pf.register(fs)
	target := fs.String("target", "", "the server's base URL, http://HOST:PORT")
	readRate := fs.Int("read-rate", 0, "read the stream at this many bytes per second")
	stopAfter := fs.Duration("stop-after", 0, "read normally this long, then stop reading (until the end)")
	rcvbuf := fs.Int("rcvbuf", 4096, "SO_RCVBUF of the client's socket")
	model := fs.String("model", "", "model to ask for (default: the first the server lists)")
	outLen := fs.Int("output-len", 2048, "max_tokens of each request")
	if err := pf.parse(fs, args); err != nil {
		return err
	}
	c := perturb.Client{Target: *target, ReadRate: *readRate, StopAfter: *stopAfter, RcvBuf: *rcvbuf, Model: *model, OutputLen: *outLen}
	if err := c.Validate(); err != nil {
		return usageError{err.Error()}
	}
	how := fmt.Sprintf("reads %d bytes/s", c.ReadRate)
	if c.StopAfter > 0 {
		how = fmt.Sprintf("stops reading after %v", c.StopAfter)
	}
	fmt.Fprintf(stderr, "perturb client: a streaming client of %s that %s, SO_RCVBUF %d\n", c.Target, how, c.RcvBuf)
	rctx, cancel := pf.bounded(ctx)
	defer cancel()
	rep, err := c.Run(rctx)
	if err != nil {
		return err
	}
	rwnd := "unknown (the server is not on this host)"
	if rep.ServerRwndLimitedS >= 0 {
		rwnd = fmt.Sprintf("%.2f s", rep.ServerRwndLimitedS)
	}
	pf.emit(stdout, "client", rep, fmt.Sprintf("client: %d request(s) from %s read %d bytes in %.2f s (%.0f bytes/s); the server was limited by the client's window for %s",
		rep.Requests, rep.Local, rep.BytesRead, rep.WallS, rep.ReadRate, rwnd))
	return nil
}
