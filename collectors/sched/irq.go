package sched

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// IRQClass is what an interrupt served, for the time it took from the
// thread it interrupted (Event.IrqNs is indexed by it).
type IRQClass uint8

// The classes, as bpf/sched.bpf.c's enum irq_class.
const (
	IRQBlock IRQClass = iota // block devices; BLOCK and IRQ_POLL softirqs
	IRQNet                   // network devices; NET_RX and NET_TX softirqs
	NumIRQClasses
)

// IRQTimer marks a timer's vector (arm64's arch_timer, riscv-timer, the
// legacy "timer" and HPET): its handler is not a device's. The sched
// programs treat it as x86-64's local APIC timer, which runs outside any
// handler: a wakeup from it is "hardirq:timer", and its time is the
// interrupted thread's. It is no class of Event.IrqNs.
const IRQTimer IRQClass = 0xfe

func (c IRQClass) String() string {
	switch c {
	case IRQBlock:
		return "block"
	case IRQNet:
		return "net"
	case IRQTimer:
		return "timer"
	}
	return "irq_class(" + strconv.Itoa(int(c)) + ")"
}

// sysRoot is where sysfs is (tests point it at a tree of their own).
var sysRoot = "/sys"

// IRQClasses classifies the host's device interrupts by what they serve,
// from sysfs under root: a vector of a PCI device (its msi_irqs, or its
// legacy irq) takes the device's class (mass storage: block; network:
// net); a vector no PCI device owns is named by its handlers
// (kernel/irq/N/actions): a virtio device's by its driver (virtio_blk,
// virtio_scsi: block; virtio_net: net), nvme, ahci, ata and mmc block.
// Timers' vectors, named by their handlers (arch_timer, riscv-timer,
// timer, hpet), are IRQTimer. Vectors of anything else (consoles, GPUs,
// vsock) stay out: their time is the interrupted thread's. It returns
// what it found even with an error.
func IRQClasses(root string) (map[uint32]IRQClass, error) {
	out := map[uint32]IRQClass{}
	var errs []error
	devs, err := filepath.Glob(filepath.Join(root, "bus/pci/devices/*"))
	if err != nil {
		errs = append(errs, err)
	}
	for _, d := range devs {
		cls, ok := pciClass(d)
		if !ok {
			continue
		}
		for _, irq := range pciIRQs(d) {
			out[irq] = cls
		}
	}
	acts, _ := filepath.Glob(filepath.Join(root, "kernel/irq/*/actions"))
	for _, a := range acts {
		n, err := strconv.ParseUint(filepath.Base(filepath.Dir(a)), 10, 32)
		if err != nil {
			continue
		}
		if _, ok := out[uint32(n)]; ok {
			continue
		}
		b, err := os.ReadFile(a)
		if err != nil {
			continue
		}
		for name := range strings.SplitSeq(strings.TrimSpace(string(b)), ",") {
			if cls, ok := classByName(root, strings.TrimSpace(name)); ok {
				out[uint32(n)] = cls
				break
			}
		}
	}
	if len(devs) == 0 && len(acts) == 0 {
		errs = append(errs, fmt.Errorf("no PCI devices and no %s", filepath.Join(root, "kernel/irq/*/actions")))
	}
	return out, errors.Join(errs...)
}

// pciClass is a PCI device's class, from the base class of its class code.
func pciClass(dev string) (IRQClass, bool) {
	b, err := os.ReadFile(filepath.Join(dev, "class"))
	if err != nil {
		return 0, false
	}
	code, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(string(b)), "0x"), 16, 32)
	if err != nil {
		return 0, false
	}
	switch code >> 16 {
	case 0x01: // mass storage
		return IRQBlock, true
	case 0x02: // network
		return IRQNet, true
	}
	return 0, false
}

// pciIRQs are a PCI device's interrupt vectors: its MSI/MSI-X vectors and
// its legacy line.
func pciIRQs(dev string) []uint32 {
	var out []uint32
	ents, _ := os.ReadDir(filepath.Join(dev, "msi_irqs"))
	for _, e := range ents {
		if n, err := strconv.ParseUint(e.Name(), 10, 32); err == nil {
			out = append(out, uint32(n))
		}
	}
	if b, err := os.ReadFile(filepath.Join(dev, "irq")); err == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32); err == nil && n != 0 && len(out) == 0 {
			out = append(out, uint32(n))
		}
	}
	return out
}

// classByName classifies a handler by its name.
func classByName(root, name string) (IRQClass, bool) {
	if name == "timer" || strings.HasPrefix(name, "arch_timer") || strings.HasPrefix(name, "arch_mem_timer") ||
		strings.HasSuffix(name, "-timer") || strings.HasPrefix(name, "hpet") {
		return IRQTimer, true
	}
	if rest, ok := strings.CutPrefix(name, "virtio"); ok {
		dev := "virtio" + rest
		if i := strings.IndexByte(rest, '-'); i > 0 {
			dev = "virtio" + rest[:i]
		}
		drv, err := os.Readlink(filepath.Join(root, "bus/virtio/devices", dev, "driver"))
		if err != nil {
			return 0, false
		}
		switch filepath.Base(drv) {
		case "virtio_blk", "virtio_scsi":
			return IRQBlock, true
		case "virtio_net":
			return IRQNet, true
		}
		return 0, false
	}
	for _, p := range []string{"nvme", "ahci", "ata_", "mmc"} {
		if strings.HasPrefix(name, p) {
			return IRQBlock, true
		}
	}
	return 0, false
}
