// Command llmsim is a simulated OpenAI-compatible streaming LLM server that
// behaves like a real engine on a CPU (see package sim).
//
//	llmsim --addr 127.0.0.1:8000 --max-num-seqs 4 --itl 10ms --prefill-per-token 50us
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/bpfbench/bpfbench/tools/llmsim/sim"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "llmsim:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("llmsim", flag.ContinueOnError)
	cfg := sim.DefaultConfig()
	cfg.RegisterFlags(fs)
	addr := fs.String("addr", "127.0.0.1:8000", "listen address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	srv, err := sim.New(cfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", *addr, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	slog.Info("serving", "component", "llmsim", "addr", l.Addr().String(), "model", cfg.Model,
		"max_num_seqs", cfg.MaxNumSeqs, "itl", cfg.DecodeStep, "work", cfg.Work)
	return srv.Serve(ctx, l)
}
