package main

import "github.com/bpfbench/bpfbench/job/load"

func init() {
	register("load", command{
		summary: "drive an OpenAI-compatible streaming server and measure TTFT, ITL, TPOT and throughput (vLLM's definitions)",
		run:     load.RunLoad,
	})
}
