#!/bin/sh
# The VM's /init (busybox sh): mounts the kernel's file systems, loads the
# modules of /modules.list, runs /plan.txt and powers off. Its markers on
# the serial console, read by report.sh:
#   @@KERNEL <uname -r> btf=yes|no
#   @@BEGIN <name>
#   @@RESULT <name> PASS|FAIL|SKIP <seconds> rc=<exit status>
#   @@DONE
#   @@MODPROBE <args>   a module the kernel wanted and the VM lacks
# /plan.txt: one test a line, tab-separated: name, directory (under /src),
# timeout in seconds, command (sh). /plan.mode: "shell" for a shell
# instead (run.sh VERSION shell).
export PATH=/src/bin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
set -o pipefail # a test's status through its tee to the console
export HOME=/root TMPDIR=/tmp GOTRACEBACK=all BPFBENCH_REQUIRE_PRIVILEGED=1

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
mount -t debugfs debugfs /sys/kernel/debug
[ -d /sys/kernel/tracing/events ] || mount -t tracefs tracefs /sys/kernel/debug/tracing 2>/dev/null
mount -t bpf bpf /sys/fs/bpf
mount -t cgroup2 cgroup2 /sys/fs/cgroup
# The locked-memory limit stays the kernel's default (no ulimit -l): the
# tests see what a real host's services see.

for m in $(cat /modules.list 2>/dev/null); do
	insmod "$m" || echo "@@MODULE $m failed"
done
# A module the kernel asks for (request_module: a qdisc, a socket diag
# family...) is not there to load: say which, so that modules.sh can add it.
printf '#!/bin/sh\necho "@@MODPROBE $*" >/dev/console\nexit 1\n' >/sbin/modprobe-log
chmod +x /sbin/modprobe-log
echo /sbin/modprobe-log >/proc/sys/kernel/modprobe
ip link set lo up
hostname bpfbench-vm

# The tests' temporary files on a disk file system (ext2 on a loop device
# over a sparse file): tmpfs takes O_DIRECT only since 6.6, and llmsim's
# --io-file, which the run tests put in their temporary directory, is read
# with it.
mkdir -p /scratch
truncate -s 1G /tmp/scratch.img
scratch=$(losetup -f)
if losetup "$scratch" /tmp/scratch.img && mke2fs -q "$scratch" && mount -t ext2 "$scratch" /scratch; then
	export TMPDIR=/scratch
else
	echo "@@SCRATCH no disk file system for TMPDIR: tests that need O_DIRECT there fail before 6.6"
fi

uptime_cs() { read -r u _ </proc/uptime; echo "${u%.*}${u#*.}"; } # centiseconds
btf=no
[ -e /sys/kernel/btf/vmlinux ] && btf=yes
echo # the console may have escape sequences before: a line of its own
echo "@@KERNEL $(uname -r) btf=$btf cpus=$(nproc) memlock=$(ulimit -l)"

if [ "$(cat /plan.mode 2>/dev/null)" = shell ]; then
	echo "bpfbench VM: the repository is in /src (PATH has /src/bin); exit powers off"
	cd /src
	setsid cttyhack sh -l
else
	tab=$(printf '\t')
	while IFS="$tab" read -r name dir timeout tries cmd; do
		[ -n "$name" ] || continue
		echo "@@BEGIN $name"
		cd "/src/$dir" || { echo "@@RESULT $name FAIL 0 rc=127"; continue; }
		log=/tmp/out.$name
		# A failure is run once more (tries, from run.sh: 1 for a known
		# failure or a refusal): under emulation a test's timing (a shaped
		# link's queue, two threads' shares of a CPU) is sometimes off.
		# The table says which passed on the second try.
		for try in $(seq 1 "$tries"); do
			[ $try = 2 ] && echo "@@RETRY $name"
			t0=$(uptime_cs)
			# KILL a little after the test's own -test.timeout, which
			# dumps the goroutines first.
			timeout -s KILL $((timeout + 30)) sh -c "$cmd" </dev/null 2>&1 | tee "$log"
			rc=$?
			t1=$(uptime_cs)
			secs=$(((t1 - t0) / 100)).$(printf '%02d' $(((t1 - t0) % 100)))
			res=FAIL
			if [ $rc = 0 ]; then
				res=PASS
				# A Go test binary whose tests all skipped.
				if grep -q '^--- SKIP' "$log" && ! grep -q -- '--- PASS' "$log"; then res=SKIP; fi
				break
			fi
		done
		echo "@@RESULT $name $res $secs rc=$rc tries=$try"
		rm -f "$log"
		cd /
	done </plan.txt
	echo "@@DONE"
fi
sync
poweroff -f
