package main

import "github.com/bpfbench/bpfbench/loadgen/cli"

func init() {
	register("load", command{
		summary: "drive an OpenAI-compatible streaming server and measure TTFT, ITL, TPOT and throughput (vLLM's definitions)",
		run:     cli.RunLoad,
	})
	register("sweep", command{
		summary: "find the highest request rate (or concurrency) a server sustains within latency SLOs",
		run:     cli.RunSweep,
	})
}
