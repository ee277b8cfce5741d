#!/bin/sh
# The image's root file system (deploy/Containerfile), from Debian packages
# alone, so building it needs no container registry:
#
#   deploy/rootfs.sh build/rootfs.tar [MIRROR [ARCH]]
#
# ARCH (a Debian architecture: amd64, arm64) defaults to the host's; the
# extract variant runs nothing of the packages, so a foreign one needs no
# emulation.
#
# bpfbench links glibc (cgo: go-nvml dlopens libnvidia-ml) and nothing
# else, so the root is what running it needs and no more: glibc, ldconfig
# with its configuration (the NVIDIA container toolkit runs it to put the
# driver's libnvidia-ml in the image's cache), the CA certificates (OTLP
# and remote-write over TLS) and base-files (/etc/os-release). mmdebstrap's
# extract variant unpacks these packages without configuring them: no
# shell, no dpkg, no apt, and so no /var/lib/dpkg/status (a scanner sees
# the files, not the packages; the package list is printed below). Two
# hooks do what the packages' maintainer scripts would: the loader's cache
# (ldconfig -r) and the CA bundle (update-ca-certificates concatenates the
# same files).
set -eu
out=${1:?usage: $0 OUT.tar [MIRROR [ARCH]]}
mirror=${2:-http://deb.debian.org/debian}
arch=${3:-$(dpkg --print-architecture)}
packages=base-files,libc6,libc-bin,ca-certificates

mmdebstrap --variant=extract --architectures="$arch" --include="$packages" \
	--customize-hook='rm -rf "$1"/usr/share/doc "$1"/usr/share/man "$1"/usr/share/info "$1"/usr/share/locale "$1"/usr/share/lintian' \
	--customize-hook='mkdir -p "$1"/etc/ssl/certs && find "$1"/usr/share/ca-certificates -name "*.crt" | LC_ALL=C sort | xargs cat >"$1"/etc/ssl/certs/ca-certificates.crt' \
	--customize-hook='ldconfig -r "$1"' \
	--customize-hook='mkdir -p "$1"/tmp && chmod 1777 "$1"/tmp' \
	bookworm "$out" "$mirror"
echo "$out: $packages from bookworm for $arch ($mirror)"
