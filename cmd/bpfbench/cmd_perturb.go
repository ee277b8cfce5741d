package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/bpfbench/bpfbench/perturb"
)

func init() { register(newPerturbCmd) }

func newPerturbCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "perturb cpu|io|net|client [flags]",
		Short: "Inject one known kind of contention (cpu, io, net, client), report what it achieved, undo it",
		Long: `One known kind of contention, isolated from the others, which reports what it
achieved and undoes itself completely on exit, SIGINT and SIGTERM.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError{"perturb needs a kind: bpfbench perturb cpu|io|net|client [--duration D] [flags] (bpfbench perturb KIND --help for the flags of each)"}
			}
			return usageError{fmt.Sprintf("unknown perturbation %q: use cpu, io, net or client", args[0])}
		},
	}
	cmd.AddCommand(newPerturbCPUCmd(), newPerturbIOCmd(), newPerturbNetCmd(), newPerturbClientCmd())
	return cmd
}

// perturbFlags are the flags every perturbation takes.
type perturbFlags struct {
	duration time.Duration
	output   string
}

func (p *perturbFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.DurationVar(&p.duration, "duration", 0, "stop after this long (default: until Ctrl-C or SIGTERM)")
	outputFlag(cmd, &p.output)
	fs.Lookup("output").Usage = "report format: table (one line) or json (one object)"
	jsonFlag(fs, &p.output)
}

func (p *perturbFlags) check() error {
	if err := checkOutput(p.output); err != nil {
		return err
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
	if p.output == "json" {
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

func newPerturbCPUCmd() *cobra.Command {
	var pf perturbFlags
	cmd := &cobra.Command{
		Use:   "cpu [--threads N] [--cpus 0,2-3] [--duty 1] [--nice 0] [--duration D]",
		Short: "Busy threads pinned to CPUs; reports CPU-seconds burnt and each thread's share",
		Long: `Busy threads pinned round-robin to CPUs, busy for --duty of every 10 ms; reports
the CPU-seconds they burnt and each thread's share.`,
		Args: noArgs,
	}
	pf.register(cmd)
	fs := cmd.Flags()
	threads := fs.Int("threads", 0, fmt.Sprintf("busy threads (default: one per allowed CPU; at most %d)", perturb.MaxThreads))
	cpus := fs.String("cpus", "", "pin the threads round-robin to these CPUs, e.g. 0,2-3 (default: every allowed CPU)")
	duty := fs.Float64("duty", 1, "fraction of every 10 ms each thread is busy, in (0, 1]")
	nice := fs.Int("nice", 0, "nice level of the busy threads, -20..19")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx, stdout, stderr := cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr()
		if err := pf.check(); err != nil {
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
	return cmd
}

func newPerturbIOCmd() *cobra.Command {
	var pf perturbFlags
	cmd := &cobra.Command{
		Use:   "io [--file PATH | --dir DIR --size 256mb] [--block-size 4096] [--depth 8] [--write] [--duration D]",
		Short: "Random O_DIRECT reads or writes; reports IOPS, MB/s and latency",
		Long: `Random O_DIRECT reads or writes (no page cache) of a file, a block device or a
scratch file removed on exit; reports IOPS, MB/s and latency. Refuses to write
to a read-only file.`,
		Args: noArgs,
	}
	pf.register(cmd)
	fs := cmd.Flags()
	file := fs.String("file", "", "file or block device to read (or write) with O_DIRECT (default: a scratch file in --dir, removed on exit)")
	dir := fs.String("dir", "/var/tmp", "directory of the scratch file (not tmpfs: O_DIRECT needs a real file system)")
	size := fs.String("size", "256mb", "size of the scratch file")
	bs := fs.Int("block-size", 4096, "bytes per IO, a multiple of 4096")
	depth := fs.Int("depth", 8, "IOs in flight")
	write := fs.Bool("write", false, "write instead of read (never to a read-only file)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx, stdout, stderr := cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr()
		if err := pf.check(); err != nil {
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
	return cmd
}

func newPerturbNetCmd() *cobra.Command {
	var pf perturbFlags
	cmd := &cobra.Command{
		Use:   "net --iface NAME [--netns NAME] --rate 8mbit [--burst 32kb] [--limit 512kb] [--duration D] | net --restore IFACE",
		Short: "Shape an interface with a tbf qdisc; reports its bytes, drops and achieved rate",
		Long: `A tbf root qdisc through netlink; reports the qdisc's own bytes, drops and
achieved rate. The previous qdisc is saved under the state directory, so
bpfbench perturb net --restore IFACE undoes a shaping left behind by a crash.`,
		Args: noArgs,
	}
	pf.register(cmd)
	fs := cmd.Flags()
	iface := fs.String("iface", "", "interface whose egress to shape with tbf")
	nsName := fs.String("netns", "", "named network namespace of the interface (ip netns list)")
	rate := fs.String("rate", "", "rate, as tc writes it: 8mbit, 500kbit, 1gbit, 1mbps (bytes/s)")
	burst := fs.String("burst", "", "bucket size, e.g. 32kb (default: 20 ms at the rate, at least 32 KiB)")
	limit := fs.String("limit", "", "bytes queued before drops, e.g. 512kb (default: 250 ms at the rate, at least 256 KiB)")
	restore := fs.String("restore", "", "undo the shaping of IFACE left by a bpfbench that did not exit cleanly")
	stateDir := fs.String("state-dir", perturb.DefaultStateDir, "where the previous qdisc of each shaped interface is saved")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx, stdout, stderr := cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr()
		if err := pf.check(); err != nil {
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
	return cmd
}

func nsSuffix(ns string) string {
	if ns == "" {
		return ""
	}
	return " (netns " + ns + ")"
}

func newPerturbClientCmd() *cobra.Command {
	var pf perturbFlags
	cmd := &cobra.Command{
		Use:   "client --target URL (--read-rate BYTES_PER_S | --stop-after D) [--rcvbuf 4096] [--duration D]",
		Short: "A streaming client that reads slowly or stops reading; reports how long the server was window-limited",
		Long: `A streaming client that reads slowly or stops reading (receive backpressure);
reports the bytes read and how long the server was limited by the client's
window.`,
		Args: noArgs,
	}
	pf.register(cmd)
	fs := cmd.Flags()
	target := fs.String("target", "", "the server's base URL, http://HOST:PORT")
	readRate := fs.Int("read-rate", 0, "read the stream at this many bytes per second")
	stopAfter := fs.Duration("stop-after", 0, "read normally this long, then stop reading (until the end)")
	rcvbuf := fs.Int("rcvbuf", 4096, "SO_RCVBUF of the client's socket")
	model := fs.String("model", "", "model to ask for (default: the first the server lists)")
	headers := fs.StringArray("header", nil, "extra request header `KEY=VALUE` (repeatable), as load sends it; $OPENAI_API_KEY, when set and no Authorization header is given, is sent as Authorization: Bearer …")
	outLen := fs.Int("output-len", 2048, "max_tokens of each request: longer than the load options' 64, so that the stream outlasts the slow reading and the server's side of the connection fills up against the client's window")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx, stdout, stderr := cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr()
		if err := pf.check(); err != nil {
			return err
		}
		c := perturb.Client{Target: *target, ReadRate: *readRate, StopAfter: *stopAfter, RcvBuf: *rcvbuf, Model: *model, OutputLen: *outLen, Headers: http.Header{}}
		for _, kv := range *headers {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || strings.TrimSpace(k) == "" {
				return usageError{fmt.Sprintf("header %q: want KEY=VALUE", kv)}
			}
			c.Headers.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		}
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
	return cmd
}
