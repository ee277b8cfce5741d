#!/usr/bin/env bash
# fetch.sh VERSION: downloads (once) and extracts the newest Debian cloud
# kernel of VERSION's suite (5.10 bullseye, 6.1 bookworm, 6.12 trixie;
# amd64, or arm64 for VERSION-arm64) into $KERNELS_CACHE/VERSION/root and
# prints that directory. apt runs with a private configuration (sources,
# lists and archives under the cache), so the machine's own apt state is
# neither read nor changed. A second run uses the downloaded .deb without
# touching the network.
set -euo pipefail
. "$(dirname "$0")/common.sh"

ver=${1:?usage: fetch.sh 5.10|6.1|6.12|6.12-arm64}
suite=$(suite_of "$ver")
arch=$(arch_of "$ver")
dir=$KERNELS_CACHE/$ver
# One apt state per suite and architecture (amd64's keeps its old place).
apt_dir=$KERNELS_CACHE/apt/$suite
[[ $arch == amd64 ]] || apt_dir=$KERNELS_CACHE/apt/$suite-$arch
mkdir -p "$dir" "$apt_dir"/{lists/partial,cache/archives/partial}

# Extracted already (the stamp names the package's file): nothing to do.
if [[ -f $dir/stamp && -d $dir/root/boot ]]; then
	echo "$dir/root"
	exit 0
fi

mirror=$(debian_mirror)
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
echo "deb [signed-by=$keyring] $mirror $suite main" >"$apt_dir/sources.list"
apt_opts=(
	-o "Dir::Etc::sourcelist=$apt_dir/sources.list"
	-o "Dir::Etc::sourceparts=-"
	-o "Dir::State::Lists=$apt_dir/lists"
	-o "Dir::Cache=$apt_dir/cache"
	-o "Dir::State::status=/dev/null"
	-o "APT::Architecture=$arch"
	-o "Debug::NoLocking=1"
	-o "APT::Sandbox::User=root"
	-o "Acquire::Languages=none"
)
log "$ver: apt-get update ($mirror $suite main)"
apt-get "${apt_opts[@]}" -qq update >&2

# The meta package depends on the real image (linux-image-X.Y.Z-N-cloud-ARCH
# or linux-image-6.12.N+debM-cloud-ARCH); the newest version is the candidate.
pkg=$(apt-cache "${apt_opts[@]}" depends "linux-image-cloud-$arch" |
	awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
[[ -n $pkg ]] || die "$ver: no linux-image-*-cloud-$arch behind linux-image-cloud-$arch in $suite"
log "$ver: $pkg"
(cd "$apt_dir/cache/archives" && apt-get "${apt_opts[@]}" -qq download "$pkg" >&2)
deb=$(ls -t "$apt_dir/cache/archives/${pkg}"_*.deb | head -n1)

rm -rf "$dir/root"
mkdir -p "$dir/root"
dpkg-deb -x "$deb" "$dir/root"
basename "$deb" >"$dir/stamp"
echo "$dir/root"
