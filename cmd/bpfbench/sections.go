package main

import (
	"log/slog"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/collectors/blockio"
	"github.com/bpfbench/bpfbench/collectors/cuda"
	"github.com/bpfbench/bpfbench/collectors/gpu"
	"github.com/bpfbench/bpfbench/collectors/sched"
	"github.com/bpfbench/bpfbench/collectors/tcp"
	"github.com/bpfbench/bpfbench/daemon"
	"github.com/bpfbench/bpfbench/internal/manifest"
	"github.com/bpfbench/bpfbench/readiness"
	"github.com/bpfbench/bpfbench/session"
)

// sessionSections are the sections of `attach` and `run`, in start order.
// Only the scheduler is required; the others report why they are
// unavailable (no NVML, no CUDA library mapped, ...) and the session goes on.
func sessionSections() []session.SectionFactory {
	return []session.SectionFactory{
		{Name: "sched", Required: true, New: func(o collectors.Options) (collectors.Section, error) {
			return sched.NewSection(o), nil
		}},
		{Name: "blockio", New: func(o collectors.Options) (collectors.Section, error) {
			return blockio.NewSection(o)
		}},
		{Name: "tcp", New: func(o collectors.Options) (collectors.Section, error) {
			return tcp.NewSection(o)
		}},
		{Name: "cuda", New: func(o collectors.Options) (collectors.Section, error) {
			s, err := cuda.NewSection(o)
			if err != nil {
				return nil, err // a literal nil, not a typed nil in the interface
			}
			return s, nil
		}},
		{Name: "gpu", New: func(o collectors.Options) (collectors.Section, error) {
			return gpu.NewSection(o), nil
		}},
	}
}

// tracepointSets are the tracepoints `bpfbench check` tries, per collector.
func tracepointSets() []readiness.TracepointSet {
	return []readiness.TracepointSet{
		{Collector: "sched", Required: sched.Tracepoints, Probe: sched.Probe},
		{Collector: "blockio", Optional: blockio.Tracepoints, Probe: blockio.Probe},
		{Collector: "tcp", Optional: tcp.Tracepoints, Probe: tcp.Probe},
		{Collector: "cuda", Probe: cuda.Probe, OneLoad: true},
	}
}

// hostCollectors are the daemon's collectors, in start order.
func hostCollectors() []daemon.HostFactory {
	return []daemon.HostFactory{
		{Name: "sched", Required: true, New: func(l *slog.Logger, n collectors.TargetNames) collectors.Host {
			return sched.NewHost(l, n)
		}},
		{Name: "blockio", New: func(l *slog.Logger, n collectors.TargetNames) collectors.Host {
			return blockio.NewHost(l, n)
		}},
		{Name: "tcp", New: func(l *slog.Logger, n collectors.TargetNames) collectors.Host {
			return tcp.NewHost(l, n)
		}},
		{Name: "cuda", New: func(l *slog.Logger, n collectors.TargetNames) collectors.Host {
			return cuda.NewHost(l, n)
		}},
		{Name: "gpu", New: func(l *slog.Logger, n collectors.TargetNames) collectors.Host {
			return gpu.NewHost(l, gpu.DefaultInterval, n)
		}},
	}
}

// runManifest is what a run's manifest takes from the composition root:
// the GPUs, through NVML.
func runManifest() manifest.Options { return manifest.Options{GPU: gpu.ManifestSource} }
