#!/usr/bin/env bash
# Output tokens/s of the real engine alone: llama-server (-t THREADS -np 4)
# on the tiny model, driven by `bpfbench load` with 4 streams of 96 tokens
# (after one warm-up round). Also prints the server's CPU-seconds per output
# token, which moves less than the wall-clock rate when the CPUs are shared.
# Needs `make build` and tools/bench/engine/build.sh.
#
#   tools/bench/engine/tokps.sh [threads] [rounds]     (OMP_WAIT_POLICY=passive to compare)
set -euo pipefail
cd "$(dirname "$0")/../.."
threads=${1:-2}
rounds=${2:-3}
server=${BPFBENCH_LLAMA_SERVER:-/var/cache/bpfbench/llama/bin/llama-server}
model=${BPFBENCH_LLAMA_MODEL:-/var/cache/bpfbench/llama/tiny-llama.gguf}
[ -x "$server" ] && [ -s "$model" ] || { echo "tokps.sh: no engine: run tools/bench/engine/build.sh" >&2; exit 1; }
bpfbench=${BPFBENCH:-bin/bpfbench}
[ -x "$bpfbench" ] || { echo "tokps.sh: no $bpfbench: run make build" >&2; exit 1; }
tmp=$(mktemp -d)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$server" -m "$model" --host 127.0.0.1 --port "$port" -t "$threads" -tb "$threads" -np 4 -c 4096 --no-webui >"$tmp/server.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$tmp"' EXIT
for _ in $(seq 300); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
load=(--target "http://127.0.0.1:$port" --model tiny-llama --max-concurrency 4 --num-requests 4 --input-len 32 --output-len 96 --no-progress)
"$bpfbench" load "${load[@]}" --result "$tmp/warm.json" >/dev/null
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
echo "llama-server -t $threads -np 4, 4 streams x 96 tokens, OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-default}, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
	c0=$(cpu)
	"$bpfbench" load "${load[@]}" --result "$tmp/r.json" >/dev/null
	c1=$(cpu)
	python3 - "$tmp/r.json" "$c0" "$c1" "$r" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
tok = sum(d["output_lens"])
cpu = (int(sys.argv[3]) - int(sys.argv[2])) / 100  # clock ticks
print("round %s: %d/%d completed, %d tokens, %.0f output tok/s, server CPU %.2f ms/token"
      % (sys.argv[4], d["completed"], d["num_prompts"], tok, d["output_throughput"], 1000 * cpu / max(tok, 1)))
EOF
done
