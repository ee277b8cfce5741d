// Package session is the on-call session of `bpfbench attach`: the
// collectors' sections on one target process, started together, run until
// the target exits or the context ends, their interval lines and summaries,
// and their spans handed to a Recorder. It knows nothing of load or of
// attribution.
package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/collectors/bpfutil"
	"github.com/bpfbench/bpfbench/internal/clock"
	"github.com/bpfbench/bpfbench/internal/overhead"
)

// cpuList writes a CPU set as a list ("0,2-3").
func cpuList(set *unix.CPUSet) string {
	var parts []string
	for c := 0; c < 1024; c++ {
		if !set.IsSet(c) {
			continue
		}
		e := c
		for e+1 < 1024 && set.IsSet(e+1) {
			e++
		}
		if e == c {
			parts = append(parts, strconv.Itoa(c))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", c, e))
		}
		c = e
	}
	return strings.Join(parts, ",")
}

// SectionFactory builds one section of a session. A nil Section with a nil
// error means the section is off for these options.
type SectionFactory struct {
	Name string
	// Required sections end the session when they cannot start; the others
	// are reported as unavailable and the session carries on.
	Required bool
	New      func(collectors.Options) (collectors.Section, error)
}

// Session follows one process with a set of sections: the on-call view of
// `bpfbench attach` and the kernel side of `bpfbench run`.
type Session struct {
	opts        collectors.Options
	comm        string
	log         *slog.Logger
	sections    []collectors.Section
	unavailable map[string]string
	startMono   int64
	endMono     int64
	anchor      clock.Anchor
	closeOnce   sync.Once
	closeErr    error
	exited      chan struct{}
	exitOnce    sync.Once
	required    map[string]bool
	meter       *overhead.Meter
	tree        *tree    // nil: no Recorder, forks are not seen
	children    []uint32 // the target's processes started before the session
	via         []int    // the processes Follow added
	// shared is the roots of the targets AddTarget added (shared.go).
	sharedMu sync.Mutex
	shared   map[int]bool

	// MeasureBefore measures the target's involuntary context switches for
	// this long before the collectors start (attach); 0 does not (run: the
	// server is idle before its load).
	MeasureBefore time.Duration
}

// ProcessError is returned for a target that cannot be followed.
type ProcessError struct{ Msg string }

func (e *ProcessError) Error() string { return e.Msg }

// CheckPid validates a target pid and returns its command name.
func CheckPid(pid int) (string, error) {
	if pid <= 0 {
		return "", &ProcessError{fmt.Sprintf("pid %d is not a process: give the pid of the server (e.g. $(pgrep -f vllm))", pid)}
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", &ProcessError{fmt.Sprintf("no process with pid %d: is it running? (check with ps -p %d)", pid, pid)}
		}
		return "", &ProcessError{fmt.Sprintf("reading process %d: %v", pid, err)}
	}
	// A thread id is not a process: /proc/TID exists but its Tgid differs.
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err == nil {
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "Tgid:"); ok {
				if tgid, _ := strconv.Atoi(strings.TrimSpace(v)); tgid != pid && tgid != 0 {
					return "", &ProcessError{fmt.Sprintf("%d is a thread of process %d: attach to %d", pid, tgid, tgid)}
				}
			}
		}
	}
	return strings.TrimSpace(string(b)), nil
}

// KernelThread says whether pid is a kernel thread (PF_KTHREAD in the
// flags of /proc/PID/stat); false when it cannot be read.
func KernelThread(pid int) bool { return KernelThreadIn("/proc", pid) }

// KernelThreadIn is KernelThread with the proc file system at proc.
func KernelThreadIn(proc string, pid int) bool {
	b, err := os.ReadFile(proc + "/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// "pid (comm) state ppid ...": the flags are the 9th field, the 7th
	// after the comm's closing parenthesis.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 7 {
		return false
	}
	flags, err := strconv.ParseUint(f[6], 10, 64)
	const pfKthread = 0x00200000
	return err == nil && flags&pfKthread != 0
}

// NewSession builds the sections for opts.Pid. A required section that
// cannot be built is an error; the others are noted as unavailable.
func NewSession(opts collectors.Options, factories []SectionFactory) (*Session, error) {
	comm, err := CheckPid(opts.Pid)
	if err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if KernelThread(opts.Pid) {
		opts.Logger.Warn("the target is a kernel thread: it serves no requests, and its tree is every kernel thread it started; give the pid of the server (e.g. $(pgrep -f vllm))",
			"pid", opts.Pid, "comm", comm)
	}
	var roots []int
	for _, r := range opts.Roots {
		if _, err := CheckPid(r); err != nil {
			opts.Logger.Warn("a root of the target is gone", "pid", r, "err", err)
			continue
		}
		roots = append(roots, r)
	}
	opts.Roots = roots
	s := &Session{
		opts: opts, comm: comm, log: opts.Logger.With("component", "session"),
		unavailable: map[string]string{}, exited: make(chan struct{}),
	}
	if opts.Recorder != nil {
		// The scheduler's fork spans pass through the tree on their way
		// to the recorder: it hands each child to the other sections.
		s.tree = newTree(opts.Recorder, s.log)
		opts.Recorder = s.tree
		s.opts.Recorder = s.tree
	}
	for _, f := range factories {
		sec, err := f.New(opts)
		if err != nil {
			if f.Required {
				return nil, fmt.Errorf("%s: %w", f.Name, err)
			}
			s.unavailable[f.Name] = err.Error()
			continue
		}
		if sec != nil {
			s.sections = append(s.sections, sec)
		}
	}
	s.required = map[string]bool{}
	for _, f := range factories {
		s.required[f.Name] = f.Required
	}
	return s, nil
}

// Start starts every section; a required one that fails closes the rest.
func (s *Session) Start(ctx context.Context) error {
	cpus := ""
	if set := bpfutil.ReaderCPUs(); set != nil {
		cpus = cpuList(set)
	}
	s.meter = overhead.Baseline(s.opts.Pid, overhead.Options{
		Before: s.MeasureBefore, EnableStats: bpfutil.EnableStats, ReaderNice: bpfutil.ReaderNice, ReaderCPUs: cpus,
		WithLoad: s.opts.Recorder != nil,
	})
	var started []collectors.Section
	for _, sec := range s.sections {
		if err := sec.Start(ctx); err != nil {
			if s.required[sec.Name()] {
				for i := len(started) - 1; i >= 0; i-- {
					started[i].Close()
				}
				s.sections = nil
				return fmt.Errorf("starting %s: %w", sec.Name(), err)
			}
			s.log.Info("section unavailable", "section", sec.Name(), "err", err)
			s.unavailable[sec.Name()] = strings.TrimPrefix(err.Error(), collectors.ErrNotApplicable.Error()+": ")
			continue
		}
		started = append(started, sec)
	}
	s.sections = started
	bpfutil.ReleaseKernelBTF()
	if kids := adopt(s.opts.Pid, s.opts.Roots, started, s.log); len(kids) > 0 {
		s.log.Info("following the target's child processes", "pids", kids)
		s.children = kids
	}
	if s.tree != nil {
		s.tree.start(started)
	}
	var sources []overhead.Source
	for _, sec := range started {
		if src, ok := sec.(overhead.Source); ok {
			sources = append(sources, src)
		}
	}
	s.meter.Start(sources)
	s.anchor = clock.NewAnchor()
	s.startMono = clock.Now()
	go s.watchExit()
	return nil
}

// watchExit closes s.exited when the target exits (pidfd, else polling).
func (s *Session) watchExit() {
	fd, err := unix.PidfdOpen(s.opts.Pid, 0)
	if err == nil {
		defer unix.Close(fd)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			n, err := unix.Poll(fds, -1)
			if err == unix.EINTR {
				continue
			}
			if n > 0 || err != nil {
				break
			}
		}
	} else {
		for unix.Kill(s.opts.Pid, 0) == nil {
			time.Sleep(200 * time.Millisecond)
		}
	}
	s.exitOnce.Do(func() { close(s.exited) })
}

// Exited is closed when the target process exits.
func (s *Session) Exited() <-chan struct{} { return s.exited }

// Run runs every section until ctx is done, calling tick every interval
// (when interval > 0). Sections deliver what the kernel wrote before
// Run returns.
func (s *Session) Run(ctx context.Context, interval time.Duration, tick func()) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, sec := range s.sections {
		g.Go(func() error {
			if err := sec.Run(gctx); err != nil {
				return fmt.Errorf("%s: %w", sec.Name(), err)
			}
			return nil
		})
	}
	if interval > 0 && tick != nil {
		g.Go(func() error {
			t := time.NewTicker(interval)
			defer t.Stop()
			for {
				select {
				case <-gctx.Done():
					return nil
				case <-t.C:
					tick()
				}
			}
		})
	}
	err := g.Wait()
	s.endMono = clock.Now()
	if s.meter != nil {
		s.meter.Stop()
	}
	return err
}

// Overhead is what the session cost the machine and the target (final
// once Run has returned).
func (s *Session) Overhead() overhead.Report {
	if s.meter == nil {
		return overhead.Report{}
	}
	return s.meter.Report()
}

// Close closes the sections in reverse order. It is idempotent.
func (s *Session) Close() error {
	s.closeOnce.Do(func() {
		if s.tree != nil {
			s.tree.stop()
		}
		var errs []error
		for i := len(s.sections) - 1; i >= 0; i-- {
			if err := s.sections[i].Close(); err != nil {
				errs = append(errs, fmt.Errorf("closing %s: %w", s.sections[i].Name(), err))
			}
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// Pid is the target.
// StartNs is when the session's sections started (CLOCK_MONOTONIC ns).
func (s *Session) StartNs() int64 { return s.startMono }

// Unavailable maps each section that could not run to the reason.
func (s *Session) Unavailable() map[string]string { return maps.Clone(s.unavailable) }

func (s *Session) Pid() int { return s.opts.Pid }

// Comm is the target's command name.
func (s *Session) Comm() string { return s.comm }

// Sections are the sections that started.
func (s *Session) Sections() []collectors.Section { return s.sections }

// Anchor pairs the session's start with wall-clock time.
func (s *Session) Anchor() clock.Anchor { return s.anchor }

// Duration is the time from Start to the end of Run (or now).
func (s *Session) Duration() time.Duration {
	end := s.endMono
	if end == 0 {
		end = clock.Now()
	}
	return time.Duration(end - s.startMono)
}

// Lost sums the sections' lost events.
func (s *Session) Lost() uint64 {
	var n uint64
	for _, sec := range s.sections {
		n += sec.Lost()
	}
	return n
}

// WriteInterval writes every section's interval view under a time stamp.
func (s *Session) WriteInterval(w io.Writer) {
	fmt.Fprintf(w, "%s  pid %d (%s)  lost %d\n", time.Now().Format("15:04:05"), s.opts.Pid, s.comm, s.Lost())
	for _, sec := range s.sections {
		sec.WriteInterval(w)
	}
}

// WriteSummary writes the end-of-session summary for a person.
func (s *Session) WriteSummary(w io.Writer) {
	fmt.Fprintf(w, "\nbpfbench attach: pid %d (%s), %.1fs, %d events lost\n", s.opts.Pid, s.comm, s.Duration().Seconds(), s.Lost())
	for _, sec := range s.sections {
		fmt.Fprintln(w)
		sec.WriteSummary(w)
	}
	for name, why := range s.unavailable {
		fmt.Fprintf(w, "\n%s: unavailable: %s\n", name, why)
	}
	o := s.Overhead()
	fmt.Fprintf(w, "\n%s\n", o.Line())
	for _, warn := range o.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
}

// Summary is the JSON summary: pid, comm, duration, losses, one key per
// section, and {"error": why} for sections that could not run.
func (s *Session) Summary() map[string]any {
	out := map[string]any{
		"pid":              s.opts.Pid,
		"comm":             s.comm,
		"duration_seconds": s.Duration().Seconds(),
		"lost_events":      s.Lost(),
		"start_time":       s.anchor.ToWall(s.startMono),
		"overhead":         s.Overhead(),
	}
	if len(s.opts.Roots) > 0 {
		out["other_roots"] = s.opts.Roots
	}
	if len(s.children) > 0 {
		out["child_processes"] = s.children
	}
	for _, sec := range s.sections {
		out[sec.Name()] = sec.Summary()
	}
	for name, why := range s.unavailable {
		out[name] = map[string]string{"error": why}
	}
	return out
}
