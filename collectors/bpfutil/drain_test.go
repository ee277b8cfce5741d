package bpfutil

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/bpfbench/bpfbench/internal/privtest"
)

// A reader parks on the runtime's poller and wakes when the kernel wakes
// the ring's readers, not at its period: a program writes a known record
// with BPF_RB_FORCE_WAKEUP to a reader whose period is an hour, and the
// record arrives; cancelling the reader ends its Drain.
func TestDrainWakesOnTheKernelsWakeup(t *testing.T) {
	privtest.Require(t)
	rb, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.RingBuf, MaxEntries: 1 << 16})
	if err != nil {
		t.Fatalf("creating a ring buffer: %v", err)
	}
	defer rb.Close()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SocketFilter, License: "GPL", Instructions: asm.Instructions{
		asm.Mov.Imm(asm.R1, 42),
		asm.StoreMem(asm.RFP, -8, asm.R1, asm.DWord),
		asm.LoadMapPtr(asm.R1, rb.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -8),
		asm.Mov.Imm(asm.R3, 8),
		asm.Mov.Imm(asm.R4, 2), // BPF_RB_FORCE_WAKEUP
		asm.FnRingbufOutput.Call(),
		asm.Mov.Imm(asm.R0, 0),
		asm.Return(),
	}})
	if err != nil {
		t.Fatalf("loading the writer: %v", err)
	}
	defer prog.Close()
	rd, err := ringbuf.NewReader(rb)
	if err != nil {
		t.Fatal(err)
	}
	b := NewBase("drain", nil)
	b.events, b.rd = rb, rd
	defer rd.Close()

	_, closeWait, ok := b.pollWaiter(context.Background(), time.Hour)
	if !ok {
		t.Fatal("the ring's descriptor is not on the runtime's poller: the reader would block in a system call")
	}
	closeWait()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan uint64, 4)
	done := make(chan error, 1)
	go func() { done <- Drain(ctx, b, time.Hour, func(v *uint64) { got <- *v }) }()
	// The reader may not be waiting yet: write until a record comes.
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for received := false; !received; {
		if _, err := prog.Run(&ebpf.RunOptions{Data: make([]byte, 14)}); err != nil {
			t.Fatalf("running the writer: %v", err)
		}
		select {
		case v := <-got:
			if v != 42 {
				t.Fatalf("record %d, want 42", v)
			}
			received = true
		case <-tick.C:
		case <-deadline:
			t.Fatal("no record in 30 s with the reader's period an hour: the kernel's wakeup did not wake it")
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("Drain: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Drain did not return within 30 s of its context's end (period an hour)")
	}
	if w := b.wakeups.Load(); w == 0 {
		t.Error("no wakeup counted")
	}
}
