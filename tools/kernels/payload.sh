#!/usr/bin/env bash
# payload.sh: builds what runs in the VM and packs it, with busybox, the
# tools the tests call and every shared library they need, into
# $KERNELS_CACHE/payload.cpio (the part of the initramfs common to every
# kernel; initramfs.sh adds a kernel's modules, run.sh the plan).
#
#   /init                 init.sh
#   /src/go.mod           the repository's layout, for tests that look for it
#   /src/bin/...          `make build`'s binaries (bpfbench, llmsim, CUDA stub)
#   /src/<pkg>/pkg.test   `go test -c` of each package named in tests.txt,
#                         with the package's testdata/
#   /usr/local/bin/go, make  stand-ins that copy the prebuilt llmsim and
#                         CUDA stub (the tests build them with go and make)
set -euo pipefail
. "$(dirname "$0")/common.sh"

stage=$KERNELS_CACHE/payload
root=$stage/root
rm -rf "$root"
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,usr/local/bin,etc,proc,sys,dev,tmp,run,root,src/bin,var}
ln -s ../run "$root/var/run"

# The binaries: `make build`, then one test binary per package in tests.txt.
log "make build"
make -s -C "$REPO_ROOT" build >&2
cp -a "$REPO_ROOT"/bin/. "$root/src/bin/"
cp "$REPO_ROOT/go.mod" "$root/src/"
pkgs=$(grep -vE '^[[:space:]]*(#|$)' "$KERNELS_DIR/tests.txt" | awk '$2 != "cmd" {print $2}' | sort -u)
for p in $pkgs; do
	mkdir -p "$root/src/$p"
	log "go test -c ./$p"
	# -s -w: no symbol table or DWARF (a smaller initramfs); stack traces
	# still have file:line.
	(cd "$REPO_ROOT" && CGO_ENABLED=1 go test -c -ldflags '-s -w' -o "$root/src/$p/$(basename "$p").test" "./$p")
	if [[ -d $REPO_ROOT/$p/testdata ]]; then
		cp -a "$REPO_ROOT/$p/testdata" "$root/src/$p/"
	fi
done
# The CUDA stub's sources: its TestMain runs make in this directory (the
# stand-in make copies the prebuilt stub instead).
mkdir -p "$root/src/tools/cudastub"
cp "$REPO_ROOT/tools/cudastub/Makefile" "$root/src/tools/cudastub/"

# busybox, a link per applet (in /bin; the real tools below win on PATH).
cp /bin/busybox "$root/bin/busybox"
for a in $("$root/bin/busybox" --list); do
	[[ -e $root/bin/$a ]] || ln -s busybox "$root/bin/$a"
done

# The real tools the tests call (busybox's lack options they use).
tools=(/usr/sbin/ip /usr/sbin/tc /usr/bin/taskset /usr/bin/setpriv /usr/sbin/losetup /usr/bin/python3.11)
for t in "${tools[@]}"; do
	cp "$t" "$root$t"
done
ln -sf python3.11 "$root/usr/bin/python3"
[[ -d /usr/lib/tc ]] && mkdir -p "$root/usr/lib" && cp -a /usr/lib/tc "$root/usr/lib/"

# Python: only the standard library modules the stream client
# (cmd/bpfbench/testdata/stream_client.py) imports, found by importing them.
/usr/bin/python3.11 -c '
import argparse, http.client, json, socket, sys, threading, time, encodings.idna, selectors, subprocess
for m in list(sys.modules.values()):
    f = getattr(m, "__file__", None)
    if f: print(f)' | while read -r f; do
	mkdir -p "$root$(dirname "$f")"
	cp "$f" "$root$f"
done

# The shared libraries of every ELF file, at the paths ldd names (the
# dynamic loader included), copied with their content (no symlinks).
find "$root" -type f -perm -u+x -o -type f -name '*.so*' | while read -r f; do
	head -c 4 "$f" | LC_ALL=C grep -qa ELF || continue
	ldd "$f" 2>/dev/null | grep -oE '(/[^ ]+)' || true
done | sort -u | while read -r lib; do
	[[ -e $root$lib ]] && continue
	mkdir -p "$root$(dirname "$lib")"
	cp -L "$lib" "$root$lib"
done

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

(cd "$root" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) >"$stage.cpio"
log "payload: $(du -sh "$stage.cpio" | cut -f1) uncompressed"
