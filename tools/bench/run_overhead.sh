#!/usr/bin/env bash
# The cost of following a server: llmsim driven at its limit (closed loop,
# more concurrency than it can batch) by `bpfbench load` alone and by
# `bpfbench run` (every collector attached, correlation afterwards),
# alternating, in one run. Prints the server's output token throughput of
# each round and the median ratio. Needs root and `make build`.
#
#   sudo tools/bench/run_overhead.sh [rounds] [requests]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
n=${2:-300}
bin=$PWD/bin
tmp=$(mktemp -d)
trap 'kill $sim 2>/dev/null || true; rm -rf "$tmp"' EXIT
port=18765
CUDASTUB_KERNEL_US=500 "$bin/llmsim" --addr 127.0.0.1:$port --work cpu --itl 5ms --max-num-seqs 64 \
	--batch-slowdown 0.02 --cuda-lib "$bin/libcuda.so.1" >"$tmp/llmsim.log" 2>&1 &
sim=$!
for _ in $(seq 50); do curl -sf http://127.0.0.1:$port/health >/dev/null && break; sleep 0.1; done
load=(--target http://127.0.0.1:$port --num-requests "$n" --max-concurrency 96 --input-len 64 --output-len 128)
tput() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["output_throughput"])' "$1"; }
"$bin/bpfbench" load "${load[@]}" --no-progress --num-requests 50 --out "$tmp/warm.json" >/dev/null
ratios=()
for r in $(seq "$rounds"); do
	"$bin/bpfbench" load "${load[@]}" --no-progress --out "$tmp/base.json" >/dev/null
	"$bin/bpfbench" run "${load[@]}" --pid $sim --out "$tmp/run" >/dev/null
	b=$(tput "$tmp/base.json")
	w=$(tput "$tmp/run/result.json")
	ratio=$(python3 -c "print($w/$b)")
	ratios+=("$ratio")
	printf 'round %d: output tok/s without %.1f, with collectors %.1f, ratio %.4f\n' "$r" "$b" "$w" "$ratio"
done
python3 -c "import statistics,sys; r=sorted(map(float,sys.argv[1:])); print('median ratio %.4f (throughput loss %.2f%%)' % (statistics.median(r), 100*(1-statistics.median(r))))" "${ratios[@]}"
