# reap PID...: SIGTERM, then SIGKILL after 5 s, then wait: a llama-server
# killed with requests in flight can stay in its shutdown, and a script
# that only waited would wait on it. Sourced by the bench scripts.
reap() {
	local p alive
	for p in "$@"; do kill "$p" 2>/dev/null || true; done
	for _ in $(seq 50); do
		alive=0
		for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
		[ "$alive" = 0 ] && break
		sleep 0.1
	done
	for p in "$@"; do kill -KILL "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
