package main

import (
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/bpfbench/bpfbench/job/load"
)

func init() { register(newLoadCmd) }

func newLoadCmd() *cobra.Command {
	var (
		j    = load.NewLoadJob()
		logs logFlags
	)
	cmd := &cobra.Command{
		Use:   "load --target URL [load options] [--result FILE]",
		Short: "Drive an OpenAI-compatible streaming server and measure TTFT, ITL, TPOT and throughput (vLLM's definitions)",
		Long: `A streaming client for OpenAI-compatible servers (vLLM, SGLang, TGI, llama.cpp,
Ollama) with vLLM's metric definitions (TTFT, TPOT, ITL, E2EL, goodput) and
result field names. Prints vLLM's summary table; --result writes the result
JSON. Its flags are the load options every command that sends load takes
(run, sweep; validate and demo those their phases leave to the user).

$OPENAI_API_KEY, when set and no Authorization header is given with
--header, is sent as Authorization: Bearer … (the openai protocol; KServe's
gRPC protocol has no such convention: give --header authorization=…, sent
as gRPC metadata). The key is never logged nor written into a result; a
run's manifest records bpfbench's arguments with the value of a credential
header redacted.`,
		Example: `  bpfbench load --target http://127.0.0.1:8000 --num-requests 200 --rate 8 --result result.json
  bpfbench load --target http://127.0.0.1:8000 --duration 60s --max-concurrency 16 --endpoint chat`,
		Args:        noArgs,
		Annotations: map[string]string{planned: "true"},
		RunE: func(cmd *cobra.Command, args []string) error {
			logger, err := logs.logger(cmd)
			if err != nil {
				return err
			}
			// The OTLP exporter logs through the default logger.
			prev := slog.Default()
			slog.SetDefault(logger)
			defer slog.SetDefault(prev)
			j.Logger = logger
			return j.Run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	j.AddFlags(cmd.Flags())
	logs.add(cmd.Flags(), "warn", false)
	loadCompletions(cmd)
	return cmd
}
