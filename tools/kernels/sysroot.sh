#!/usr/bin/env bash
# sysroot.sh ARCH: the foreign userland the ARCH payload takes its tools
# from (busybox, ip, tc, taskset, setpriv, losetup, python3.11 and every
# shared library they need, the dynamic loader included): the Debian
# packages of the host's own suite (bookworm: python3.11 as the amd64
# payload has it, glibc as the cross toolchain's libc6-dev-ARCH-cross)
# for ARCH, with their dependencies, extracted by mmdebstrap into
# $KERNELS_CACHE/sysroot-ARCH, whose path it prints. The extract variant
# runs no maintainer script: no ARCH emulation (binfmt) is needed. Cached:
# a second run, with the same packages, is offline.
set -euo pipefail
. "$(dirname "$0")/common.sh"

arch=${1:?usage: sysroot.sh arm64}
suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
suite=${suite:-bookworm}
pkgs=busybox-static,iproute2,util-linux,mount,python3.11,libc6
dir=$KERNELS_CACHE/sysroot-$arch
want="$suite $pkgs"
if [[ -f $dir.stamp && $(cat "$dir.stamp") == "$want" && -d $dir/usr ]]; then
	echo "$dir"
	exit 0
fi
mirror=$(debian_mirror)
log "sysroot $arch: mmdebstrap --variant=extract $suite ($pkgs) from $mirror"
rm -rf "$dir" "$dir.stamp"
mmdebstrap --quiet --variant=extract --architectures="$arch" --include="$pkgs" \
	--format=directory "$suite" "$dir" "$mirror" >&2
echo "$want" >"$dir.stamp"
echo "$dir"
