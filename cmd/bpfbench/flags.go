package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/collectors/bpfutil"
	"github.com/bpfbench/bpfbench/loadgen/enginemetrics"
	"github.com/bpfbench/bpfbench/session"
)

// The flags more than one command takes, each defined once here (the load
// options are job/load's Options.AddFlags).

// --log.level and --log.format, as the daemon and Prometheus exporters
// spell them, are persistent flags of the root: every command takes them,
// before or after its name (bpfbench --log.level debug run ...). Their
// values are checked as they are parsed, so a bad one is a usage error of
// any command. Empty is each command's default.
const (
	logLevelUsage  = "log level: debug, info, warn or error (default: warn; the daemon: its config's log_level, else info)"
	logFormatUsage = "log format: text or json (default: text; the daemon: its config's log_format, else text)"
)

// addLogFlags defines --log.level and --log.format on the root's
// persistent flags.
func addLogFlags(fs *pflag.FlagSet) {
	fs.Var(&checkedString{check: checkLevel}, "log.level", logLevelUsage)
	fs.Var(&checkedString{check: checkFormat}, "log.format", logFormatUsage)
}

// checkedString is a string flag whose value check accepts.
type checkedString struct {
	v     string
	check func(string) error
}

func (c *checkedString) String() string { return c.v }
func (c *checkedString) Type() string   { return "string" }
func (c *checkedString) Set(s string) error {
	if err := c.check(s); err != nil {
		return err
	}
	c.v = s
	return nil
}

// checkLevel and checkFormat say what to give instead: pflag's error
// names the flag and the value.
func checkLevel(s string) error {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return errors.New("use debug, info, warn or error")
	}
	return nil
}

func checkFormat(s string) error {
	if s != "text" && s != "json" {
		return errors.New("use text or json")
	}
	return nil
}

// logFlags is how a command that logs takes the root's --log.level and
// --log.format: its default level, and --log-level, the old spelling
// (deprecated), for a command that had it.
type logFlags struct {
	def string         // the level when --log.level is not given
	old *checkedString // --log-level, or nil
}

// add sets the command's default level; oldSpelling keeps --log-level,
// deprecated, for a command that had it.
func (l *logFlags) add(fs *pflag.FlagSet, def string, oldSpelling bool) {
	l.def = def
	if oldSpelling {
		l.old = &checkedString{check: checkLevel}
		fs.Var(l.old, "log-level", "log level: debug, info, warn or error")
		_ = fs.MarkDeprecated("log-level", "use --log.level instead")
	}
}

// givenLogFlags returns the --log.level and --log.format given to cmd, "" for
// those not given, and whether each was.
func givenLogFlags(cmd *cobra.Command) (level, format string, levelSet, formatSet bool) {
	fs := cmd.Flags()
	if f := fs.Lookup("log.level"); f != nil && f.Changed {
		level, levelSet = f.Value.String(), true
	}
	if f := fs.Lookup("log.format"); f != nil && f.Changed {
		format, formatSet = f.Value.String(), true
	}
	return level, format, levelSet, formatSet
}

// values are the command's level and format: those given, else the old
// spelling's level, else its defaults.
func (l logFlags) values(cmd *cobra.Command) (level, format string) {
	level, format, levelSet, _ := givenLogFlags(cmd)
	if !levelSet && l.old != nil {
		level = l.old.v
	}
	if level == "" {
		level = l.def
	}
	return level, format
}

func (l logFlags) logger(cmd *cobra.Command) (*slog.Logger, error) {
	level, format := l.values(cmd)
	lg, err := newLogger(cmd.ErrOrStderr(), level, format)
	if err != nil {
		return nil, usageError{err.Error()}
	}
	return lg, nil
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	return leveledLogger(w, new(slog.LevelVar), level, format)
}

// outputFlag defines --output (-o) table|json.
func outputFlag(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVarP(p, "output", "o", "table", "output format: table or json")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json"}, cobra.ShellCompDirectiveNoFileComp))
}

func checkOutput(o string) error {
	if o != "table" && o != "json" {
		return usageError{fmt.Sprintf("--output %q: use table or json", o)}
	}
	return nil
}

// jsonAlias is the old boolean --json: --output json.
type jsonAlias struct{ output *string }

func (j jsonAlias) String() string { return strconv.FormatBool(*j.output == "json") }
func (j jsonAlias) Type() string   { return "bool" }
func (j jsonAlias) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	if v {
		*j.output = "json"
	} else {
		*j.output = "table"
	}
	return nil
}

// jsonFlag defines --json, deprecated: --output json.
func jsonFlag(fs *pflag.FlagSet, output *string) {
	f := fs.VarPF(jsonAlias{output}, "json", "", "print the report as one JSON object")
	f.NoOptDefVal = "true"
	_ = fs.MarkDeprecated("json", "use --output json instead")
}

// cpusFlag defines --cpus, the CPUs bpfbench may use.
func cpusFlag(fs *pflag.FlagSet) *string {
	return fs.String("cpus", "", "CPUs bpfbench's own threads may run on, e.g. 0 or 0,2-3 (default: any); the others are kept free for the target")
}

// applyCPUs keeps bpfbench on the --cpus list, if one was given.
func applyCPUs(list string) error {
	if list == "" {
		return nil
	}
	cpus, err := bpfutil.ParseCPUList(list)
	if err != nil {
		return usageError{"--cpus: " + err.Error()}
	}
	return bpfutil.RestrictToCPUs(cpus)
}

// serverFlags are --pid and --port, how run, sweep and validate find the
// server they follow.
type serverFlags struct {
	pid, port int
	cgroup    string // run: --cgroup
	roots     []int  // resolve: the cgroup's other process trees
}

func (s *serverFlags) add(fs *pflag.FlagSet) {
	fs.IntVar(&s.pid, "pid", 0, "the server's process id")
	fs.IntVar(&s.port, "port", 0, "find the server as the process listening on this local TCP port (default: the --target URL's port when local)")
}

// addCgroup adds --cgroup (run).
func (s *serverFlags) addCgroup(fs *pflag.FlagSet) {
	fs.StringVar(&s.cgroup, "cgroup", "", cgroupUsage)
}

const cgroupUsage = "follow every process of this cgroup `PATH` and below it as the server (a systemd service, a container): as /proc/PID/cgroup shows it (/system.slice/vllm.service) or its directory under /sys/fs/cgroup; processes they fork later are followed too"

func (s *serverFlags) given() bool { return s.pid != 0 || s.port != 0 || s.cgroup != "" }

// resolveCgroup returns the root of the cgroup's first process tree and
// the roots of its others, saying what it found on w.
func resolveCgroup(path string, w io.Writer) (int, []int, error) {
	ct, err := collectors.ResolveCgroup(path)
	if err != nil {
		return 0, nil, err
	}
	comm, err := session.CheckPid(ct.Pid)
	if err != nil {
		return 0, nil, err
	}
	more := ""
	if len(ct.Roots) > 0 {
		more = fmt.Sprintf(" and %d other process trees (roots %v)", len(ct.Roots), ct.Roots)
	}
	fmt.Fprintf(w, "server: cgroup %s: %d processes; following pid %d (%s) and its children%s\n", ct.Path, ct.Procs, ct.Pid, comm, more)
	return ct.Pid, ct.Roots, nil
}

// resolve returns the server's pid: --pid, the root of --cgroup's
// processes (the others' roots in s.roots), or the process listening on
// --port or on the target URL's port when it is local.
func (s *serverFlags) resolve(target string, cmd *cobra.Command) (int, error) {
	if s.pid != 0 && s.port != 0 {
		return 0, usageError{"give --pid or --port, not both"}
	}
	if s.cgroup != "" && (s.pid != 0 || s.port != 0) {
		return 0, usageError{"give --cgroup or --pid/--port, not both"}
	}
	if s.cgroup != "" {
		pid, roots, err := resolveCgroup(s.cgroup, cmd.ErrOrStderr())
		s.roots = roots
		return pid, err
	}
	pid := s.pid
	if pid == 0 {
		p := s.port
		if p == 0 {
			p = serverPort(target)
		}
		if p == 0 {
			return 0, usageError{"give the server's --pid, or --port PORT it listens on here"}
		}
		var err error
		if pid, err = session.ListenerPid(p); err != nil {
			return 0, err
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "server: pid %d listens on port %d\n", pid, p)
	}
	if _, err := session.CheckPid(pid); err != nil {
		return 0, err
	}
	return pid, nil
}

// noArgs refuses positional arguments.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q (see %s --help)", args[0], cmd.CommandPath())}
	}
	return nil
}

// pidCompletion completes a pid with the processes of this host.
func pidCompletion(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ents, _ := os.ReadDir("/proc")
	var out []cobra.Completion
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		comm, _ := os.ReadFile("/proc/" + e.Name() + "/comm")
		out = append(out, cobra.CompletionWithDesc(e.Name(), strings.TrimSpace(string(comm))))
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// serverMetricsFlags are --server-metrics and --server-metrics-period, for
// the commands that follow a server while loading it.
type serverMetricsFlags struct {
	url    string
	period time.Duration
}

// check refuses a scrape period out of its range.
func (s *serverMetricsFlags) check() error {
	if s.period < enginemetrics.MinPeriod || s.period > enginemetrics.MaxPeriod {
		return usageError{fmt.Sprintf("--server-metrics-period %v: give %v to %v", s.period, enginemetrics.MinPeriod, enginemetrics.MaxPeriod)}
	}
	return nil
}

func (s *serverMetricsFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&s.url, "server-metrics", "", "the server's Prometheus `URL`, scraped during the load (default: the target's /metrics when it answers; off: none)")
	fs.DurationVar(&s.period, "server-metrics-period", 500*time.Millisecond, "the server metrics' scrape period (250ms to 1s)")
}
