# Shared settings of the kernel matrix scripts (sourced, not run).
#
# KERNELS_CACHE  downloads, extracted kernels and the payload staging tree
#                (kept between runs: a second run needs no network)
# KERNELS_OUT    per-kernel serial logs and the result table
# KERNELS_MIRROR the Debian mirror (default: the one in /etc/apt sources)

KERNELS_CACHE=${KERNELS_CACHE:-/var/cache/bpfbench/kernels}
KERNELS_OUT=${KERNELS_OUT:-/tmp/bpfbench-kernels}
KERNELS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$KERNELS_DIR/../.." && pwd)

log() { printf '[kernels] %s\n' "$*" >&2; }
die() { printf '[kernels] error: %s\n' "$*" >&2; exit 1; }

# A kernel's name is its version, amd64 ("6.12"), or its version and
# "-arm64" for Debian's arm64 cloud kernel of that version ("6.12-arm64",
# booted by qemu-system-aarch64, with an arm64 payload).

# arch_of KERNEL: its Debian architecture, amd64 or arm64.
arch_of() {
	case $1 in
	*-arm64) echo arm64 ;;
	*) echo amd64 ;;
	esac
}

# suite_of KERNEL: the Debian suite whose cloud kernel is that version.
suite_of() {
	case ${1%-arm64} in
	5.10) echo bullseye ;;
	6.1) echo bookworm ;;
	6.12) echo trixie ;;
	*) die "unknown kernel $1 (known: 5.10 6.1 6.12, each also as VERSION-arm64)" ;;
	esac
}

# payload_of ARCH: the payload archive (payload.sh ARCH) of that
# architecture's kernels.
payload_of() {
	case $1 in
	amd64) echo "$KERNELS_CACHE/payload.cpio" ;;
	*) echo "$KERNELS_CACHE/payload-$1.cpio" ;;
	esac
}

# debian_mirror: the Debian archive URL the machine's apt already uses
# (deb822 "URIs:" or one-line "deb" entries), deb.debian.org if none.
debian_mirror() {
	if [[ -n ${KERNELS_MIRROR:-} ]]; then
		echo "$KERNELS_MIRROR"
		return
	fi
	local u
	u=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null |
		grep -v '^[[:space:]]*#' |
		grep -oE '(https?|file)://[^ ]+/debian/?( |$)' | grep -v security | head -n1 | tr -d ' ' || true)
	echo "${u:-http://deb.debian.org/debian}"
}
