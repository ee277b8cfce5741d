#!/usr/bin/env bash
# run.sh VERSION [shell | -- COMMAND...]: boots one Debian cloud kernel
# (5.10, 6.1, 6.12 amd64 under qemu-system-x86_64; 6.12-arm64 under
# qemu-system-aarch64) under qemu TCG with its architecture's payload and
#   (nothing)      runs that kernel's tests of tests.txt (TESTS=regexp
#                  picks by name), the serial console in
#                  $KERNELS_OUT/VERSION.log
#   shell          gives a shell in the VM (exit, or Ctrl-A X, ends it)
#   -- COMMAND...  runs COMMAND in /src in the VM, its output on the console
# It expects payload.sh ARCH to have run (kernels.sh runs it); it fetches the
# kernel and packs its modules itself.
set -euo pipefail
. "$(dirname "$0")/common.sh"

ver=${1:?usage: run.sh 5.10|6.1|6.12|6.12-arm64 [shell | -- COMMAND...]}
shift
mode=matrix
# KERNELS_VCPUS: which of the matrix's tests this VM runs: "serial" (the
# default) those of tests.txt not marked "parallel", under one host thread
# for both vCPUs; "parallel" the marked ones, under a host thread per vCPU
# (see KERNELS_ACCEL below), its console in VERSION.parallel.log.
vcpus=${KERNELS_VCPUS:-serial}
[[ $vcpus == serial || $vcpus == parallel ]] || die "KERNELS_VCPUS: serial or parallel, not $vcpus"
if [[ ${1:-} == shell ]]; then
	mode=shell
elif [[ ${1:-} == -- ]]; then
	shift
	mode=cmd
	(($#)) || die "run.sh $ver -- needs a command"
fi
arch=$(arch_of "$ver")
payload=$(payload_of "$arch")
[[ -f $payload ]] || die "no $arch payload: run tools/kernels/payload.sh $arch (or make kernels) first"

kroot=$(bash "$KERNELS_DIR/fetch.sh" "$ver")
bash "$KERNELS_DIR/modules.sh" "$ver"
vmlinuz=$(ls "$kroot"/boot/vmlinuz-*)

# expect_of EXPECT: this kernel's expectation (pass, refuse, skip, xfail).
expect_of() {
	local e def=pass
	for e in ${1//,/ }; do
		case $e in
		"$ver="*) echo "${e#*=}"; return ;;
		"*="*) def=${e#*=} ;;
		esac
	done
	echo "$def"
}

# The plan: name, directory, timeout, tries, command (see init.sh). A
# failure is tried once more, but a known one (xfail) or a refusal.
plan=$KERNELS_CACHE/$ver/plan
rm -rf "$plan"
mkdir -p "$plan"
: >"$plan/plan.txt"
vm_timeout=180 # boot, module loading and power-off
case $mode in
shell) echo shell >"$plan/plan.mode" ;;
cmd)
	printf 'cmd\t.\t%s\t1\t%s\n' "${KERNELS_CMD_TIMEOUT:-600}" "$*" >"$plan/plan.txt"
	vm_timeout=$((vm_timeout + ${KERNELS_CMD_TIMEOUT:-600} + 30))
	;;
matrix)
	while read -r name pkg timeout expect rest; do
		[[ -z $name || $name == \#* ]] && continue
		[[ -n ${TESTS:-} && ! $name =~ $TESTS ]] && continue
		# A test marked "parallel" runs in the VM of its own phase only.
		[[ ,$expect, == *,parallel,* ]] && want=parallel || want=serial
		[[ $want == "$vcpus" ]] || continue
		exp=$(expect_of "$expect")
		[[ $exp == skip ]] && continue
		tries=2
		[[ $exp == pass ]] || tries=1
		if [[ $pkg == cmd ]]; then
			printf '%s\t.\t%s\t%s\t%s\n' "$name" "$timeout" "$tries" "$rest"
		else
			printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$pkg" "$timeout" "$tries" \
				"./$(basename "$pkg").test -test.v -test.count=1 -test.run '$rest' -test.timeout ${timeout}s"
		fi >>"$plan/plan.txt"
		vm_timeout=$((vm_timeout + tries * (timeout + 30)))
	done <"$KERNELS_DIR/tests.txt"
	;;
esac
# The VM's limit: the sum of its tests' timeouts, at most KERNELS_VM_TIMEOUT
# (600 s) so that the matrix ends in time; a test still running then has
# no result (the table says NO RESULT).
if [[ $mode == matrix ]]; then
	vm_timeout=$((vm_timeout < ${KERNELS_VM_TIMEOUT:-600} ? vm_timeout : ${KERNELS_VM_TIMEOUT:-600}))
fi
(cd "$plan" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) >"$KERNELS_CACHE/$ver/plan.cpio"

# One initrd: concatenated newc archives are unpacked in turn.
initrd=$KERNELS_CACHE/$ver/initrd.cpio
cat "$payload" "$KERNELS_CACHE/$ver/modules.cpio" "$KERNELS_CACHE/$ver/plan.cpio" >"$initrd"

# KERNELS_ACCEL: the accelerator. The serial phase's default is
# tcg,thread=single: one host thread runs both vCPUs in turn. With a thread
# per vCPU (tcg,thread=multi) the kernel's patching of its own text while
# another vCPU runs it (text_poke_bp's int3, as attaching a tracepoint
# flips its static key) went wrong under emulation: "Oops: int3" in
# try_to_wake_up on 6.12, soft lockups on 6.1 and a hung `check` on 5.10,
# each in a run or two of several whole matrices. But with one thread a
# busy vCPU slows the other one's tasks in wall time while the guest's
# clock runs on (no steal time under TCG): busy loops on vCPU 0 made the
# load generator on vCPU 1 read slow, so the tests whose ground truth needs
# the two vCPUs to run at once (a busy CPU beside an idle one) are marked
# "parallel" in tests.txt and run in a VM of their own under
# tcg,thread=multi (kernels.sh boots it again if it crashes).
#
# arm64: the virt machine, its console the PL011 (ttyAMA0). Debian's arm64
# vmlinuz is an uncompressed Image (an EFI stub), which -kernel takes as
# is. -cpu max emulates pointer authentication with the architected QARMA
# cipher, which the kernel (ARM64_PTR_AUTH_KERNEL) runs on every
# non-leaf call and return; pauth-impdef=on has qemu use its own cheaper
# hash instead, the same instructions to the guest.
log="$KERNELS_OUT/$ver.log"
accel=tcg,thread=single
append_more=
if [[ $vcpus == parallel ]]; then
	log="$KERNELS_OUT/$ver.parallel.log"
	accel=tcg,thread=multi
	# A lockup there ends the VM at once (panic=-1 and -no-reboot) rather
	# than at its time limit, so that kernels.sh can boot it again.
	append_more="softlockup_panic=1 sysctl.kernel.panic_on_rcu_stall=1"
	if [[ $mode == matrix && ! -s $plan/plan.txt ]]; then
		log "$ver: no test of this kernel needs parallel vCPUs"
		exit 0
	fi
fi
case $arch in
amd64)
	qemu=(qemu-system-x86_64 -cpu max)
	console=ttyS0
	;;
arm64)
	qemu=(qemu-system-aarch64 -machine virt -cpu max,pauth-impdef=on)
	console=ttyAMA0
	;;
esac
qemu+=(-accel "${KERNELS_ACCEL:-$accel}" -m 3G -smp 2 -nographic -no-reboot
	-kernel "$vmlinuz" -initrd "$initrd"
	-append "console=$console quiet panic=-1 rdinit=/init $append_more ${KERNELS_APPEND:-}")
mkdir -p "$KERNELS_OUT"
if [[ $mode == shell ]]; then
	exec "${qemu[@]}"
fi
log "$ver: booting $(basename "$vmlinuz") (limit ${vm_timeout}s), console in $log"
start=$SECONDS
rc=0
# The console to the log (without the serial line's CRs); the markers and,
# for a command, everything to the terminal too.
timeout -s KILL "$vm_timeout" "${qemu[@]}" </dev/null 2>&1 | sed -u 's/\r$//; s/\x1b\[[0-9;?]*[A-Za-z]//g; s/\x1bc//g' | tee "$log" |
	if [[ $mode == cmd ]]; then cat; else grep --line-buffered '^@@'; fi || rc=$?
echo "@@VM $ver seconds=$((SECONDS - start)) rc=$rc" | tee -a "$log"
