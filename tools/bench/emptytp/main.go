// Command emptytp attaches an empty tp_btf program to a scheduler
// tracepoint (sched_switch unless given) until SIGINT or SIGTERM: the floor
// of any observer that runs a program on every event there, for
// tools/bench/overhead.sh's storm. The program is two instructions
// (r0 = 0; exit), so what it costs is the kernel's dispatch alone.
//
//	emptytp [TRACEPOINT]
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

func main() {
	tp := "sched_switch"
	if len(os.Args) > 1 {
		tp = os.Args[1]
	}
	if err := run(tp); err != nil {
		fmt.Fprintln(os.Stderr, "emptytp:", err)
		os.Exit(1)
	}
}

func run(tp string) error {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "empty_tp",
		Type:         ebpf.Tracing,
		AttachType:   ebpf.AttachTraceRawTp,
		AttachTo:     tp,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		return fmt.Errorf("loading an empty tp_btf/%s program: %w", tp, err)
	}
	defer prog.Close()
	l, err := link.AttachTracing(link.TracingOptions{Program: prog})
	if err != nil {
		return fmt.Errorf("attaching to tp_btf/%s: %w", tp, err)
	}
	defer l.Close()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	fmt.Fprintf(os.Stderr, "emptytp: an empty program on tp_btf/%s; SIGINT or SIGTERM ends it\n", tp)
	<-sig
	return nil
}
