#!/usr/bin/env bash
# kernels.sh: the kernel matrix (`make kernels`). Installs what it needs,
# builds the payload once per architecture, boots each kernel of KERNELS in
# turn under qemu TCG running its tests of tests.txt, then prints the table
# (report.sh).
#   KERNELS  the kernels, default "5.10 6.1 6.12 6.12-arm64" (VERSION-arm64:
#            Debian's arm64 cloud kernel under qemu-system-aarch64)
#   TESTS    a regexp on tests.txt's names (default: all)
#   KERNELS_OUT, KERNELS_CACHE: see common.sh
set -euo pipefail
. "$(dirname "$0")/common.sh"

read -ra kernels <<<"${KERNELS:-5.10 6.1 6.12 6.12-arm64}"
[[ $(id -u) == 0 ]] || die "run as root (apt-get, the kernel cache in $KERNELS_CACHE)"
start=$SECONDS
bash "$KERNELS_DIR/deps.sh" "${kernels[@]}"
for k in "${kernels[@]}"; do
	bash "$KERNELS_DIR/fetch.sh" "$k" >/dev/null
done
# One payload per architecture (amd64 first, as KERNELS names them).
for a in $(for k in "${kernels[@]}"; do arch_of "$k"; done | awk '!seen[$0]++'); do
	bash "$KERNELS_DIR/payload.sh" "$a"
done
mkdir -p "$KERNELS_OUT"
for k in "${kernels[@]}"; do
	rm -f "$KERNELS_OUT/$k.log" "$KERNELS_OUT/$k.parallel.log" "$KERNELS_OUT/$k.parallel.crashed.log"
	bash "$KERNELS_DIR/run.sh" "$k" || log "$k: the VM failed (see $KERNELS_OUT/$k.log)"
	# The tests that need both vCPUs at once, in a VM with a host thread per
	# vCPU (run.sh): booted once more when it ended without finishing its
	# plan, which it can under emulation (a text patch seen half done by the
	# other vCPU's thread); the first console is kept, and the table says so.
	KERNELS_VCPUS=parallel bash "$KERNELS_DIR/run.sh" "$k" || log "$k: the parallel VM failed"
	p=$KERNELS_OUT/$k.parallel.log
	if [[ -f $p ]] && ! grep -q '^@@DONE' "$p"; then
		mv "$p" "$KERNELS_OUT/$k.parallel.crashed.log"
		log "$k: the parallel VM ended before its plan did (console in $k.parallel.crashed.log): booting it again"
		KERNELS_VCPUS=parallel bash "$KERNELS_DIR/run.sh" "$k" || log "$k: the parallel VM failed"
	fi
done
echo
rc=0
bash "$KERNELS_DIR/report.sh" "${kernels[@]}" || rc=$?
log "matrix: $((SECONDS - start))s; logs and table in $KERNELS_OUT"
exit $rc
