#!/usr/bin/env bash
# deps.sh [KERNEL...]: installs the Debian packages the kernel matrix needs
# for those kernels, the missing ones only (apt-get, as root).
set -euo pipefail
. "$(dirname "$0")/common.sh"
export DEBIAN_FRONTEND=noninteractive

# qemu-system-x86: the VM; busybox-static: the VM's shell and tools; cpio:
# the initramfs; kmod: modinfo (module dependencies); xz-utils: 6.12's
# compressed modules; iproute2, util-linux, mount: ip, tc, taskset,
# setpriv, losetup for the tests; python3: the live tests' stream client;
# gcc, make: `make build`.
pkgs=(qemu-system-x86 busybox-static cpio kmod xz-utils iproute2 util-linux mount python3 gcc make)
# An arm64 kernel (VERSION-arm64): qemu-system-aarch64 (qemu-system-arm);
# the cross compiler and its libc for `make build ARCH=arm64` and the cgo
# test binaries (gcc-aarch64-linux-gnu brings aarch64-linux-gnu-readelf,
# which payload.sh resolves libraries with); mmdebstrap for the arm64
# userland (sysroot.sh).
for k; do
	if [[ $(arch_of "$k") == arm64 ]]; then
		pkgs+=(qemu-system-arm gcc-aarch64-linux-gnu libc6-dev-arm64-cross mmdebstrap)
		break
	fi
done
# qemu 10 or later: the tests marked "parallel" run with a host thread per
# vCPU (run.sh), where qemu 7.2 (Debian 12's own) ran the x86 kernel's
# text patches wrong ("Oops: int3" in try_to_wake_up on 6.12, soft lockups
# on 6.1, in half of the boots); Debian 12 takes it from bookworm-backports
# (10.0), Debian 13 has it.
qemu_major() {
	"$1" --version 2>/dev/null | awk 'NR == 1 {split($4, v, "."); print v[1] + 0}'
}
backports=()
if [[ $(. /etc/os-release && echo "${VERSION_CODENAME:-}") == bookworm ]]; then
	for p in "${pkgs[@]}"; do
		case $p in
		qemu-system-x86) bin=qemu-system-x86_64 ;;
		qemu-system-arm) bin=qemu-system-aarch64 ;;
		*) continue ;;
		esac
		v=$(qemu_major "$bin" || true)
		((${v:-0} >= 10)) || backports+=("$p")
	done
fi
if ((${#backports[@]})); then
	[[ $(id -u) == 0 ]] || die "qemu older than 10: install ${backports[*]} from bookworm-backports (as root)"
	log "installing from bookworm-backports: ${backports[*]}"
	echo "deb http://deb.debian.org/debian bookworm-backports main" >/etc/apt/sources.list.d/bpfbench-backports.list
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends -t bookworm-backports "${backports[@]}" >/dev/null
fi
missing=()
for p in "${pkgs[@]}"; do
	if [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) != "install ok installed" ]]; then
		missing+=("$p")
	fi
done
((${#missing[@]} == 0)) && exit 0
[[ $(id -u) == 0 ]] || die "missing packages: ${missing[*]} (run as root, or apt-get install them)"
log "installing: ${missing[*]}"
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
