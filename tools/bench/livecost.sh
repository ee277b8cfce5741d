#!/usr/bin/env bash
# The live view's cost on a saturated real engine, ABBA-paired with
# --no-live: llama-server (tools/bench/engine/build.sh) with BENCH_LIVE_ENGINE
# ("-t 1 -np 4 -c 2048") on CPU 0, saturated by an independent client
# (`bpfbench load`, BENCH_LIVE_STREAMS streams, 8, of 96 tokens, on CPU
# 1), and `bpfbench attach PID --duration SECONDS -o json --cpus 1` in three
# modes: live (the default: the walk samples the short gaps over its
# target), exact (--live-walk-target 0: every gap walked) and nolive
# (--no-live); the order rotates by one each round, so that each pair of
# modes runs in both orders (ABBA). BENCH_LIVE_MODES picks the modes
# ("live exact nolive"); with BENCH_LIVE_OLD=PATH, another build's
# bpfbench, the mode "old" is that build in live mode, to compare two
# builds on one engine and one load (BENCH_LIVE_MODES="old live").
#
#   sudo tools/bench/livecost.sh [ROUNDS] [SECONDS]     # 4 rounds of 20 s: ~6 min
#
# Printed per attach: its whole CPU (user + system, getrusage of the child)
# as a fraction of one CPU; its steady CPU (from /proc/PID/stat, from
# STEADY_FROM seconds in, 5, to half a second before the end: an attach
# left running, without its start, which loads the programs and dumps the
# sockets once, 0.2-0.3 s of CPU); with the live view, the live view's own time
# (live.cost: its walk on the advancing thread's CPU clock, its intake of
# spans: their batches timed whole, their queueing estimated from a timed
# sample) and how the walk sampled
# (live.sampling: the largest stride, the gaps left out). Then the budgets:
# the live view <= 0.5% of a CPU (its own accounting, median over rounds)
# and the whole of attach <= 1.5% (median, whole and steady), with the paired differences
# live - no-live and exact - live of attach's CPU per round (median and
# range).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$PWD/bin
rounds=${1:-4}
secs=${2:-20}
streams=${BENCH_LIVE_STREAMS:-8}
read -r -a modes <<<"${BENCH_LIVE_MODES:-live exact nolive}"
for m in "${modes[@]}"; do
	case $m in
	live | exact | nolive) ;;
	old) [ -x "${BENCH_LIVE_OLD:-}" ] || { echo "livecost.sh: the mode old needs BENCH_LIVE_OLD, another build's bpfbench" >&2; exit 1; } ;;
	*) echo "livecost.sh: unknown mode $m (live, exact, nolive, old)" >&2; exit 1 ;;
	esac
done
read -r -a engine_args <<<"${BENCH_LIVE_ENGINE:--t 1 -np 4 -c 2048}"
cache=${BPFBENCH_LLAMA_CACHE:-/var/cache/bpfbench/llama}
server=${BPFBENCH_LLAMA_SERVER:-$cache/bin/llama-server}
model=${BPFBENCH_LLAMA_MODEL:-$cache/tiny-llama.gguf}
[ "$(id -u)" = 0 ] || { echo "livecost.sh: needs root" >&2; exit 1; }
[ -x "$bin/bpfbench" ] || { echo "livecost.sh: run make build first" >&2; exit 1; }
if [ ! -x "$server" ] || [ ! -s "$model" ]; then
	bash tools/bench/engine/build.sh >&2
fi
work=$(mktemp -d)
pids=()
# shellcheck source=tools/bench/reap.sh
. tools/bench/reap.sh
cleanup() {
	reap "${pids[@]}"
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
url=http://127.0.0.1:$port
taskset -c 0 "$server" -m "$model" "${engine_args[@]}" --host 127.0.0.1 --port "$port" >"$work/server.log" 2>&1 &
srv=$!
pids+=("$srv")
for _ in $(seq 300); do
	curl -fsS "$url/health" >/dev/null 2>&1 && break
	kill -0 "$srv" 2>/dev/null || { echo "livecost.sh: llama-server exited:" >&2; tail -n 5 "$work/server.log" >&2; exit 1; }
	sleep 0.2
done
load_secs=$((rounds * ${#modes[@]} * (secs + 8) + 20))
taskset -c 1 "$bin/bpfbench" load --target "$url" --model tiny-llama --max-concurrency "$streams" --num-requests 0 --input-len 32 \
	--output-len 96 --duration "${load_secs}s" --no-progress --result "$work/load.json" >"$work/load.log" 2>&1 &
load=$!
pids+=("$load")
sleep 8 # every stream under way

# rusage SECS CMD... runs CMD and prints on fd 3 "user system steady" of
# it: its whole CPU (getrusage), and its steady CPU, from its
# /proc/PID/stat between STEADY_FROM s after its start and 0.5 s before
# SECS (the programs loaded, the first socket dump done: what an attach
# left running costs, without its start), as a fraction of one CPU.
rusage() {
	python3 - "$@" 3>&3 <<'PY'
import os, resource, subprocess, sys, time
secs = float(sys.argv[1])
frm = float(os.environ.get("STEADY_FROM", "5"))
p = subprocess.Popen(sys.argv[2:])
tick = os.sysconf("SC_CLK_TCK")
def cpu():
    f = open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tick, time.monotonic()
t0 = time.monotonic()
steady = -1.0
try:
    time.sleep(frm)
    c0, w0 = cpu()
    time.sleep(max(secs - 0.5 - (time.monotonic() - t0), 0.5))
    c1, w1 = cpu()
    steady = (c1 - c0) / (w1 - w0)
except (OSError, IndexError, ValueError):
    pass
rc = p.wait()
r = resource.getrusage(resource.RUSAGE_CHILDREN)
os.write(3, f"{r.ru_utime} {r.ru_stime} {steady}\n".encode())
sys.exit(rc)
PY
}

printf '%-5s %-7s %9s %9s %10s %9s %10s %8s %11s %7s %9s\n' round mode attach_% steady_% live_% walk_% intake_% gaps spans stride sampled
for r in $(seq "$rounds"); do
	kill -0 "$load" 2>/dev/null || { echo "livecost.sh: the client stopped:" >&2; tail -n 5 "$work/load.log" >&2; exit 1; }
	# The modes rotated by one each round.
	order=("${modes[@]:$(((r - 1) % ${#modes[@]}))}" "${modes[@]:0:$(((r - 1) % ${#modes[@]}))}")
	for m in "${order[@]}"; do
		extra=()
		exe=$bin/bpfbench
		[ "$m" = nolive ] && extra=(--no-live)
		[ "$m" = exact ] && extra=(--live-walk-target 0)
		[ "$m" = old ] && exe=$BENCH_LIVE_OLD
		f=$work/$m-$r
		rusage "$secs" "$exe" attach "$srv" --duration "${secs}s" -o json --cpus 1 "${extra[@]}" >"$f.json" 2>"$f.err" 3>"$f.rusage" ||
			{ echo "livecost.sh: attach failed:" >&2; tail -n 5 "$f.err" >&2; exit 1; }
		python3 - "$r" "$m" "$secs" "$f.json" "$f.rusage" <<'PY'
import json, sys
r, m, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
doc = json.load(open(sys.argv[4]))
user, system, steady = map(float, open(sys.argv[5]).read().split())
dur = doc.get("duration_seconds") or secs
lv = doc.get("live") or {}
cost = lv.get("cost") or {}
sm = lv.get("sampling") or {}
walk, intake = cost.get("walk_seconds", 0.0), cost.get("record_seconds", 0.0)
attach = (user + system) / dur * 100
head = f"{r:<5s} {m:<7s} {attach:9.2f} {steady * 100:9.2f}"
if m != "nolive":
    print(f"{head} {(walk + intake) / dur * 100:10.2f} {walk / dur * 100:9.2f} {intake / dur * 100:10.2f} "
          f"{lv.get('gaps', 0):8d} {cost.get('records', 0):11d} {sm.get('stride_max', 1):7d} {sm.get('sampled_out', 0):9d}")
else:
    print(f"{head} {'-':>10s} {'-':>9s} {'-':>10s} {'-':>8s} {'-':>11s} {'-':>7s} {'-':>9s}")
PY
	done
done | tee "$work/table"
python3 - "$work/table" <<'PY'
import statistics, sys
att, steady, own = {}, {}, {}
for line in open(sys.argv[1]):
    f = line.split()
    if not f or not f[0].isdigit():
        continue
    att.setdefault(f[1], {})[f[0]] = float(f[2])
    if float(f[3]) >= 0:  # -100: the steady reading failed (attach ended early)
        steady.setdefault(f[1], {})[f[0]] = float(f[3])
    if f[1] != "nolive":
        own.setdefault(f[1], {})[f[0]] = float(f[4])
med = statistics.median
def rng(v):
    v = list(v)
    return f"median {med(v):.2f}% (range {min(v):.2f}-{max(v):.2f})"
def paired(a, b, d=att):
    x = [d[a][r] - d[b][r] for r in d.get(a, {}) if r in d.get(b, {})]
    if not x:
        return None
    return f"median {med(x):+.2f} points (range {min(x):+.2f} to {max(x):+.2f}, {len(x)} rounds)"
print()
if "live" in own:
    print(f"live view, its own accounting: {rng(own['live'].values())} of a CPU, budget 0.5%: {'met' if med(own['live'].values()) <= 0.5 else 'MISSED'}")
if "live" in att:
    print(f"attach with the live view: {rng(att['live'].values())} of a CPU, budget 1.5%: {'met' if med(att['live'].values()) <= 1.5 else 'MISSED'}")
if "nolive" in att:
    print(f"attach --no-live: {rng(att['nolive'].values())}")
sl, sn = steady.get("live", {}), steady.get("nolive", {})
if sl:
    line = f"steady (past its start: STEADY_FROM s in, to 0.5 s before the end): attach {rng(sl.values())}, budget 1.5%: {'met' if med(sl.values()) <= 1.5 else 'MISSED'}"
    if sn and paired("live", "nolive", steady):
        line += f"; --no-live {rng(sn.values())}; paired live - no-live {paired('live', 'nolive', steady)}"
    print(line)
if paired("live", "nolive"):
    print(f"paired live - no-live, attach's CPU: {paired('live', 'nolive')}")
if "exact" in own and paired("exact", "live"):
    print(f"every gap walked (--live-walk-target 0): the live view's own {rng(own['exact'].values())}; paired exact - live, attach's CPU: {paired('exact', 'live')}")
if "old" in own and paired("live", "old"):
    print(f"the other build (BENCH_LIVE_OLD): the live view's own {rng(own['old'].values())}; paired this build - old, attach's CPU: {paired('live', 'old')}; "
          f"the live view's own: {paired('live', 'old', own)}")
PY
