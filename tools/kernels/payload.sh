#!/usr/bin/env bash
# payload.sh [ARCH]: builds what runs in the VM and packs it, with busybox,
# the tools the tests call and every shared library they need, into
# $KERNELS_CACHE/payload.cpio (the part of the initramfs common to every
# kernel of that architecture; run.sh adds a kernel's modules and the plan).
#
# ARCH amd64 (the default) takes the tools and their libraries (ldd) from
# this machine. ARCH arm64 (the -arm64 kernels, payload-arm64.cpio):
# `make build ARCH=arm64` (bin/linux-arm64), the test binaries cross
# compiled (GOARCH=arm64, cgo through aarch64-linux-gnu-gcc), and the same
# tools from the arm64 Debian packages sysroot.sh extracts, their
# libraries found from their DT_NEEDED entries (readelf) in that sysroot.
#
#   /init                 init.sh
#   /src/go.mod           the repository's layout, for tests that look for it
#   /src/bin/...          `make build`'s binaries (llmsim, CUDA stub), and
#                         bpfbench from `make dist`'s .deb of ARCH
#   /src/<pkg>/pkg.test   `go test -c` of each package named in tests.txt,
#                         with the package's testdata/
#   /usr/local/bin/go, make  stand-ins that copy the prebuilt llmsim and
#                         CUDA stub (the tests build them with go and make)
set -euo pipefail
. "$(dirname "$0")/common.sh"

arch=${1:-amd64}
out=$(payload_of "$arch")
stage=${out%.cpio}
root=$stage/root
case $arch in
amd64) ;;
arm64)
	sysroot=$(bash "$KERNELS_DIR/sysroot.sh" "$arch")
	triplet=aarch64-linux-gnu
	;;
*) die "payload.sh: unknown architecture $arch (amd64, arm64)" ;;
esac
rm -rf "$root"
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,usr/local/bin,etc,proc,sys,dev,tmp,run,root,src/bin,var}
ln -s ../run "$root/var/run"

# The binaries: `make build`, then one test binary per package in tests.txt.
if [[ $arch == amd64 ]]; then
	log "make build"
	make -s -C "$REPO_ROOT" build >&2
	# bin/ less other architectures' builds (bin/linux-arm64...).
	find "$REPO_ROOT/bin" -mindepth 1 -maxdepth 1 ! -name 'linux-*' -exec cp -a {} "$root/src/bin/" \;
	gotest=(env CGO_ENABLED=1 go test)
else
	log "make build ARCH=$arch"
	make -s -C "$REPO_ROOT" build ARCH="$arch" >&2
	[[ -x $REPO_ROOT/bin/linux-$arch/bpfbench ]] || die "make build ARCH=$arch made no bin/linux-$arch/bpfbench"
	cp -a "$REPO_ROOT/bin/linux-$arch/." "$root/src/bin/"
	gotest=(env GOARCH="$arch" CC="$triplet-gcc" CGO_ENABLED=1
		CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}" go test)
fi
# The packaged bpfbench: the .deb `make dist` makes for this architecture,
# its /usr/bin/bpfbench in place of make build's, so that the commands of
# tests.txt (check, the refusals) run what a user installs.
log "make dist DIST_ARCHES=$arch"
make -s -C "$REPO_ROOT" dist DIST="$stage/dist" DIST_ARCHES="$arch" >&2
deb=$(ls "$stage/dist"/bpfbench_*_"$arch".deb)
dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/bin/bpfbench >"$root/src/bin/bpfbench"
chmod 755 "$root/src/bin/bpfbench"
cp "$REPO_ROOT/go.mod" "$root/src/"
pkgs=$(grep -vE '^[[:space:]]*(#|$)' "$KERNELS_DIR/tests.txt" | awk '$2 != "cmd" {print $2}' | sort -u)
for p in $pkgs; do
	mkdir -p "$root/src/$p"
	log "go test -c ./$p ($arch)"
	# -s -w: no symbol table or DWARF (a smaller initramfs); stack traces
	# still have file:line.
	(cd "$REPO_ROOT" && "${gotest[@]}" -c -ldflags '-s -w' -o "$root/src/$p/$(basename "$p").test" "./$p")
	if [[ -d $REPO_ROOT/$p/testdata ]]; then
		cp -a "$REPO_ROOT/$p/testdata" "$root/src/$p/"
	fi
done
# The CUDA stub's sources: its TestMain runs make in this directory (the
# stand-in make copies the prebuilt stub instead).
mkdir -p "$root/src/tools/cudastub"
cp "$REPO_ROOT/tools/cudastub/Makefile" "$root/src/tools/cudastub/"

# src PATH: the file at PATH (a host path) this payload copies: the host's
# own for amd64; for another architecture the sysroot's, its symlinks
# followed inside the sysroot (they may be absolute: /sbin/ip -> /bin/ip),
# and /usr/X as /X (the sysroot is not merged-/usr).
src() {
	local p=$1 n t
	[[ $arch == amd64 ]] && { echo "$p"; return; }
	p=${p//x86_64-linux-gnu/$triplet}
	for t in "$p" "${p#/usr}"; do
		for n in 1 2 3 4 5 6 7 8; do
			[[ -L $sysroot$t ]] || break
			local l
			l=$(readlink "$sysroot$t")
			[[ $l == /* ]] && t=$l || t=$(dirname "$t")/$l
		done
		if [[ -f $sysroot$t ]]; then
			echo "$sysroot$t"
			return
		fi
	done
	die "$arch: $1 is not in $sysroot"
}

# busybox, a link per applet (in /bin; the real tools below win on PATH).
# The applets: this machine's busybox-static's list (the foreign one does
# not run here; the same suite's package, the same configuration).
cp "$(src /bin/busybox)" "$root/bin/busybox"
bbver() { LC_ALL=C grep -aoE -m1 'BusyBox v[^)]*\)' "$1" | head -n1; }
[[ $(bbver /bin/busybox) == $(bbver "$root/bin/busybox") ]] ||
	log "$arch: busybox is $(bbver "$root/bin/busybox"), this machine's $(bbver /bin/busybox): applets may differ"
for a in $(/bin/busybox --list); do
	[[ -e $root/bin/$a ]] || ln -s busybox "$root/bin/$a"
done

# The real tools the tests call (busybox's lack options they use).
tools=(/usr/sbin/ip /usr/sbin/tc /usr/bin/taskset /usr/bin/setpriv /usr/sbin/losetup /usr/bin/python3.11)
for t in "${tools[@]}"; do
	cp "$(src "$t")" "$root$t"
done
ln -sf python3.11 "$root/usr/bin/python3"
tcdir=/usr/lib/tc
[[ $arch == amd64 ]] || tcdir=$sysroot/usr/lib/tc
[[ -d $tcdir ]] && mkdir -p "$root/usr/lib" && cp -a "$tcdir" "$root/usr/lib/"

# Python: only the standard library modules the stream client
# (cmd/bpfbench/testdata/stream_client.py) imports, found by importing them
# (with this machine's python3.11: the same modules, an extension module's
# name with the other architecture's triplet).
/usr/bin/python3.11 -c '
import argparse, http.client, json, socket, sys, threading, time, encodings.idna, selectors, subprocess
for m in list(sys.modules.values()):
    f = getattr(m, "__file__", None)
    if f: print(f)' | while read -r f; do
	if [[ $arch != amd64 ]]; then
		# The standard library only: site-packages this machine's .pth
		# files import at start (certifi...) are not the sysroot's.
		[[ $f == /usr/lib/python3.11/* ]] || continue
		f=${f//x86_64-linux-gnu/$triplet}
	fi
	mkdir -p "$root$(dirname "$f")"
	cp "$(src "$f")" "$root$f"
done

# elves: the payload's ELF files (executables and shared libraries).
elves() {
	find "$root" -type f -perm -u+x -o -type f -name '*.so*' | while read -r f; do
		if head -c 4 "$f" | LC_ALL=C grep -qa ELF; then echo "$f"; fi
	done
}
if [[ $arch == amd64 ]]; then
	# The shared libraries of every ELF file, at the paths ldd names (the
	# dynamic loader included), copied with their content (no symlinks).
	elves | while read -r f; do
		ldd "$f" 2>/dev/null | grep -oE '(/[^ ]+)' || true
	done | sort -u | while read -r lib; do
		[[ -e $root$lib ]] && continue
		mkdir -p "$root$(dirname "$lib")"
		cp -L "$lib" "$root$lib"
	done
else
	# ldd cannot run a foreign loader: the dynamic loader (PT_INTERP) and
	# the DT_NEEDED libraries, each found in the sysroot's library
	# directories and copied to /lib/TRIPLET (the loader's default path),
	# then theirs in turn. One the sysroot lacks and the payload has
	# (libcuda.so.1 in /src/bin, which the tests name by path) is left.
	mkdir -p "$root/lib/$triplet"
	declare -A seen=()
	todo=$(elves)
	while [[ -n $todo ]]; do
		next=
		for f in $todo; do
			interp=$("$triplet-readelf" -lW "$f" 2>/dev/null | sed -n 's/.*Requesting program interpreter: \(.*\)]$/\1/p')
			if [[ -n $interp && ! -e $root$interp ]]; then
				mkdir -p "$root$(dirname "$interp")"
				cp "$(src "$interp")" "$root$interp"
			fi
			for n in $("$triplet-readelf" -dW "$f" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p'); do
				[[ -n ${seen[$n]:-} ]] && continue
				seen[$n]=1
				lib=
				for d in /lib/$triplet /usr/lib/$triplet /lib /usr/lib; do
					if [[ -e $sysroot$d/$n || -L $sysroot$d/$n ]]; then lib=$(src "$d/$n") && break; fi
				done
				if [[ -z $lib ]]; then
					[[ -n $(find "$root/src" -name "$n" -print -quit) ]] || log "$arch: $n (needed by ${f#"$root"}) is in neither the sysroot nor the payload"
					continue
				fi
				cp "$lib" "$root/lib/$triplet/$n"
				next+=" $root/lib/$triplet/$n"
			done
		done
		todo=$next
	done
fi

# Stand-ins for go and make: the tests build llmsim and the CUDA stub with
# them; in the VM they copy the binaries `make build` made.
cat >"$root/usr/local/bin/go" <<'SH'
#!/bin/sh
# go build -o OUT ./cmd/llmsim: copies /src/bin/llmsim.
out=
while [ $# -gt 0 ]; do
	case $1 in -o) out=$2; shift ;; ./cmd/llmsim) pkg=llmsim ;; esac
	shift
done
[ "${pkg:-}" = llmsim ] && [ -n "$out" ] && exec cp /src/bin/llmsim "$out"
echo "go is not in the VM (only 'go build -o OUT ./cmd/llmsim' is stood in for)" >&2
exit 1
SH
cat >"$root/usr/local/bin/make" <<'SH'
#!/bin/sh
# make -C .../tools/cudastub OUT=DIR [targets]: copies the CUDA stub.
for a; do case $a in OUT=*) out=${a#OUT=} ;; esac; done
[ -n "${out:-}" ] || { echo "make is not in the VM (only the CUDA stub's OUT=DIR is stood in for)" >&2; exit 1; }
mkdir -p "$out"
for f in libcuda.so.1 libcudart.so.12 cudastub-driver launchloop; do cp /src/bin/$f "$out/"; done
SH
chmod +x "$root/usr/local/bin/go" "$root/usr/local/bin/make"

# Users (setpriv --reuid=nobody), localhost, the init.
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
printf '127.0.0.1 localhost\n::1 localhost\n' >"$root/etc/hosts"
echo 'hosts: files dns' >"$root/etc/nsswitch.conf"
cp "$KERNELS_DIR/init.sh" "$root/init"
chmod +x "$root/init"

(cd "$root" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) >"$out"
log "payload ($arch): $(du -sh "$out" | cut -f1) uncompressed"
