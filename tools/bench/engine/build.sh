#!/usr/bin/env bash
# A real inference engine to measure against: llama.cpp's llama-server, built
# from the llama.cpp source that the npm package node-llama-cpp ships
# (llama/gitRelease.bundle), CPU only, plus a tiny llama-architecture GGUF
# with random weights (tiny_gguf.py). Nothing is downloaded but the npm
# package and, when missing, Debian packages.
#
#   sudo tools/bench/engine/build.sh
#
# The result is cached under /var/cache/bpfbench/llama (BPFBENCH_LLAMA_CACHE
# overrides it):
#   bin/llama-server    the server
#   tiny-llama.gguf     the model
#   stamp               what they were built from (node-llama-cpp version,
#                       llama.cpp commit, build flags, model script checksum)
# A second run with the same inputs only checks the stamp. The last two
# lines of output are the two paths.
set -euo pipefail

NODE_LLAMA_CPP_VERSION=${NODE_LLAMA_CPP_VERSION:-3.22.1}
cache=${BPFBENCH_LLAMA_CACHE:-/var/cache/bpfbench/llama}
here=$(cd "$(dirname "$0")" && pwd)
jobs=${BPFBENCH_LLAMA_JOBS:-2}
server=$cache/bin/llama-server
model=$cache/tiny-llama.gguf
stamp=$cache/stamp
python=/usr/bin/python3 # Debian's python and python3-numpy, not a pyenv shim

step=setup
log=
fail() {
	echo "build.sh: $*" >&2
	exit 1
}
on_err() {
	local rc=$?
	if [ -n "$log" ] && [ -s "$log" ]; then
		echo "---- last lines of $log" >&2
		tail -n 40 "$log" >&2
	fi
	echo "build.sh: failed while $step (exit $rc)" >&2
	exit "$rc"
}
trap on_err ERR

# CPU features: portable across x86-64 hosts of the same kind (no
# -march=native), keeping AVX2/FMA/F16C when this host has them. AVX-512 is
# never used, so a binary built on an AVX-512 host still runs on one without.
has() { grep -qw "$1" /proc/cpuinfo; }
isa=(-DGGML_NATIVE=OFF -DGGML_AVX512=OFF)
if [ "$(uname -m)" = x86_64 ]; then
	if has avx2 && has fma && has f16c; then
		isa+=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON)
		has bmi2 && isa+=(-DGGML_BMI2=ON) || isa+=(-DGGML_BMI2=OFF)
	else
		echo "build.sh: no AVX2/FMA/F16C on this CPU; building a plain SSE4.2 llama-server (slow)" >&2
		isa+=(-DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_BMI2=OFF)
		has avx && isa+=(-DGGML_AVX=ON) || isa+=(-DGGML_AVX=OFF)
	fi
fi
cmake_flags=(
	-DCMAKE_BUILD_TYPE=Release
	-DBUILD_SHARED_LIBS=OFF # one self-contained binary
	"${isa[@]}"
	-DGGML_CCACHE=OFF
	-DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
	-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
	-DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF # no web UI, no download
)
model_sum=$(sha256sum "$here/tiny_gguf.py" | cut -d' ' -f1)
want_build="node-llama-cpp $NODE_LLAMA_CPP_VERSION; cmake ${cmake_flags[*]}"
want_model="tiny_gguf.py $model_sum"

stamp_line() { sed -n "s/^$1: //p" "$stamp" 2>/dev/null || true; }
current() {
	[ -x "$server" ] && [ -s "$model" ] && [ -f "$stamp" ] &&
		[ "$(stamp_line build)" = "$want_build" ] && [ "$(stamp_line model)" = "$want_model" ]
}

mkdir -p "$cache" || fail "cannot create $cache (run as root, or set BPFBENCH_LLAMA_CACHE)"
exec 9>"$cache/.lock"
flock 9 # one build at a time (make engine and CI on the same host)

if current && "$server" --version >/dev/null 2>&1; then
	echo "llama.cpp $(stamp_line llama.cpp) (cached)"
	echo "$server"
	echo "$model"
	exit 0
fi

step="installing build tools"
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v g++ >/dev/null || need+=(g++)
command -v make >/dev/null || need+=(make)
command -v git >/dev/null || need+=(git)
command -v npm >/dev/null || need+=(npm)
command -v flock >/dev/null || need+=(util-linux)
[ -x "$python" ] || need+=(python3)
"$python" -c 'import numpy' 2>/dev/null || need+=(python3-numpy)
"$python" -c 'import yaml' 2>/dev/null || need+=(python3-yaml)
if [ ${#need[@]} -gt 0 ]; then
	[ "$(id -u)" = 0 ] || fail "missing ${need[*]}: apt-get install -y ${need[*]} (as root), then run again"
	echo "== apt-get install ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

work=$cache/work
mkdir -p "$work"
log=$work/build.log
: >"$log"
src=$cache/src

# The source is fetched for a build, or when only the model is to be written
# and src/ is gone (gguf-py comes from the same tree).
need_build=1
if [ "$(stamp_line build)" = "$want_build" ] && "$server" --version >/dev/null 2>&1; then
	need_build=0
	echo "== llama-server is current; regenerating the model only"
fi
if [ "$need_build" = 1 ] || [ ! -d "$src/gguf-py" ]; then
	step="fetching node-llama-cpp@$NODE_LLAMA_CPP_VERSION from npm"
	echo "== npm pack node-llama-cpp@$NODE_LLAMA_CPP_VERSION"
	tgz=$work/node-llama-cpp-$NODE_LLAMA_CPP_VERSION.tgz
	if [ ! -s "$tgz" ]; then
		(cd "$work" && npm pack --loglevel=error "node-llama-cpp@$NODE_LLAMA_CPP_VERSION" >>"$log" 2>&1)
	fi
	[ -s "$tgz" ] || fail "npm pack did not produce $tgz"
	rm -rf "$work/package"
	tar -xzf "$tgz" -C "$work" package/llama/gitRelease.bundle package/llama/llama.cpp.info.json
	bundle=$work/package/llama/gitRelease.bundle

	step="cloning llama.cpp from the git bundle"
	head=$(git bundle list-heads "$bundle" | awk '$2 == "HEAD" {print $1; exit}')
	[ -n "$head" ] || head=$(git bundle list-heads "$bundle" | awk '{print $1; exit}')
	[ -n "$head" ] || fail "no head in $bundle"
	if [ "$(git -C "$src" rev-parse HEAD 2>/dev/null)" != "$head" ] || [ -n "$(git -C "$src" status --porcelain 2>/dev/null)" ]; then
		rm -rf "$src"
		git clone -q --no-checkout "$bundle" "$src"
		git -C "$src" -c advice.detachedHead=false checkout -q "$head"
	fi
	tag=$(sed -n 's/.*"tag": *"\([^"]*\)".*/\1/p' "$work/package/llama/llama.cpp.info.json")
	echo "llama.cpp $head (node-llama-cpp release tag ${tag:-unknown})"
	rm -rf "$work/package"
fi

if [ "$need_build" = 1 ]; then
	step="configuring llama.cpp (cmake)"
	echo "== cmake ${cmake_flags[*]}"
	build=$cache/build
	cmake -S "$src" -B "$build" "${cmake_flags[@]}" >>"$log" 2>&1

	step="building llama-server (cmake --build -j$jobs; about 10 minutes on 2 cores)"
	echo "== cmake --build --target llama-server -j$jobs"
	start=$(date +%s)
	cmake --build "$build" --target llama-server -j"$jobs" >>"$log" 2>&1
	echo "built in $(($(date +%s) - start)) s"
	mkdir -p "$cache/bin"
	install -m 0755 "$build/bin/llama-server" "$server.tmp"
	mv -f "$server.tmp" "$server"
	"$server" --version >>"$log" 2>&1 || fail "$server --version fails (see $log)"
	# The stamp's build line is written now, so that a model failure below
	# does not cost a rebuild.
	printf 'build: %s\nllama.cpp: %s\nmodel: none\n' "$want_build" "$head" >"$stamp"
fi

step="writing the model (tiny_gguf.py)"
echo "== tiny_gguf.py -> $model"
PYTHONPATH=$src/gguf-py "$python" "$here/tiny_gguf.py" "$model.tmp" >>"$log" 2>&1
mv -f "$model.tmp" "$model"

head=$(git -C "$src" rev-parse HEAD)
printf 'build: %s\nllama.cpp: %s\nmodel: %s\n' "$want_build" "$head" "$want_model" >"$stamp.tmp"
mv -f "$stamp.tmp" "$stamp"
current || fail "stamp check fails after the build (bug in build.sh)"
echo "llama.cpp $head"
echo "$server"
echo "$model"
