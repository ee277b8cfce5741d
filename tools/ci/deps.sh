#!/usr/bin/env bash
# Installs the Debian packages the build and the tests need, those missing
# only: `make test` runs it first, and .ci/run through `make test`.
# As root it runs apt-get; otherwise it names the missing packages and the
# command that installs them, and fails. DEPS_EXTRA adds packages.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

pkgs=(clang llvm libbpf-dev bpftool gcc make iproute2 util-linux mount kmod procps
	chromium fonts-liberation cmake g++ git python3-numpy python3-yaml prometheus nginx-light
	libcuda1 libnvidia-ml1
	python3-torch libopenblas0-openmp
	${DEPS_EXTRA:-})
# make dist builds both architectures: the other one's cross compiler.
case $(dpkg --print-architecture) in
amd64) pkgs+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross) ;;
arm64) pkgs+=(gcc-x86-64-linux-gnu libc6-dev-amd64-cross) ;;
esac

missing=()
for p in "${pkgs[@]}"; do
	if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]; then
		missing+=("$p")
	fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ]; then
	echo "missing Debian packages: ${missing[*]}" >&2
	echo "install them with: sudo apt-get install -y ${missing[*]} (or run make test as root;" >&2
	echo "libcuda1 and libnvidia-ml1 need the contrib and non-free components in the apt sources)" >&2
	exit 1
fi
echo "installing: ${missing[*]}"
# contrib and non-free for the real NVIDIA userspace driver (libcuda1,
# libnvidia-ml1): the CUDA probes are tested against it (no GPU needed).
if [ -f /etc/apt/sources.list.d/debian.sources ]; then
	sed -i 's/^Components: main$/Components: main contrib non-free non-free-firmware/' /etc/apt/sources.list.d/debian.sources
elif [ -f /etc/apt/sources.list ]; then
	sed -i -E '/^deb /{/ contrib/!s/ main( |$)/ main contrib non-free non-free-firmware\1/}' /etc/apt/sources.list
fi
for attempt in 1 2 3; do
	if apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
		exit 0
	fi
	sleep 10
done
echo "apt-get failed to install: ${missing[*]}" >&2
exit 1
