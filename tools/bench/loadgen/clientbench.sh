#!/usr/bin/env bash
# Drives llmsim at its limit and prints the load generator's chunks per
# second per core of client CPU (user+system from getrusage in the client
# process, which runs apart from the server).
#   tools/bench/loadgen/clientbench.sh [requests] [concurrency] [output-len]
set -euo pipefail
cd "$(dirname "$0")/../../.."
N=${1:-2000}
C=${2:-256}
OUT=${3:-256}
TMP=$(mktemp -d)
trap 'kill "$SIM" 2>/dev/null || true; rm -rf "$TMP"' EXIT
go build -o "$TMP/llmsim" ./cmd/llmsim
go build -o "$TMP/loadclient" ./job/load/loadclient
PORT=$((20000 + RANDOM % 20000))
# A server as cheap as possible per token: sleep steps, no batch slowdown.
"$TMP/llmsim" --addr 127.0.0.1:$PORT --work sleep --itl 1ms --prefill-base 0 --prefill-per-token 0 \
  --batch-slowdown 0 --max-num-seqs 4096 --max-model-len 100000 --eos-prob 0 2>"$TMP/llmsim.log" &
SIM=$!
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break; sleep 0.1; done
"$TMP/loadclient" --target "http://127.0.0.1:$PORT" --num-requests "$N" --max-concurrency "$C" \
  --input-len 16 --output-len "$OUT" --no-progress --result "$TMP/result.json" >"$TMP/summary.txt"
grep -E "Successful requests|Failed requests|Benchmark duration|Output token throughput|Median ITL|P99 ITL|Client CPU|Chunks per client" "$TMP/summary.txt"
python3 - "$TMP/result.json" <<'PY' 2>/dev/null || true
import json, sys
r = json.load(open(sys.argv[1]))
b = r["bpfbench"]
chunks, cpu, dur = b["chunks"], b["client_cpu_seconds"], r["duration"]
print(f"chunks/s: {chunks/dur:,.0f}; client CPU: {cpu/dur:.2f} cores; chunks/s per client core: {chunks/cpu:,.0f}")
open(sys.argv[1] + ".per-core", "w").write(str(chunks / cpu))
PY
# The same load from a Python asyncio client (the shape of vLLM's), for the ratio.
if command -v python3 >/dev/null; then
  py=$(python3 tools/bench/loadgen/asyncio_client.py "$PORT" "$N" "$C" "$OUT")
  echo "$py"
  python3 - "$TMP/result.json.per-core" "$py" <<'PY' || true
import re, sys
go = float(open(sys.argv[1]).read())
py = float(re.search(r"([\d,]+) chunks/s per client core", sys.argv[2]).group(1).replace(",", ""))
print(f"chunks per client core: bpfbench {go:,.0f}, python asyncio {py:,.0f}: {go/py:.1f}x")
PY
fi
