#!/usr/bin/env bash
# The observer effect: what following a workload with bpfbench costs the
# workload, next to the same workload followed by nothing (and, for the
# scheduler storm, by bpftrace), measured in alternating rounds of one run.
# Every round measures every mode of a part once, in an order rotated by one
# each round; the table gives per mode the median and min-max of the figure
# and its ratio to "nothing" (tools/bench/README.md explains how to read it).
#
#   sudo tools/bench/overhead.sh [options] [ROUNDS [PARTS]]
#
#   ROUNDS  rounds per part (default 3)
#   PARTS   comma list of engine,llmsim,storm,cuda,barrier,client (default all)
#   -o FILE          also write every figure and the summary as JSON
#   -d SECONDS       duration of one storm/cuda/barrier measurement (default 5)
#   --no-bpf-stats   skip the extra pass per observer that reads BPF run
#                    time (kernel.bpf_stats_enabled=1, restored after)
#   -k               keep the scratch directory (raw outputs) and say where
#
# Parts and their figure (higher is better everywhere):
#   engine   llama-server (tools/bench/engine/build.sh), 4 streams x 96 output
#            tokens, `bpfbench load` output tok/s: nothing, attach, run, daemon,
#            daemon-noinc (the daemon without its incidents' flight recorder)
#   llmsim   bin/llmsim at its limit, output tok/s: nothing, attach, run, daemon
#   storm    stress-ng --switch 1 --taskset 0 ops/s: nothing, bpfbench daemon
#            (host-wide), bpftrace runqlat, and empty-tp: an empty program on
#            tp_btf/sched_switch (tools/bench/emptytp), the floor of any
#            observer that runs on every switch
#   cuda     bin/launchloop (stub libcuda) steps/s: nothing, attach
#   barrier  bin/barrierpool (ggml-like barrier pool) steps/s: nothing, attach
#   client   the load generator's client_efficiency.sh: chunks per client
#            CPU-second of bpfbench load, a Python client and the epoll floor
#
# Budgets (CPU accounting, printed after the tables; the exit status is 3
# when one is missed): engine attach collectors <= 1.0% of one CPU and BPF
# <= 500 ns per run; storm daemon-host CPU per switch <= 1.5x the empty
# program's; client >= 0.8x the floor's chunks per CPU-second.
# BENCH_BUDGET_COLLECTOR_PCT, BENCH_BUDGET_BPF_NS, BENCH_BUDGET_STORM_X and
# BENCH_BUDGET_CLIENT change them; BENCH_CLIENT_ARGS ("100 256 2": streams,
# tokens, ms apart) the client part.
#
# Environment: BPFBENCH_LLAMA_SERVER, BPFBENCH_LLAMA_MODEL (engine binary and
# model; default /var/cache/bpfbench/llama/...), BENCH_ENGINE_REQUESTS (32),
# BENCH_LLMSIM_REQUESTS (300), BENCH_BARRIER_ARGS ("-t 2 -w 200 -s 50"),
# BENCH_LAUNCHLOOP_ARGS ("-l 2000"), BENCH_BPFBENCH (another bpfbench binary
# to measure, e.g. an older build, with the workloads of bin/).
# Needs root, `make build`, stress-ng and bpftrace for storm, python3, curl.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
bin=$repo/bin

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() {
	echo "overhead.sh: $*" >&2
	exit 1
}

out_json= dur=5 bpf_stats=1 keep=0 pos=()
while [ $# -gt 0 ]; do
	case $1 in
	-o) out_json=${2:?-o needs a file}; shift 2 ;;
	-d) dur=${2:?-d needs seconds}; shift 2 ;;
	--no-bpf-stats) bpf_stats=0; shift ;;
	-k) keep=1; shift ;;
	-h | --help) usage; exit 0 ;;
	-*) usage >&2; exit 2 ;;
	*) pos+=("$1"); shift ;;
	esac
done
[ ${#pos[@]} -le 2 ] || { usage >&2; exit 2; }
rounds=${pos[0]:-3}
parts=${pos[1]:-engine,llmsim,storm,cuda,barrier,client}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive integer, not '$rounds'"
[[ $dur =~ ^[1-9][0-9]*$ ]] || die "-d takes whole seconds, not '$dur'"
IFS=, read -ra part_list <<<"$parts"
for p in "${part_list[@]}"; do
	case $p in engine | llmsim | storm | cuda | barrier | client) ;; *) die "unknown part '$p' (engine,llmsim,storm,cuda,barrier,client)" ;; esac
done
[ "$(id -u)" = 0 ] || die "needs root (it loads BPF programs)"
command -v python3 >/dev/null || die "needs python3"
command -v curl >/dev/null || die "needs curl"
if [ -n "$out_json" ]; then
	case $out_json in /*) ;; *) out_json=$OLDPWD/$out_json ;; esac
fi

# ---- bookkeeping: everything started is stopped on exit -----------------

tmp=$(mktemp -d /tmp/bpfbench-overhead.XXXXXX)
pids=() groups=()
stats_orig=$(cat /proc/sys/kernel/bpf_stats_enabled 2>/dev/null || echo 0)
cleanup() {
	local rc=$? p
	trap - EXIT INT TERM
	for p in "${groups[@]}"; do kill -TERM -- "-$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for _ in $(seq 30); do
		local alive=0
		for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
		[ $alive = 0 ] && break
		sleep 0.1
	done
	for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	echo "$stats_orig" >/proc/sys/kernel/bpf_stats_enabled 2>/dev/null || true
	if [ $keep = 1 ]; then echo "overhead.sh: raw outputs kept in $tmp" >&2; else rm -rf "$tmp"; fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# bg SECONDS NAME CMD...: starts CMD in the background under timeout(1)
# (so that it ends even if this script is killed), stdout/stderr in
# $tmp/NAME.{out,err}. $BG is CMD's own pid (what is observed and
# signalled); both are on the cleanup list.
bg() {
	local secs=$1 name=$2 t i
	shift 2
	timeout -k 5 "$secs" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" </dev/null &
	t=$!
	pids+=("$t")
	BG=
	for ((i = 0; i < 100; i++)); do
		BG=$(cat "/proc/$t/task/$t/children" 2>/dev/null | awk '{print $1}') || true
		[ -n "$BG" ] && break
		kill -0 "$t" 2>/dev/null || break
		sleep 0.02
	done
	[ -n "$BG" ] || BG=$t
	pids+=("$BG")
}

# stop PID SIGNAL SECONDS: sends SIGNAL, waits up to SECONDS, then SIGKILL.
stop() {
	local pid=$1 sig=$2 secs=$3 i
	kill -"$sig" "$pid" 2>/dev/null || true
	for ((i = 0; i < secs * 10; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

# wait_exit PID SECONDS: waits for PID to end by itself; 1 (and kills it)
# when it runs longer.
wait_exit() {
	local pid=$1 secs=$2 i
	for ((i = 0; i < secs * 10; i++)); do
		if ! kill -0 "$pid" 2>/dev/null; then
			wait "$pid" 2>/dev/null || true
			return 0
		fi
		sleep 0.1
	done
	stop "$pid" KILL 1
	return 1
}

# wait_line FILE PATTERN PID SECONDS: until FILE has a line matching PATTERN.
wait_line() {
	local f=$1 pat=$2 pid=$3 secs=$4 i
	for ((i = 0; i < secs * 10; i++)); do
		grep -q "$pat" "$f" 2>/dev/null && return 0
		kill -0 "$pid" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

# wait_attached PID SECONDS: until the observer PID holds BPF links or perf
# events and their number has not changed for 0.6 s (its programs are
# attached). 1 when it exits or takes longer.
wait_attached() {
	local pid=$1 secs=$2 i n last=-1 same=0
	for ((i = 0; i < secs * 5; i++)); do
		kill -0 "$pid" 2>/dev/null || return 1
		n=$(ls -l "/proc/$pid/fd" 2>/dev/null | grep -c 'bpf_link\|bpf-link\|perf_event' || true)
		if [ "$n" -gt 0 ] && [ "$n" = "$last" ]; then
			same=$((same + 1))
			[ $same -ge 3 ] && return 0
		else
			same=0
		fi
		last=$n
		sleep 0.2
	done
	return 1
}

# wait_http URL PID SECONDS: until URL answers 200.
wait_http() {
	local url=$1 pid=$2 secs=$3 i
	for ((i = 0; i < secs * 10; i++)); do
		curl -sf -o /dev/null --max-time 2 "$url" && return 0
		kill -0 "$pid" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

cpu_ticks() { # utime+stime of a process, in clock ticks
	local s f
	s=$(cat "/proc/$1/stat" 2>/dev/null) || { echo 0; return; }
	read -ra f <<<"${s##*) }"
	echo $((f[11] + f[12]))
}
clk_tck=$(getconf CLK_TCK)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# The BPF programs an observer holds (prog_id of its fds), for the stats.
prog_ids() { { cat /proc/"$1"/fdinfo/* 2>/dev/null || true; } | sed -n 's/^prog_id:[[:space:]]*//p' | sort -un | tr '\n' ' '; }
bpf_snap() { bpftool -j prog show >"$1" 2>/dev/null || echo '[]' >"$1"; }

# ---- the helper that parses outputs and writes the summary -------------

cat >"$tmp/h.py" <<'PY'
import json, os, re, statistics, sys

def num(path, *keys):
    try:
        d = json.load(open(path))
        for k in keys:
            d = d[k]
        return float(d)
    except Exception:
        return None

def cmd_get(path, *keys):
    v = num(path, *keys)
    print("" if v is None else repr(v))

def cmd_stressng(path):
    # stress-ng --yaml: metrics: - stressor: switch / bogo-ops-per-second-real-time: N
    for line in open(path):
        line = line.strip()
        if line.startswith("bogo-ops-per-second-real-time:"):
            print(line.split(":", 1)[1].strip())
            return
    print("")

def load_json(path):
    try:
        return json.load(open(path))
    except Exception:
        return None

def cmd_record(results, part, mode, rnd, figure, unit, seconds, extra_json):
    rec = {"part": part, "mode": mode, "round": rnd if rnd == "stats" else int(rnd),
           "unit": unit, "figure": float(figure) if figure else None}
    extra = json.loads(extra_json) if extra_json else {}
    src = extra.pop("overhead_from", None)
    if src:
        d = load_json(src)
        if isinstance(d, dict) and isinstance(d.get("overhead"), dict):
            rec["overhead"] = d["overhead"]
    cpu = extra.pop("observer_cpu_ticks", None)
    if cpu is not None and seconds:
        rec["observer_cpu_seconds"] = cpu[0] / cpu[1]
        rec["observer_cpu_percent"] = 100 * cpu[0] / cpu[1] / float(seconds)
    snaps = extra.pop("bpf", None)
    if snaps:
        before = {p["id"]: p for p in (load_json(snaps[0]) or [])}
        after = {p["id"]: p for p in (load_json(snaps[1]) or [])}
        ids = [int(i) for i in snaps[2].split()]
        progs, tot_ns, tot_cnt = [], 0, 0
        for i in ids:
            a = after.get(i)
            if not a:
                continue
            b = before.get(i, {})
            ns = a.get("run_time_ns", 0) - b.get("run_time_ns", 0)
            cnt = a.get("run_cnt", 0) - b.get("run_cnt", 0)
            tot_ns += ns
            tot_cnt += cnt
            if cnt:
                progs.append({"id": i, "name": a.get("name", ""), "type": a.get("type", ""),
                              "run_cnt": cnt, "run_time_ns": ns, "ns_per_run": ns / cnt})
        progs.sort(key=lambda p: -p["run_time_ns"])
        s = float(seconds) if seconds else 0
        rec["bpf"] = {"programs": len(ids), "run_cnt": tot_cnt, "run_time_ns": tot_ns,
                      "ns_per_run": tot_ns / tot_cnt if tot_cnt else None,
                      "runs_per_second": tot_cnt / s if s else None,
                      "cpu_percent": 100 * tot_ns / 1e9 / s if s else None,
                      "per_program": progs}
    rec.update(extra)
    if seconds:
        rec["seconds"] = float(seconds)
    with open(results, "a") as f:
        f.write(json.dumps(rec) + "\n")

def fmt(v):
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, (list, dict)):
        return json.dumps(v, separators=(",", ":")) if v else "-"
    if isinstance(v, str):
        return v
    a = abs(v)
    if float(v).is_integer() and a < 1e15:
        return "%d" % v
    if a >= 1000:
        return "%.0f" % v
    if a >= 10:
        return "%.1f" % v
    if a >= 0.01 or a == 0:
        return "%.3f" % v
    return "%.3g" % v

OVERHEAD_FIELDS = ["cpu_seconds", "reader_cpu_seconds", "bpf_run_ns", "bpf_runs", "bpf_ns_per_run",
                   "wakeups_per_second", "records_per_second", "folded", "lost", "self_preemptions",
                   "target_involuntary_switches_per_second_during", "warnings"]

def median_of(vals):
    vals = [v for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return statistics.median(vals) if vals else None

def cmd_summary(results, meta_path, out_json):
    recs = [json.loads(l) for l in open(results)] if os.path.exists(results) else []
    meta = json.load(open(meta_path))
    order = []
    for r in recs:
        k = (r["part"], r["mode"])
        if k not in order:
            order.append(k)
    summary = []
    for part, mode in order:
        rs = [r for r in recs if r["part"] == part and r["mode"] == mode and r["round"] != "stats"]
        st = [r for r in recs if r["part"] == part and r["mode"] == mode and r["round"] == "stats"]
        if not rs and not st:
            continue
        figs = [r["figure"] for r in rs if r["figure"] is not None]
        s = {"part": part, "mode": mode, "unit": (rs or st)[0]["unit"], "rounds": len(figs),
             "failed": len(rs) - len(figs), "median": median_of(figs),
             "min": min(figs) if figs else None, "max": max(figs) if figs else None}
        base = [r for r in recs if r["part"] == part and r["mode"] == BASE_MODE.get(part, "nothing") and r["round"] != "stats"]
        bmed = median_of([r["figure"] for r in base])
        s["ratio"] = s["median"] / bmed if s["median"] is not None and bmed else None
        byround = {r["round"]: r["figure"] for r in base if r["figure"]}
        paired = [r["figure"] / byround[r["round"]] for r in rs if r["figure"] is not None and byround.get(r["round"])]
        s["paired_ratio"] = median_of(paired)
        s["paired_ratio_min"] = min(paired) if paired else None
        s["paired_ratio_max"] = max(paired) if paired else None
        s["paired_ratio_ci95"] = ci95(paired)
        s["observer_cpu_percent"] = median_of([r.get("observer_cpu_percent") for r in rs])
        ov = [r["overhead"] for r in rs if isinstance(r.get("overhead"), dict)]
        if ov:
            o = {}
            for k in sorted({k for d in ov for k in d}):
                vals = [d.get(k) for d in ov if k in d]
                m = median_of(vals)
                if m is not None:
                    o[k] = m
                else:
                    flat = []
                    for v in vals:
                        for x in (v if isinstance(v, list) else [v]):
                            if x not in flat and x not in (None, "", []):
                                flat.append(x)
                    o[k] = flat
            s["overhead"] = o
        if st and st[0].get("bpf"):
            b = st[0]["bpf"]
            s["bpf_stats"] = {k: b[k] for k in ("programs", "run_cnt", "ns_per_run", "runs_per_second", "cpu_percent")}
            s["bpf_stats"]["figure_with_stats"] = st[0]["figure"]
            s["bpf_stats"]["top_programs"] = [
                {k: p[k] for k in ("name", "run_cnt", "ns_per_run")} for p in b["per_program"][:4]]
        summary.append(s)

    print()
    print("observer effect: %s, %d rounds, %s CPUs, kernel %s, load avg at start %s, tree %s, bpfbench built %s" % (
        meta["date"], meta["rounds"], meta["cpus"], meta["kernel"], meta["loadavg"], meta["revision"],
        meta["bpfbench"]["built"]))
    if float(meta["loadavg"]) > 0.5 * (meta["cpus"] or 1):
        print("note: the machine was busy before this run began (load %s on %s CPUs): other jobs' CPU use "
              "varies more than an observer costs, so trust only ratios whose paired range stays on one side of 1"
              % (meta["loadavg"], meta["cpus"]))
    hdr = ["part", "mode", "figure", "median", "min-max", "ratio", "paired (min-max)", "paired 95% CI", "n", "observer CPU%"]
    rows = []
    for s in summary:
        if s["rounds"] == 0 and s["failed"] == 0:
            continue
        mm = "%s-%s" % (fmt(s["min"]), fmt(s["max"])) if s["min"] is not None else "-"
        pr = "-"
        if s["paired_ratio"] is not None:
            pr = "%.3f (%.3f-%.3f)" % (s["paired_ratio"], s["paired_ratio_min"], s["paired_ratio_max"])
        n = str(s["rounds"]) + ("" if not s["failed"] else " (%d failed)" % s["failed"])
        rows.append([s["part"], s["mode"], s["unit"], fmt(s["median"]), mm,
                     "%.3f" % s["ratio"] if s["ratio"] is not None else "-", pr,
                     "%.3f-%.3f" % tuple(s["paired_ratio_ci95"]) if s["paired_ratio_ci95"] else "-", n,
                     fmt(s["observer_cpu_percent"])])
    table(hdr, rows)

    brows = []
    for s in summary:
        b = s.get("bpf_stats")
        if b:
            top = ", ".join("%s %s ns" % (p["name"], fmt(p["ns_per_run"])) for p in b["top_programs"])
            brows.append([s["part"], s["mode"], str(b["programs"]), fmt(b["runs_per_second"]),
                          fmt(b["ns_per_run"]), fmt(b["cpu_percent"]), fmt(b["figure_with_stats"]), top])
    if brows:
        print()
        print("BPF run time (one extra pass per observer with kernel.bpf_stats_enabled=1; not in the ratios)")
        table(["part", "mode", "progs", "runs/s", "ns/run", "BPF CPU%", "figure with stats", "costliest programs"], brows)

    cols = [("cpu_seconds", "cpu s"), ("reader_cpu_seconds", "reader cpu s"), ("bpf_run_ns", "bpf run ns"),
            ("bpf_runs", "bpf runs"), ("bpf_ns_per_run", "ns/run"), ("wakeups_per_second", "wakeups/s"),
            ("records_per_second", "records/s"), ("folded", "folded"), ("lost", "lost"),
            ("self_preemptions", "self preempt"),
            ("target_involuntary_switches_per_second_during", "target invol. sw/s")]
    orows, warns = [], []
    for s in summary:
        o = s.get("overhead")
        if not o:
            continue
        if "bpf_run_ns" not in o and isinstance(o.get("bpf_run_seconds"), (int, float)):
            o["bpf_run_ns"] = o["bpf_run_seconds"] * 1e9
        orows.append([s["part"], s["mode"]] + [fmt(o.get(k)) for k, _ in cols])
        # One line per kind of warning (numbers aside), with how often.
        seen = {}
        for w in o.get("warnings") or []:
            w = w if isinstance(w, str) else json.dumps(w)
            k = re.sub(r"[0-9][0-9.]*", "#", w)
            if k in seen:
                seen[k][1] += 1
            else:
                seen[k] = [w, 1]
        for w, n in seen.values():
            warns.append("  %s %s: %s%s" % (s["part"], s["mode"], w, "" if n == 1 else " (%d times over the rounds)" % n))
    if orows:
        print()
        print("bpfbench's own cost (the \"overhead\" object of its JSON output, median over rounds; all fields in -o)")
        table(["part", "mode"] + [c for _, c in cols], orows)
        if warns:
            print("its warnings:")
            print("\n".join(warns))
    verdicts = budgets(recs)
    print_budgets(verdicts)
    if out_json:
        with open(out_json, "w") as f:
            json.dump({"meta": meta, "summary": summary, "budgets": verdicts, "results": recs}, f, indent=1)
            f.write("\n")
        print("\nwrote %s" % out_json)
    if any(v["held"] is False for v in verdicts):
        sys.exit(3)

# The mode a part's ratios divide by.
BASE_MODE = {"client": "floor"}

# Student's t at 97.5% by degrees of freedom (n - 1), for the paired CI.
T975 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23}

def ci95(ratios):
    """95% confidence interval of the mean paired ratio, on logs (a ratio
    and its inverse are symmetric); None under two rounds."""
    import math
    xs = [math.log(r) for r in ratios if r and r > 0]
    if len(xs) < 2:
        return None
    m, sd = statistics.mean(xs), statistics.stdev(xs)
    h = T975.get(len(xs) - 1, 2.0) * sd / math.sqrt(len(xs))
    return [math.exp(m - h), math.exp(m + h)]

# Budgets, judged by CPU accounting (not by throughput, which swings by more
# than an observer costs on a shared machine). Overridable for a slower or
# faster machine: BENCH_BUDGET_COLLECTOR_PCT, _BPF_NS, _STORM_X, _CLIENT.
def budget_limits():
    e = os.environ.get
    return {"collector_pct": float(e("BENCH_BUDGET_COLLECTOR_PCT", "1.0")),
            "bpf_ns": float(e("BENCH_BUDGET_BPF_NS", "500")),
            "storm_x": float(e("BENCH_BUDGET_STORM_X", "1.5")),
            "client": float(e("BENCH_BUDGET_CLIENT", "0.8"))}

def verdict(name, value, limit, above_ok, detail, n):
    held = None if value is None else (value >= limit if above_ok else value <= limit)
    return {"budget": name, "value": value, "limit": limit, "rule": ">=" if above_ok else "<=",
            "held": held, "rounds": n, "detail": detail}

def rounds_of(recs, part, mode):
    return [r for r in recs if r["part"] == part and r["mode"] == mode and r["round"] != "stats"]

def stats_of(recs, part, mode):
    st = [r for r in recs if r["part"] == part and r["mode"] == mode and r["round"] == "stats" and r.get("bpf")]
    return st[0] if st else None

def engine_budgets(recs, lim):
    ov = [r["overhead"] for r in rounds_of(recs, "engine", "attach") if isinstance(r.get("overhead"), dict)]
    if not ov:
        return []
    coll = [100 * o["collector_cpu_ratio"] for o in ov if isinstance(o.get("collector_cpu_ratio"), (int, float))]
    ns = [o["bpf_ns_per_run"] for o in ov if isinstance(o.get("bpf_ns_per_run"), (int, float)) and o["bpf_ns_per_run"] > 0]
    rd = [100 * o["reader_cpu_seconds"] / o["seconds"] for o in ov if o.get("seconds")]
    bp = [100 * o["bpf_run_seconds"] / o["seconds"] for o in ov if o.get("seconds") and "bpf_run_seconds" in o]
    rng = lambda v: "%.3g-%.3g" % (min(v), max(v)) if v else "-"
    return [
        verdict("engine attach: collectors' CPU, % of one CPU", median_of(coll), lim["collector_pct"], False,
                "median over rounds (min-max %s): readers %.3f%% + BPF %.3f%%, attach's own accounting with "
                "kernel.bpf_stats_enabled on" % (rng(coll), median_of(rd) or 0, median_of(bp) or 0), len(coll)),
        verdict("engine attach: BPF ns per run (all programs, weighted by runs)", median_of(ns), lim["bpf_ns"], False,
                "median over rounds (min-max %s)" % rng(ns), len(ns)),
    ]

SWITCH_PROGS = ("sched_switch", "empty_tp")

def per_switch(st):
    """An observer's CPU per context switch, in ns: the run time of its
    programs on sched_switch plus its own process CPU, over the switches
    (its programs elsewhere, block IO and TCP of other jobs, are not the
    storm's). Both sides leave out the kernel's dispatch of a program, which
    they pay alike: the ratio is an upper bound of the true one."""
    progs = [p for p in st["bpf"]["per_program"] if p["name"] in SWITCH_PROGS]
    sw = max([p["run_cnt"] for p in progs] or [0])
    if not sw:
        return None, None, None
    bpf = sum(p["run_time_ns"] for p in progs)
    own = 1e9 * st.get("observer_cpu_seconds", 0)
    return (bpf + own) / sw, bpf / sw, sw

def storm_budgets(recs, lim):
    d, e = stats_of(recs, "storm", "daemon-host"), stats_of(recs, "storm", "empty-tp")
    if not d or not e:
        return []
    dc, dbpf, dsw = per_switch(d)
    ec, _, _ = per_switch(e)
    x = dc / ec if dc and ec else None
    det = ("daemon %.1f ns of CPU per switch (its sched_switch program %.1f ns + its process %.1f ns, %d switches) "
           "/ the empty tp_btf/sched_switch program %.1f ns, same run, BPF run time without the dispatch both pay" % (
               dc or 0, dbpf or 0, (dc or 0) - (dbpf or 0), dsw or 0, ec or 0))
    return [verdict("storm daemon-host: CPU per switch, x the empty program", x, lim["storm_x"], False, det, 1)]

def client_budgets(recs, lim):
    fl = {r["round"]: r["figure"] for r in rounds_of(recs, "client", "floor") if r["figure"]}
    pr = [r["figure"] / fl[r["round"]] for r in rounds_of(recs, "client", "bpfbench") if r["figure"] and fl.get(r["round"])]
    if not pr:
        return []
    return [verdict("client: load generator chunks per CPU-s, x the epoll floor", median_of(pr), lim["client"], True,
                    "median of paired rounds (min-max %.3f-%.3f)" % (min(pr), max(pr)), len(pr))]

def budgets(recs):
    lim = budget_limits()
    return engine_budgets(recs, lim) + storm_budgets(recs, lim) + client_budgets(recs, lim)

def print_budgets(verdicts):
    if not verdicts:
        return
    print()
    print("budgets (CPU accounting; exit status 3 when one is missed)")
    for v in verdicts:
        mark = {True: "held", False: "MISSED", None: "not measured"}[v["held"]]
        val = "-" if v["value"] is None else "%.3f" % v["value"]
        print("  %-6s %s: %s %s %s (%s)" % (mark, v["budget"], val, v["rule"], fmt(v["limit"]), v["detail"]))

def table(hdr, rows):
    w = [max(len(str(r[i])) for r in [hdr] + rows) for i in range(len(hdr))]
    for r in [hdr] + rows:
        print("  ".join(str(c).ljust(w[i]) for i, c in enumerate(r)).rstrip())

if __name__ == "__main__":
    c, args = sys.argv[1], sys.argv[2:]
    {"get": cmd_get, "stressng": cmd_stressng, "record": cmd_record, "summary": cmd_summary}[c](*args)
PY
h() { python3 "$tmp/h.py" "$@"; }
results=$tmp/results.jsonl
: >"$results"

# record PART MODE ROUND FIGURE UNIT SECONDS [EXTRA_JSON]
record() { h record "$results" "$1" "$2" "$3" "$4" "$5" "$6" "${7:-}"; }

# ---- observers -----------------------------------------------------------

# Per measurement: obs_start MODE [TARGET_PID] starts the observer (none for
# "nothing") and waits until it is attached; obs_mark notes the figures at
# the start of the workload, obs_stop stops the observer after it and sets
# OBS_EXTRA (JSON for record). With STATS=1, BPF run time is read too.
OBS_PID= OBS_MODE= OBS_NAME= OBS_T0= OBS_CPU0= OBS_EXTRA= STATS=0 OBS_JSON= OBS_ERR=
obs_start() {
	local mode=$1 target=${2:-} port cfg
	OBS_PID= OBS_MODE=$mode OBS_NAME=${mode%-host} OBS_EXTRA= OBS_JSON= OBS_ERR=
	[ $STATS = 1 ] && echo 1 >/proc/sys/kernel/bpf_stats_enabled
	case $mode in
	nothing) return 0 ;;
	attach)
		OBS_JSON=$tmp/attach.$RANDOM.json
		bg 960 attach "$bin/bpfbench" attach "$target" --duration 900s --output json
		OBS_PID=$BG
		;;
	daemon | daemon-host | daemon-noinc)
		port=$(free_port)
		cfg=$tmp/daemon.yaml
		{
			echo "listen_address: \"127.0.0.1:$port\""
			echo "refresh_interval: 1s"
			echo "log_level: warn"
			if [ -n "$target" ]; then
				echo "targets:"
				echo "  - {name: bench, pid: $target}"
			else
				echo "targets: []"
			fi
			# daemon-noinc: the live view without the incidents' flight
			# recorder, beside daemon (both on by default).
			[ "$mode" = daemon-noinc ] && echo "incidents: {enabled: false}"
		} >"$cfg"
		bg 960 daemon "$bin/bpfbench" daemon --config "$cfg"
		OBS_PID=$BG
		wait_http "http://127.0.0.1:$port/metrics" "$OBS_PID" 30 || { OBS_ERR="daemon did not serve /metrics"; return 1; }
		if [ -n "$target" ]; then
			local i
			for ((i = 0; i < 100; i++)); do
				curl -sf --max-time 2 "http://127.0.0.1:$port/metrics" | grep -q '^bpfbench_target_processes{target="bench"} [1-9]' && break
				sleep 0.1
			done
		fi
		;;
	empty-tp)
		bg 960 emptytp "$bin/emptytp" sched_switch
		OBS_PID=$BG
		;;
	bpftrace)
		# runqlat.bt as a one-liner, bounded by an interval probe.
		bg $((dur + 180)) bpftrace bpftrace -e '
tracepoint:sched:sched_wakeup, tracepoint:sched:sched_wakeup_new { @qtime[args->pid] = nsecs; }
tracepoint:sched:sched_switch {
	if (args->prev_state == 0) { @qtime[args->prev_pid] = nsecs; }
	$ns = @qtime[args->next_pid];
	if ($ns) { @usecs = hist((nsecs - $ns) / 1000); }
	delete(@qtime[args->next_pid]);
}
interval:s:'$((dur + 120))' { exit(); }
END { clear(@qtime); }'
		OBS_PID=$BG
		;;
	*) die "unknown observer $mode" ;;
	esac
	wait_attached "$OBS_PID" 60 || { OBS_ERR="$mode did not attach: $(tail -n 3 "$tmp/$OBS_NAME.err" 2>/dev/null | tr '\n' ' ')"; return 1; }
	sleep 0.3
	[ $STATS = 1 ] && bpf_snap "$tmp/bpf.before.json"
	return 0
}
obs_mark() {
	OBS_T0=$(date +%s.%N)
	[ -n "$OBS_PID" ] && OBS_CPU0=$(cpu_ticks "$OBS_PID")
	return 0
}
obs_stop() {
	local t1 cpu1 ids=""
	t1=$(date +%s.%N)
	OBS_SECS=$(python3 -c "print($t1-$OBS_T0)")
	if [ -z "$OBS_PID" ]; then
		OBS_EXTRA="{}"
		[ $STATS = 1 ] && echo "$stats_orig" >/proc/sys/kernel/bpf_stats_enabled
		return 0
	fi
	cpu1=$(cpu_ticks "$OBS_PID")
	if [ $STATS = 1 ]; then
		bpf_snap "$tmp/bpf.after.json"
		ids=$(prog_ids "$OBS_PID")
	fi
	case $OBS_MODE in
	attach)
		# It prints its JSON on SIGINT.
		stop "$OBS_PID" INT 15
		cp "$tmp/attach.out" "$OBS_JSON" 2>/dev/null || true
		;;
	daemon | daemon-host | empty-tp) stop "$OBS_PID" TERM 15 ;;
	bpftrace) stop "$OBS_PID" INT 15 ;;
	esac
	[ $STATS = 1 ] && echo "$stats_orig" >/proc/sys/kernel/bpf_stats_enabled
	OBS_EXTRA="{\"observer_cpu_ticks\":[$((cpu1 - OBS_CPU0)),$clk_tck]"
	[ -n "$OBS_JSON" ] && OBS_EXTRA+=",\"overhead_from\":\"$OBS_JSON\""
	[ $STATS = 1 ] && OBS_EXTRA+=",\"bpf\":[\"$tmp/bpf.before.json\",\"$tmp/bpf.after.json\",\"$ids\"]"
	OBS_EXTRA+="}"
	OBS_PID=
}

# rotated ROUND MODES...: the modes in the order of round ROUND.
rotated() {
	local r=$1
	shift
	local m=("$@") n=$# i
	for ((i = 0; i < n; i++)); do echo "${m[$(((i + r - 1) % n))]}"; done
}

say() { printf '%s\n' "$*" >&2; }
# progress PART MODE ROUND FIGURE UNIT: one line per measurement on stderr.
progress() {
	local v=failed
	[ -n "$4" ] && v="$(printf '%.1f' "$4") $5"
	printf '%-8s %-11s round %-5s %s\n' "$1" "$2" "$3" "$v" >&2
}

# run_part PART MEASURE_FN MODES...: ROUNDS alternating rounds, then one
# pass with BPF stats per observer (not for nothing and run).
run_part() {
	local part=$1 fn=$2 r m
	shift 2
	for ((r = 1; r <= rounds; r++)); do
		for m in $(rotated "$r" "$@"); do
			STATS=0
			"$fn" "$m" "$r"
		done
	done
	if [ $bpf_stats = 1 ]; then
		for m in "$@"; do
			case $m in nothing | run) continue ;; esac
			STATS=1
			"$fn" "$m" stats
			STATS=0
		done
	fi
}

# ---- storm: a scheduler storm --------------------------------------------

storm_measure() {
	local mode=$1 r=$2 fig=
	if ! obs_start "$mode"; then
		say "storm $mode round $r: $OBS_ERR"
		[ -n "$OBS_PID" ] && stop "$OBS_PID" KILL 1
		record storm "$mode" "$r" "" "ops/s" "" '{"error":"observer"}'
		return 0
	fi
	obs_mark
	timeout $((dur + 30)) stress-ng --switch 1 --taskset 0 -t "$dur" --metrics-brief --yaml "$tmp/storm.yaml" \
		>"$tmp/storm.log" 2>&1 || say "storm: stress-ng failed: $(tail -n 2 "$tmp/storm.log")"
	obs_stop
	fig=$(h stressng "$tmp/storm.yaml" 2>/dev/null || true)
	rm -f "$tmp/storm.yaml"
	progress storm "$mode" "$r" "$fig" ops/s
	record storm "$mode" "$r" "$fig" "ops/s" "$OBS_SECS" "$OBS_EXTRA"
}
part_storm() {
	command -v stress-ng >/dev/null || die "storm needs stress-ng (apt-get install stress-ng)"
	command -v bpftrace >/dev/null || die "storm needs bpftrace (apt-get install bpftrace)"
	run_part storm storm_measure nothing daemon-host bpftrace empty-tp
}

# ---- cuda and barrier: a workload started paused, observed, then run -----

# workload_measure PART UNIT MODE ROUND CMD...: CMD -W must print
# "ready pid=" on stderr, wait for SIGUSR1, print JSON with
# steps_per_second, then wait for another SIGUSR1 to exit.
workload_measure() {
	local part=$1 unit=$2 mode=$3 r=$4 wl fig=
	shift 4
	bg $((dur + 180)) "$part" "$@" -W -d "$dur"
	wl=$BG
	if ! wait_line "$tmp/$part.err" 'ready pid=' "$wl" 30; then
		say "$part: the workload did not start: $(tail -n 3 "$tmp/$part.err")"
		stop "$wl" KILL 1
		record "$part" "$mode" "$r" "" "$unit" "" '{"error":"workload"}'
		return 0
	fi
	if ! obs_start "$mode" "$wl"; then
		say "$part $mode round $r: $OBS_ERR"
		[ -n "$OBS_PID" ] && stop "$OBS_PID" KILL 1
		stop "$wl" KILL 1
		record "$part" "$mode" "$r" "" "$unit" "" '{"error":"observer"}'
		return 0
	fi
	obs_mark
	kill -USR1 "$wl"
	# It prints its JSON, then waits for a second SIGUSR1 to exit: the
	# observer is read and stopped while its target is still there.
	wait_line "$tmp/$part.out" 'steps_per_second' "$wl" $((dur + 60)) ||
		say "$part: no result from the workload: $(tail -n 3 "$tmp/$part.err")"
	obs_stop
	kill -USR1 "$wl" 2>/dev/null || true
	wait_exit "$wl" 10 || say "$part: the workload did not exit and was killed"
	fig=$(h get "$tmp/$part.out" steps_per_second)
	cp "$tmp/$part.out" "$tmp/$part.$mode.$r.json"
	progress "$part" "$mode" "$r" "$fig" "$unit"
	record "$part" "$mode" "$r" "$fig" "$unit" "$OBS_SECS" "$OBS_EXTRA"
}
cuda_measure() {
	# shellcheck disable=SC2086
	LD_LIBRARY_PATH=$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
		workload_measure cuda steps/s "$1" "$2" "$bin/launchloop" ${BENCH_LAUNCHLOOP_ARGS:--l 2000}
}
barrier_measure() {
	# shellcheck disable=SC2086
	workload_measure barrier steps/s "$1" "$2" "$bin/barrierpool" ${BENCH_BARRIER_ARGS:--t 2 -w 200 -s 50}
}
part_cuda() { run_part cuda cuda_measure nothing attach; }
part_barrier() { run_part barrier barrier_measure nothing attach; }

# ---- servers: llmsim and llama-server under bpfbench load ------------------

SRV_PID= SRV_URL= SRV_PART= LOAD_ARGS=()
server_measure() {
	local mode=$1 r=$2 fig= f=$tmp/$SRV_PART.$1.$2 extra
	if [ "$mode" = run ]; then
		obs_mark
		if ! timeout 900 "$bin/bpfbench" run --target "$SRV_URL" --pid "$SRV_PID" "${LOAD_ARGS[@]}" \
			--out "$f" >"$f.log" 2>&1; then
			say "$SRV_PART run round $r: bpfbench run failed: $(tail -n 3 "$f.log")"
		fi
		fig=$(h get "$f/result.json" output_throughput)
		extra="{\"overhead_from\":\"$f/result.json\"}"
		OBS_SECS=$(h get "$f/result.json" duration)
	else
		if ! obs_start "$mode" "$SRV_PID"; then
			say "$SRV_PART $mode round $r: $OBS_ERR"
			[ -n "$OBS_PID" ] && stop "$OBS_PID" KILL 1
			record "$SRV_PART" "$mode" "$r" "" "tok/s" "" '{"error":"observer"}'
			return 0
		fi
		obs_mark
		if ! timeout 900 "$bin/bpfbench" load --target "$SRV_URL" "${LOAD_ARGS[@]}" \
			--no-progress --result "$f.json" >"$f.log" 2>&1; then
			say "$SRV_PART $mode round $r: bpfbench load failed: $(tail -n 3 "$f.log")"
		fi
		obs_stop
		fig=$(h get "$f.json" output_throughput)
		extra=$OBS_EXTRA
	fi
	progress "$SRV_PART" "$mode" "$r" "$fig" tok/s
	record "$SRV_PART" "$mode" "$r" "$fig" "tok/s" "$OBS_SECS" "$extra"
}

# server_up PART URL WARMUP_REQUESTS CMD...: starts the server, waits for
# /health, warms up.
server_up() {
	local part=$1 url=$2 warm=$3
	shift 3
	SRV_PART=$part SRV_URL=$url
	bg 14400 "$part-server" "$@"
	SRV_PID=$BG
	wait_http "$url/health" "$SRV_PID" 180 || die "$part: the server did not come up: $(tail -n 5 "$tmp/$part-server.err")"
	timeout 600 "$bin/bpfbench" load --target "$url" "${LOAD_ARGS[@]}" --num-requests "$warm" --no-progress \
		--result "$tmp/$part.warm.json" >/dev/null 2>&1 || say "$part: the warm-up load failed"
}
server_down() { stop "$SRV_PID" TERM 10; }

part_llmsim() {
	local port
	port=$(free_port)
	LOAD_ARGS=(--num-requests "${BENCH_LLMSIM_REQUESTS:-300}" --max-concurrency 96 --input-len 64 --output-len 128)
	# At its limit: closed loop, more concurrency than it batches.
	CUDASTUB_KERNEL_US=500 server_up llmsim "http://127.0.0.1:$port" 50 "$bin/llmsim" --addr "127.0.0.1:$port" \
		--work cpu --itl 5ms --max-num-seqs 64 --batch-slowdown 0.02 --cuda-lib "$bin/libcuda.so.1"
	run_part llmsim server_measure nothing attach run daemon
	server_down
}

part_engine() {
	local cache=${BPFBENCH_LLAMA_CACHE:-/var/cache/bpfbench/llama}
	local server=${BPFBENCH_LLAMA_SERVER:-$cache/bin/llama-server} model=${BPFBENCH_LLAMA_MODEL:-$cache/tiny-llama.gguf}
	local port
	if [ ! -x "$server" ] || [ ! -s "$model" ]; then
		say "engine: no llama-server at $server or no model at $model"
		[ -x tools/bench/engine/build.sh ] || [ -f tools/bench/engine/build.sh ] ||
			{ say "engine: tools/bench/engine/build.sh is missing; skipping the engine part"; return 0; }
		say "engine: building them with tools/bench/engine/build.sh (once; cached)"
		# In its own process group, so that cleanup stops the whole build.
		setsid bash tools/bench/engine/build.sh >&2 </dev/null &
		local b=$!
		groups+=("$b")
		wait "$b" || { say "engine: build.sh failed; skipping the engine part"; return 0; }
		[ -x "$server" ] && [ -s "$model" ] || { say "engine: build.sh did not produce $server and $model; skipping"; return 0; }
	fi
	port=$(free_port)
	LOAD_ARGS=(--num-requests "${BENCH_ENGINE_REQUESTS:-32}" --max-concurrency 4 --input-len 64 --output-len 96
		--model tiny-llama)
	server_up engine "http://127.0.0.1:$port" 8 "$server" -m "$model" -t 2 -np 4 -c 2048 --host 127.0.0.1 --port "$port"
	run_part engine server_measure nothing attach run daemon daemon-noinc
	server_down
}

# ---- client: the load generator's chunks per CPU-second --------------------

# The load generator's client efficiency script (moved under tools/bench by
# the reorganisation; either place), run with ROUNDS rounds: its figures
# per round are recorded as modes bpfbench, python and floor (the epoll
# reader that only counts lines: the ratios divide by it).
part_client() {
	local script= f r line name n c fig
	for f in tools/bench/loadgen/client_efficiency.sh tools/bench/client_efficiency.sh loadgen/bench/client_efficiency.sh; do
		[ -f "$f" ] && { script=$f; break; }
	done
	[ -n "$script" ] || { say "client: no client_efficiency.sh; skipping the client part"; return 0; }
	say "client: $script ${BENCH_CLIENT_ARGS:-100 256 2} $rounds"
	# shellcheck disable=SC2086
	if ! timeout 900 bash "$script" ${BENCH_CLIENT_ARGS:-100 256 2} "$rounds" >"$tmp/client.out" 2>&1; then
		say "client: $script failed: $(tail -n 3 "$tmp/client.out")"
		return 0
	fi
	declare -A seen=()
	while read -r line; do
		# "  NAME  N chunks C CPU-s R chunks/CPU-s", one per client per round
		[[ $line =~ ^([a-z/]+)\ +([0-9]+)\ chunks\ +([0-9.]+)\ CPU-s ]] || continue
		name=${BASH_REMATCH[1]} n=${BASH_REMATCH[2]} c=${BASH_REMATCH[3]}
		case $name in bpfbench | python | floor) ;; *) continue ;; esac
		r=$((${seen[$name]:-0} + 1))
		seen[$name]=$r
		fig=$(python3 -c "print($n / $c if $c > 0 else '')")
		progress client "$name" "$r" "$fig" "chunks/CPU-s"
		record client "$name" "$r" "$fig" "chunks/CPU-s" "" "{\"chunks\":$n,\"cpu_seconds\":$c}"
	done <"$tmp/client.out"
}

# ---- main ----------------------------------------------------------------

need=("$bin/bpfbench")
for p in "${part_list[@]}"; do
	case $p in
	llmsim) need+=("$bin/llmsim" "$bin/libcuda.so.1") ;;
	cuda) need+=("$bin/launchloop" "$bin/libcuda.so.1") ;;
	barrier) need+=("$bin/barrierpool") ;;
	esac
done
for f in "${need[@]}"; do
	[ -x "$f" ] || [ -f "$f" ] || die "$f is missing: run make build"
done
# A private copy of bin/: every mode of every round runs the same build,
# even when bin/ is rebuilt meanwhile. launchloop finds libcuda.so.1 next
# to it (rpath $ORIGIN).
mkdir "$tmp/bin"
for f in "${need[@]}"; do cp -p "$f" "$tmp/bin/"; done
[ -z "${BENCH_BPFBENCH:-}" ] || cp -p "$BENCH_BPFBENCH" "$tmp/bin/bpfbench"
bin=$tmp/bin
if [[ ",$parts," == *,storm,* ]]; then
	go=$(command -v go || echo /usr/local/go/bin/go)
	"$go" build -o "$bin/emptytp" ./tools/bench/emptytp || die "building tools/bench/emptytp"
fi

python3 - "$tmp/meta.json" "$rounds" "$parts" "$dur" "$bpf_stats" "$bin/bpfbench" <<'PY'
import datetime, hashlib, json, os, platform, subprocess, sys
rev = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True).stdout.strip()
st = os.stat(sys.argv[6])
built = datetime.datetime.fromtimestamp(st.st_mtime, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
sha = hashlib.sha256(open(sys.argv[6], "rb").read()).hexdigest()[:16]
json.dump({"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "rounds": int(sys.argv[2]), "parts": sys.argv[3].split(","), "workload_seconds": int(sys.argv[4]),
           "bpf_stats_pass": sys.argv[5] == "1", "kernel": platform.release(), "cpus": os.cpu_count(),
           "loadavg": open("/proc/loadavg").read().split()[0], "revision": rev,
           "bpfbench": {"built": built, "sha256": sha}},
          open(sys.argv[1], "w"))
PY

say "overhead.sh: $rounds rounds of $parts (raw outputs in $tmp)"
for p in "${part_list[@]}"; do
	"part_$p"
done
h summary "$results" "$tmp/meta.json" "$out_json"
