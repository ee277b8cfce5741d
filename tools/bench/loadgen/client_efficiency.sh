#!/usr/bin/env bash
# Client efficiency: chunks received per client CPU-second, for bpfbench's
# load generator, a Python client on vLLM's request path (aiohttp, see
# aiohttp_client.py) and the floor (floor/floor.c: one epoll loop that only
# counts "data:" lines), against the same llmsim in the same run.
#
#   tools/bench/loadgen/client_efficiency.sh [STREAMS] [TOKENS] [ITL_MS] [ROUNDS]
#
# bpfbench is job/load/loadclient, `bpfbench load` as its own process.
# Every client sends STREAMS streaming requests at once for TOKENS tokens
# each (ignore_eos), one token every ITL_MS ms; each round runs the three
# clients one after the other, in a new process each. A client's CPU is
# user+system of the child process from wait4 (startup included), so every
# client is charged the same way. Prints each run, then the median over the
# rounds and the ratios. Needs go, cc and /usr/bin/python3 with python3-aiohttp.
# Also measured: bpfbench through Go's net/http (--net-http), and, with
# BASELINE_LOADCLIENT=PATH, another build of job/load/loadclient (an
# older commit, for before/after).
set -euo pipefail
cd "$(dirname "$0")/../../.."
STREAMS=${1:-100}
TOKENS=${2:-256}
ITL_MS=${3:-2}
ROUNDS=${4:-3}
PY=${PYTHON:-/usr/bin/python3}
TMP=$(mktemp -d)
SIM=
trap '[ -n "$SIM" ] && kill "$SIM" 2>/dev/null; rm -rf "$TMP"' EXIT
go build -o "$TMP/llmsim" ./cmd/llmsim
go build -o "$TMP/loadclient" ./job/load/loadclient
cc -O2 -o "$TMP/floor" tools/bench/loadgen/floor/floor.c
PORT=$((20000 + RANDOM % 20000))
# A server as cheap as possible per token: sleep steps, no batch slowdown.
"$TMP/llmsim" --addr 127.0.0.1:$PORT --work sleep --itl "${ITL_MS}ms" --prefill-base 0 --prefill-per-token 0 \
  --batch-slowdown 0 --max-num-seqs 4096 --max-model-len 100000 --eos-prob 0 2>"$TMP/llmsim.log" &
SIM=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break; sleep 0.1; done
URL="http://127.0.0.1:$PORT"

# cpu CMD...: runs CMD, prints its stdout to $TMP/out and "user+sys" seconds.
cpu() {
  "$PY" - "$@" <<'PY'
import os, subprocess, sys
with open(os.environ["OUTFILE"], "w") as f:
    p = subprocess.Popen(sys.argv[1:], stdout=f, stderr=subprocess.STDOUT)
    _, status, ru = os.wait4(p.pid, 0)
if os.waitstatus_to_exitcode(status) != 0:
    sys.exit(f"{sys.argv[1]} failed: " + open(os.environ["OUTFILE"]).read()[-2000:])
print(f"{ru.ru_utime + ru.ru_stime:.4f}")
PY
}
export OUTFILE="$TMP/out"
: >"$TMP/runs"
for r in $(seq "$ROUNDS"); do
  c=$(cpu "$TMP/loadclient" --target "$URL" --num-requests "$STREAMS" --max-concurrency "$STREAMS" \
    --input-len 16 --output-len "$TOKENS" --no-progress --result "$TMP/result.json")
  n=$("$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["bpfbench"]["chunks"] if r["failed"]==0 else 0)' "$TMP/result.json")
  echo "bpfbench $n $c" >>"$TMP/runs"
  c=$(cpu "$TMP/loadclient" --target "$URL" --num-requests "$STREAMS" --max-concurrency "$STREAMS" \
    --input-len 16 --output-len "$TOKENS" --no-progress --result "$TMP/result.json" --net-http)
  n=$("$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["bpfbench"]["chunks"] if r["failed"]==0 else 0)' "$TMP/result.json")
  echo "net/http $n $c" >>"$TMP/runs"
  if [ -n "${BASELINE_LOADCLIENT:-}" ]; then
    c=$(cpu "$BASELINE_LOADCLIENT" --target "$URL" --num-requests "$STREAMS" --max-concurrency "$STREAMS" \
      --input-len 16 --output-len "$TOKENS" --no-progress --result "$TMP/result.json")
    n=$("$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["bpfbench"]["chunks"] if r["failed"]==0 else 0)' "$TMP/result.json")
    echo "baseline $n $c" >>"$TMP/runs"
  fi
  c=$(cpu "$PY" tools/bench/loadgen/aiohttp_client.py "$URL" "$STREAMS" "$TOKENS")
  n=$(sed -n 's/^aiohttp: \([0-9]*\)\/[0-9]* ok, \([0-9]*\) chunks.*/\1 \2/p' "$TMP/out")
  [ "${n%% *}" = "$STREAMS" ] || { cat "$TMP/out"; exit 1; }
  echo "python ${n#* } $c" >>"$TMP/runs"
  c=$(cpu "$TMP/floor" 127.0.0.1 "$PORT" "$STREAMS" "$TOKENS")
  n=$(sed -n 's/^floor: \([0-9]*\) chunks.*/\1/p' "$TMP/out")
  echo "floor $n $c" >>"$TMP/runs"
done
"$PY" - "$TMP/runs" "$STREAMS" "$TOKENS" "$ITL_MS" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    name, n, c = line.split()
    runs.setdefault(name, []).append(int(n) / float(c))
    print(f"  {name:9s} {int(n):7d} chunks {float(c):7.3f} CPU-s {int(n)/float(c):11,.0f} chunks/CPU-s")
want = int(sys.argv[2]) * int(sys.argv[3])
med = {k: statistics.median(v) for k, v in runs.items()}
print(f"{sys.argv[2]} streams x {sys.argv[3]} tokens, {sys.argv[4]} ms apart ({want} chunks a run); median of {len(runs['floor'])} rounds, chunks/CPU-s:")
for k in ("bpfbench", "net/http", "baseline", "python", "floor"):
    if k in med:
        print(f"  {k:9s} {med[k]:11,.0f}")
print(f"bpfbench / python: {med['bpfbench']/med['python']:.2f}x   floor / bpfbench: {med['floor']/med['bpfbench']:.2f}x   "
      f"floor / python: {med['floor']/med['python']:.2f}x" +
      (f"   bpfbench / baseline: {med['bpfbench']/med['baseline']:.2f}x" if "baseline" in med else ""))
PY
