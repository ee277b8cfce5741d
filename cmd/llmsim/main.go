// Command llmsim is a simulated OpenAI-compatible streaming LLM server that
// behaves like a real engine on a CPU (see package sim).
//
//	llmsim --addr 127.0.0.1:8000 --max-num-seqs 4 --itl 10ms --prefill-per-token 50us
//	llmsim --addr 127.0.0.1:8000 --grpc 127.0.0.1:8001 --grpc-delay-headers
//	llmsim --processes 2   # a frontend and an engine child process, as vLLM V1
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

	"github.com/bpfbench/bpfbench/llmsim/sim"
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
	grpcAddr := fs.String("grpc", "", "also serve Triton's gRPC inference protocol (KServe v2, ModelStreamInfer) on this `address`, e.g. 127.0.0.1:8001")
	engineSocket := fs.String("engine-socket", "", "run as the engine process of a --processes 2 frontend on this socket (a file descriptor number or a unix socket path); the frontend starts it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *engineSocket != "" {
		return sim.ServeEngine(*engineSocket)
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
		"max_num_seqs", cfg.MaxNumSeqs, "itl", cfg.DecodeStep, "work", cfg.Work, "processes", cfg.Processes, "engine_pid", srv.EnginePid())
	if *grpcAddr == "" {
		return srv.Serve(ctx, l)
	}
	gl, err := net.Listen("tcp", *grpcAddr)
	if err != nil {
		l.Close()
		return fmt.Errorf("listening on %s: %w", *grpcAddr, err)
	}
	slog.Info("serving gRPC", "component", "llmsim", "addr", gl.Addr().String(), "delay_headers", cfg.GRPCDelayHeaders)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	go func() { errc <- srv.ServeGRPC(ctx, gl) }()
	go func() { errc <- srv.Serve(ctx, l) }()
	err = <-errc
	cancel()
	return errors.Join(err, <-errc)
}
