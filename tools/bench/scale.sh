#!/usr/bin/env bash
# The live view at scale: its CPU per gap and per span and its memory with
# 100, 1,000 and 10,000 concurrent streaming connections, and the daemon's
# CPU with 1, 4 and 8 live targets, on loopback with tools/bench/fanout (a
# fast streaming server and a client of many connections).
#
#   sudo tools/bench/scale.sh [conns|daemon|soak|all] [SECONDS]
#
# conns: for each server threading (BENCH_SCALE_THREADS, "per-conn shared":
#   a thread per stream, as a thread-per-connection server; or the Go
#   runtime's few threads for every connection) and each connection count
#   (BENCH_SCALE_CONNS, "100 1000 10000"), fanout serves on CPU 0 and its
#   client keeps that many connections on CPU 1, BENCH_SCALE_RATE tokens a second over all of them (2000: the
#   same server work at every count, so the gaps are longer with more
#   connections: 50 ms, 500 ms, 5 s); `bpfbench attach PID --duration
#   SECONDS -o json --cpus 1` follows the server. Printed per count: gaps
#   walked, spans taken, the live view's own time (its walk on the
#   advancing thread's CPU clock, its span intake estimated from a timed
#   sample: live.cost) per gap and per span, attach's whole CPU (user +
#   system, getrusage of the child) as a fraction of one CPU, and attach's
#   peak resident memory.
# daemon: K fanout servers (K in BENCH_SCALE_TARGETS, "1 4 8"), each with
#   100 connections and its share of BENCH_SCALE_RATE, and one
#   `bpfbench daemon` with a live target per server; the daemon's CPU over
#   SECONDS (from /proc/PID/stat, after a settling second), its programs
#   (from its file descriptors) and its resident memory at the end.
# soak: the daemon with K live targets (the first of BENCH_SCALE_TARGETS)
#   as in daemon, for SECONDS, its memory and CPU printed every
#   BENCH_SOAK_EVERY seconds (60): resident memory, the Go heap in use,
#   the gaps its live views took, what each bounded store holds (the live
#   views' spans, streams and summed connections,
#   bpfbench_live_store_entries; the flight recorders' MB and gaps), all
#   from its metrics, and its CPU over the interval. Memory is bounded when
#   it stops growing once the stores are full.
#
# SECONDS defaults to 20 (the brief's shortest window for CPU accounting).
# Needs root and `make build`; builds fanout into bin/.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
bin=$repo/bin
mode=${1:-all}
secs=${2:-20}
conns_list=${BENCH_SCALE_CONNS:-100 1000 10000}
threads_list=${BENCH_SCALE_THREADS:-per-conn shared}
targets_list=${BENCH_SCALE_TARGETS:-1 4 8}
rate=${BENCH_SCALE_RATE:-2000}
[ "$(id -u)" = 0 ] || { echo "scale.sh: needs root" >&2; exit 1; }
[ -x "$bin/bpfbench" ] || { echo "scale.sh: run make build first" >&2; exit 1; }
go=${GO:-go}
command -v "$go" >/dev/null || go=/usr/local/go/bin/go
"$go" build -o "$bin/fanout" ./tools/bench/fanout
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

# free_port prints a free loopback port.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_server PORT [ARGS] starts fanout on CPU 0 and waits for it; sets srv_pid.
start_server() {
	taskset -c 0 "$bin/fanout" serve --addr "127.0.0.1:$1" "${@:2}" 2>"$work/serve-$1.log" &
	srv_pid=$!
	pids+=("$srv_pid")
	for _ in $(seq 50); do
		curl -fsS "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "scale.sh: fanout on port $1 did not start" >&2
	exit 1
}

# rusage CMD... runs CMD and prints "user system maxrss_kb" of it on fd 3.
rusage() {
	python3 - "$@" 3>&3 <<'EOF'
import os, resource, subprocess, sys
p = subprocess.run(sys.argv[1:])
r = resource.getrusage(resource.RUSAGE_CHILDREN)
os.write(3, f"{r.ru_utime} {r.ru_stime} {r.ru_maxrss}\n".encode())
sys.exit(p.returncode)
EOF
}

conns() {
	printf '%-9s %-7s %8s %9s %10s %11s %12s %12s %10s %8s\n' threads conns gap_ms gaps spans "walk_us/gap" "intake_ns/sp" "live_cpu_%" "attach_%" "rss_MB"
	for th in $threads_list; do
		for n in $conns_list; do
			port=$(free_port)
			if [ "$th" = per-conn ]; then start_server "$port" --thread-per-conn; else start_server "$port"; fi
			taskset -c 1 "$bin/fanout" client --addr "127.0.0.1:$port" --conns "$n" --rate "$rate" --tokens 8 --duration $((secs + 30))s >"$work/client-$n.json" 2>&1 &
			cl=$!
			pids+=("$cl")
			# Every connection up and streaming (their starts spread over one interval).
			sleep "$(python3 -c "print(min(max(2, $n / $rate * 1.2), 10))")"
			rusage "$bin/bpfbench" attach "$srv_pid" --duration "${secs}s" -o json --cpus 1 >"$work/attach-$n.json" 2>"$work/attach-$n.err" 3>"$work/rusage-$n" ||
				{ echo "scale.sh: attach failed with $n connections:" >&2; cat "$work/attach-$n.err" >&2; exit 1; }
			kill "$cl" "$srv_pid" 2>/dev/null || true
			wait "$cl" "$srv_pid" 2>/dev/null || true
			python3 - "$th" "$n" "$rate" "$secs" "$work/attach-$n.json" "$work/rusage-$n" <<'EOF'
import json, sys
th, n, rate, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
r = json.load(open(sys.argv[5]))
user, system, rss = open(sys.argv[6]).read().split()
lv = r.get("live") or {}
cost = lv.get("cost") or {}
gaps, spans = lv.get("gaps", 0), cost.get("records", 0)
walk, intake = cost.get("walk_seconds", 0.0), cost.get("record_seconds", 0.0)
dur = r.get("duration_seconds") or secs
print(f"{th:<9s} {n:<7d} {n / rate * 1000:8.0f} {gaps:9d} {spans:10d} {walk / max(gaps, 1) * 1e6:11.1f} "
      f"{intake / max(spans, 1) * 1e9:12.0f} {(walk + intake) / dur * 100:12.2f} "
      f"{(float(user) + float(system)) / dur * 100:10.2f} {int(rss) / 1024:8.0f}")
EOF
		done
	done
}

# cpu_ticks PID prints utime + stime of PID in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# start_daemon K NAME ADDR starts K fanout servers, each with a client of
# 100 connections on CPU 1 and its share of the rate, and the daemon
# (metrics on ADDR, log in $work/NAME.log) with a live target for each;
# waits for the live views; sets d, srvs and cls.
start_daemon() {
	local k=$1 cfg=$work/$2.yaml i port
	printf 'refresh_interval: 1s\ntargets:\n' >"$cfg"
	srvs=() cls=()
	for i in $(seq "$k"); do
		port=$(free_port)
		start_server "$port"
		srvs+=("$srv_pid")
		printf '  - {name: s%d, pid: %d}\n' "$i" "$srv_pid" >>"$cfg"
		taskset -c 1 "$bin/fanout" client --addr "127.0.0.1:$port" --conns 100 \
			--rate "$(python3 -c "print($rate / $k)")" --tokens 8 --duration $((secs + 60))s >/dev/null 2>&1 &
		cls+=($!)
		pids+=($!)
	done
	"$bin/bpfbench" daemon --config "$cfg" --web.listen-address "$3" --cpus 1 --log.format json 2>"$work/$2.log" &
	d=$!
	pids+=("$d")
	for _ in $(seq 100); do
		[ "$(grep -c '"msg":"live view started' "$work/$2.log" || true)" -ge "$k" ] && break
		sleep 0.2
	done
}

daemon() {
	hz=$(getconf CLK_TCK)
	printf '%-8s %10s %10s %9s %9s\n' targets daemon_% programs links rss_MB
	for k in $targets_list; do
		start_daemon "$k" "daemon-$k" 127.0.0.1:0
		sleep 3 # the first walks and the settling of the trackers
		t0=$(cpu_ticks "$d")
		sleep "$secs"
		t1=$(cpu_ticks "$d")
		progs=$(cat /proc/"$d"/fdinfo/* 2>/dev/null | awk '/^prog_id:/ {print $2}' | sort -u | wc -l)
		links=$(cat /proc/"$d"/fdinfo/* 2>/dev/null | awk '/^link_id:/ {print $2}' | sort -u | wc -l)
		rss=$(awk '/^VmRSS/ {print $2}' "/proc/$d/status")
		kill "$d" "${cls[@]}" "${srvs[@]}" 2>/dev/null || true
		wait "$d" "${cls[@]}" "${srvs[@]}" 2>/dev/null || true
		python3 -c "print(f'{$k:<8d} {($t1 - $t0) / $hz / $secs * 100:10.2f} {$progs:10d} {$links:9d} {$rss / 1024:9.0f}')"
	done
}

# metric NAME [LABEL [FORMAT]] prints the sum of metric NAME's samples
# (those with LABEL, e.g. store="spans", when given) in the daemon's
# metrics ($murl), as FORMAT (%.0f).
metric() {
	curl -fsS "$murl" 2>/dev/null | awk -v n="$1" -v l="${2:-}" -v f="${3:-%.0f}" \
		'($1 == n || index($1, n "{") == 1) && index($1, l) > 0 {s += $2} END {printf f, s}'
}

soak() {
	hz=$(getconf CLK_TCK)
	every=${BENCH_SOAK_EVERY:-60}
	k=${targets_list%% *}
	mport=$(free_port)
	murl=http://127.0.0.1:$mport/metrics
	start_daemon "$k" soak "127.0.0.1:$mport"
	printf '%-8s %8s %8s %8s %12s %9s %8s %6s %7s %9s %7s %8s\n' t_s rss_MB heap_MB cpu_% live_gaps spans streams conns rec_MB rec_gaps rec_pq rec_win_s
	t=0
	c0=$(cpu_ticks "$d")
	while [ "$t" -lt "$secs" ]; do
		sleep "$every"
		t=$((t + every))
		c1=$(cpu_ticks "$d")
		rss=$(awk '/^VmRSS/ {print $2}' "/proc/$d/status")
		heap=$(metric go_memstats_heap_inuse_bytes)
		gaps=$(metric bpfbench_token_gap_seconds_count)
		live_gaps=$gaps
		spans=$(metric bpfbench_live_store_entries 'store="spans"')
		streams=$(metric bpfbench_live_store_entries 'store="streams"')
		conns=$(metric bpfbench_live_store_entries 'store="connections"')
		recb=$(metric bpfbench_incident_recorder_bytes)
		recg=$(metric bpfbench_incident_recorder_gaps)
		recq=$(metric bpfbench_incident_recorder_path_quantile '' %.2f)
		# The seconds of gaps the recorder holds, at the rate of the gaps
		# and first bytes since the last reading.
		gaps=$((gaps + $(metric bpfbench_time_to_first_byte_seconds_count)))
		python3 -c "print(f'{$t:<8d} {$rss / 1024:8.0f} {${heap:-0} / 2**20:8.0f} {($c1 - $c0) / $hz / $every * 100:8.2f} {${live_gaps:-0}:12d} {${spans:-0}:9d} {${streams:-0}:8d} {${conns:-0}:6d} {${recb:-0} / 2**20:7.1f} {${recg:-0}:9d} {${recq:-0}:7.2f} {${recg:-0} / max((${gaps:-0} - ${g0:-0}) / $every, 1):8.0f}')"
		g0=$gaps
		c0=$c1
	done
	kill "$d" "${cls[@]}" "${srvs[@]}" 2>/dev/null || true
	wait "$d" "${cls[@]}" "${srvs[@]}" 2>/dev/null || true
}

case $mode in
conns) conns ;;
soak) soak ;;
daemon) daemon ;;
all)
	conns
	echo
	daemon
	;;
*)
	echo "scale.sh: mode conns, daemon, soak or all" >&2
	exit 2
	;;
esac
