#!/usr/bin/env bash
# kneedrift.sh [SWEEPS]: does a freshly started server's knee move while it
# warms up? Starts llama-server (make engine; -t 2 -np 2), then SWEEPS times
# (default 3): a capacity probe (bpfbench load, 80 requests at once), the
# real-engine knee test's sweep, the probe again. Prints each probe's
# throughput and each sweep's knee, interval and answer; sweep.json files
# stay in $OUT (default /tmp/bpfbench-kneedrift). No root needed.
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-3}
out=${OUT:-/tmp/bpfbench-kneedrift}
llama=${BPFBENCH_LLAMA_CACHE:-/var/cache/bpfbench/llama}
port=${PORT:-18080}
url=http://127.0.0.1:$port
[[ -x bin/bpfbench ]] || { echo "kneedrift: run make build first" >&2; exit 1; }
[[ -x $llama/bin/llama-server ]] || { echo "kneedrift: run make engine first" >&2; exit 1; }
mkdir -p "$out"
"$llama/bin/llama-server" --model "$llama/tiny-llama.gguf" --host 127.0.0.1 --port "$port" \
	--threads 2 --threads-batch 2 --parallel 2 --ctx-size 1024 --alias tiny-llama --no-webui \
	--metrics >"$out/llama.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
	curl -sf "$url/health" >/dev/null && break
	sleep 0.5
done
start=$SECONDS
probe() {
	bin/bpfbench load --target "$url" --model tiny-llama --input-len 32 --output-len 16 \
		--num-requests 80 --rate inf --result "$out/probe.json" >/dev/null 2>&1
	python3 -c 'import json,sys; print("%.2f" % json.load(open(sys.argv[1]))["request_throughput"])' "$out/probe.json"
}
for i in $(seq 1 "$n"); do
	echo "$((SECONDS - start)) s: probe $(probe) req/s"
	bin/bpfbench sweep --target "$url" --out "$out/sweep$i" --model tiny-llama --input-len 32 \
		--output-len 16 --burstiness 4 --slo "p99_ttft_ms<=300" --requests-per-step 80 \
		--precision 0.1 --max-waiting -1 --no-progress >"$out/sweep$i.txt" 2>&1
	python3 - "$out/sweep$i/sweep.json" "$i" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
iv = d.get("interval") or {}
print("  sweep %s: answer %.2f req/s, knee %.2f (fit %.2f), 95%% interval %.2f-%.2f, %d steps"
      % (sys.argv[2], d.get("answer", 0), iv.get("knee", 0), iv.get("fit_knee", 0),
         iv.get("ci_low", 0), iv.get("ci_high", 0), len(d.get("steps", []))))
PY
	echo "$((SECONDS - start)) s: probe $(probe) req/s"
done
