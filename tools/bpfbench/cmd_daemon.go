package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/bpfbench/bpfbench/collectors/bpfutil"
	"github.com/bpfbench/bpfbench/daemon"
	"github.com/bpfbench/bpfbench/internal/caps"
	"github.com/bpfbench/bpfbench/internal/version"
)

func init() { register(newDaemonCmd) }

func newDaemonCmd() *cobra.Command {
	var (
		configFile, listen, webConfig string
		logs                          logFlags
		cpus                          *string
	)
	cmd := &cobra.Command{
		Use:   "daemon",
		Short: "Run host-wide collectors and serve Prometheus metrics (the systemd service)",
		Long: `Host-wide collectors aggregated in the kernel, for the host and for up to 63
configured targets (by pid, comm or cgroup), served on /metrics. TLS and basic
auth through the exporter-toolkit web configuration file. SIGTERM detaches
every link and unloads every program.`,
		Example: `  bpfbench daemon --config /etc/bpfbench/config.yaml
  bpfbench daemon --web.listen-address 127.0.0.1:9464 --log.format json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Sprintf("unexpected argument %q: the daemon takes flags only", args[0])}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDaemon(cmd, configFile, listen, webConfig, logs, *cpus)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&configFile, "config", "", "YAML configuration `FILE` (targets, log level, refresh interval)")
	fs.StringVar(&listen, "web.listen-address", "", "address to serve /metrics on (default :9464, or the config's listen_address)")
	fs.StringVar(&webConfig, "web.config.file", "", "exporter-toolkit web configuration `FILE` for TLS and basic auth")
	logs.add(fs, "", false)
	fs.Lookup("log.level").Usage = "log level: debug, info, warn or error (default: the config's, else info)"
	fs.Lookup("log.format").Usage = "log format: text or json (default: the config's, else text)"
	fs.Lookup("log.format").DefValue = ""
	logs.format = ""
	cpus = cpusFlag(fs)
	_ = cmd.MarkFlagFilename("config", "yaml", "yml")
	_ = cmd.MarkFlagFilename("web.config.file", "yaml", "yml")
	return cmd
}

func runDaemon(cmd *cobra.Command, configFile, listen, webConfig string, logs logFlags, cpus string) error {
	ctx, stderr := cmd.Context(), cmd.ErrOrStderr()
	cfg := daemon.DefaultConfig()
	if configFile != "" {
		var err error
		if cfg, err = daemon.LoadConfig(configFile); err != nil {
			return err
		}
	}
	if cmd.Flags().Changed("log.level") {
		cfg.LogLevel = logs.level
	}
	if cmd.Flags().Changed("log.format") {
		cfg.LogFormat = logs.format
	}
	if webConfig == "" {
		webConfig = cfg.WebConfigFile
	}
	logger, err := newLogger(stderr, cfg.LogLevel, cfg.LogFormat)
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
	if err := d.Start(ctx); err != nil {
		return err
	}
	defer func() {
		if err := d.Close(); err != nil {
			logger.Error("closing collectors", "err", err)
		}
		logger.Info("stopped; every program and link released")
	}()
	if err := d.Run(ctx, listen, webConfig); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
