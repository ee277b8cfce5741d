package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/bpfbench/bpfbench/collectors/bpfutil"
	"github.com/bpfbench/bpfbench/daemon"
	"github.com/bpfbench/bpfbench/internal/caps"
	"github.com/bpfbench/bpfbench/internal/version"
)

func init() {
	register("daemon", command{
		summary: "run host-wide collectors and serve Prometheus metrics (the systemd service)",
		run:     runDaemon,
	})
}

func runDaemon(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("daemon", stderr, "daemon [--config FILE] [--web.listen-address :9464] [--web.config.file FILE]")
	configFile := fs.String("config", "", "YAML configuration file (targets, log level, refresh interval)")
	listen := fs.String("web.listen-address", "", "address to serve /metrics on (default :9464, or the config's listen_address)")
	webConfig := fs.String("web.config.file", "", "exporter-toolkit web configuration file for TLS and basic auth")
	logLevel := fs.String("log.level", "", "debug, info, warn or error (overrides the config)")
	logFormat := fs.String("log.format", "", "text or json (overrides the config)")
	cpus := cpusFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usageError{fmt.Sprintf("unexpected argument %q: the daemon takes flags only", fs.Arg(0))}
	}
	cfg := daemon.DefaultConfig()
	if *configFile != "" {
		var err error
		if cfg, err = daemon.LoadConfig(*configFile); err != nil {
			return err
		}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["log.level"] {
		cfg.LogLevel = *logLevel
	}
	if set["log.format"] {
		cfg.LogFormat = *logFormat
	}
	if *webConfig == "" {
		*webConfig = cfg.WebConfigFile
	}
	logger, err := newLogger(stderr, cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		return usageError{err.Error()}
	}
	slog.SetDefault(logger)
	if !caps.CanTrace() {
		return fmt.Errorf("the daemon loads eBPF programs and needs privileges: %s", caps.Hint)
	}
	if err := applyCPUs(*cpus); err != nil {
		return err
	}
	if err := bpfutil.EnsureFilesystems(); err != nil {
		logger.Warn("preparing kernel file systems", "err", err)
	}
	logger.Info("starting bpfbench daemon", "version", version.Version, "revision", version.Revision, "targets", len(cfg.Targets))

	d := daemon.New(cfg, logger, hostCollectors())
	if err := d.Start(ctx); err != nil {
		return err
	}
	defer func() {
		if err := d.Close(); err != nil {
			logger.Error("closing collectors", "err", err)
		}
		logger.Info("stopped; every program and link released")
	}()
	if err := d.Run(ctx, *listen, *webConfig); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
