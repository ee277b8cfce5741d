package main

import "github.com/bpfbench/bpfbench/loadgen/cli"

func init() {
	register("load", command{
		summary: "drive an OpenAI-compatible streaming server and measure TTFT, ITL, TPOT and throughput (vLLM's definitions)",
		run:     cli.RunLoad,
	})
}
