package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/bpfbench/bpfbench/collectors/bpfutil"
	"github.com/bpfbench/bpfbench/daemon"
	"github.com/bpfbench/bpfbench/incident"
	"github.com/bpfbench/bpfbench/internal/caps"
	"github.com/bpfbench/bpfbench/internal/version"
)

func init() { register(newDaemonCmd) }

func newDaemonCmd() *cobra.Command {
	var (
		configFile, listen, webConfig string
		cpus                          *string
		insecure                      bool
	)
	cmd := &cobra.Command{
		Use:   "daemon",
		Short: "Run host-wide collectors and serve Prometheus metrics (the systemd service)",
		Long: `Host-wide collectors aggregated in the kernel, for the host and for up to 63
configured targets (by pid, comm or cgroup), served on /metrics. TLS and basic
auth through the exporter-toolkit web configuration file. SIGTERM detaches
every link and unloads every program. SIGHUP, or POST /-/reload, reads the
configuration file again and applies its targets, log_level,
refresh_interval and agent.allow without stopping a collector; a file that
does not load leaves the configuration in effect (and /-/reload answers 500
with the reason).

Every live target has a flight recorder (incidents, on by default): when its
rule fires (by default its token-gap p99 at least 3x its normal p99 for 30 s),
on bpfbench capture, or on SIGUSR1 (every live target), the gaps around the
moment are written as an incident bundle into incidents.dir
(/var/lib/bpfbench/incidents): bpfbench incidents lists them.

With agent.enabled the session API (bpfbench run --agent) is served on the
same listener; it follows only the processes agent.allow lists. It is not
served on an address other than loopback without a web configuration with
TLS and basic auth, unless --agent.insecure is given.`,
		Example: `  bpfbench daemon --config /etc/bpfbench/config.yaml
  bpfbench daemon --web.listen-address 127.0.0.1:9464 --log.format json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Sprintf("unexpected argument %q: the daemon takes flags only", args[0])}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDaemon(cmd, configFile, listen, webConfig, *cpus, insecure)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&configFile, "config", "", "YAML configuration `FILE` (targets, log level, refresh interval)")
	fs.StringVar(&listen, "web.listen-address", "", "address to serve /metrics on (default :9464, or the config's listen_address)")
	fs.StringVar(&webConfig, "web.config.file", "", "exporter-toolkit web configuration `FILE` for TLS and basic auth")
	fs.BoolVar(&insecure, "agent.insecure", false, "serve the session API (agent.enabled) without TLS and authentication on an address other than loopback")
	cpus = cpusFlag(fs)
	_ = cmd.MarkFlagFilename("config", "yaml", "yml")
	_ = cmd.MarkFlagFilename("web.config.file", "yaml", "yml")
	return cmd
}

func runDaemon(cmd *cobra.Command, configFile, listen, webConfig string, cpus string, insecure bool) error {
	ctx, stderr := cmd.Context(), cmd.ErrOrStderr()
	// SIGHUP reloads: caught from the start, so that one sent while the
	// collectors load does not end the daemon (its default action).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	// SIGUSR1 asks for an incident of every live target.
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)
	load := daemonConfigLoader(cmd, configFile)
	cfg, err := load()
	if err != nil {
		return err
	}
	if webConfig == "" {
		webConfig = cfg.WebConfigFile
	}
	level := new(slog.LevelVar)
	logger, err := leveledLogger(stderr, level, cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		return usageError{err.Error()}
	}
	slog.SetDefault(logger)
	if !caps.CanTrace() {
		return fmt.Errorf("the daemon loads eBPF programs and needs privileges: %s", caps.Hint)
	}
	if err := applyCPUs(cpus); err != nil {
		return err
	}
	if err := bpfutil.EnsureFilesystems(); err != nil {
		logger.Warn("preparing kernel file systems", "err", err)
	}
	logger.Info("starting bpfbench daemon", "version", version.Version, "revision", version.Revision, "targets", len(cfg.Targets))

	d := daemon.New(cfg, logger, hostCollectors())
	d.SetSessionSections(sessionSections()) // the agent API (agent.enabled) builds remote sessions from these
	d.SetAgentInsecure(insecure)
	d.SetLogLevel(level)
	if configFile != "" {
		d.SetConfigLoader(load)
	}
	if err := d.Start(ctx); err != nil {
		return err
	}
	defer func() {
		if err := d.Close(); err != nil {
			logger.Error("closing collectors", "err", err)
		}
		logger.Info("stopped; every program and link released")
	}()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				logger.Info("SIGHUP: reloading the configuration", "file", configFile)
				_ = d.ReloadConfig() // it logs what it did, or why not
			case <-usr1:
				if _, err := d.Capture("", incident.TriggerSignal); err != nil {
					logger.Warn("SIGUSR1: no incident captured", "err", err)
				}
			}
		}
	}()
	if err := d.Run(ctx, listen, webConfig); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// daemonConfigLoader returns what reads the daemon's configuration, at
// the start and on every reload: the file (or the defaults without one),
// with the command line's --log.level and --log.format (the root's), when
// given, on top of the file's log_level and log_format.
func daemonConfigLoader(cmd *cobra.Command, configFile string) func() (daemon.Config, error) {
	return func() (daemon.Config, error) {
		cfg := daemon.DefaultConfig()
		if configFile != "" {
			var err error
			if cfg, err = daemon.LoadConfig(configFile); err != nil {
				return cfg, err
			}
		}
		level, format, levelSet, formatSet := givenLogFlags(cmd)
		if levelSet {
			cfg.LogLevel = level
		}
		if formatSet {
			cfg.LogFormat = format
		}
		return cfg, nil
	}
}

// leveledLogger is newLogger with its level in l, which a reload sets.
func leveledLogger(w io.Writer, l *slog.LevelVar, level, format string) (*slog.Logger, error) {
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: use debug, info, warn or error", level)
	}
	o := &slog.HandlerOptions{Level: l}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, o)), nil
	case "text", "":
		return slog.New(slog.NewTextHandler(w, o)), nil
	}
	return nil, fmt.Errorf("log format %q: use text or json", format)
}
