# bpfbench build. `make build` needs only Go and gcc (the generated eBPF
# objects are committed); `make generate` needs clang, llvm and libbpf-dev.
GO        ?= go
# ARCH: the architecture to build for (amd64, arm64). Another than the
# host's is cross-compiled (cgo and the C tools through CROSS_CC's gcc:
# gcc-aarch64-linux-gnu or gcc-x86-64-linux-gnu) into bin/linux-ARCH.
HOST_ARCH := $(shell $(GO) env GOHOSTARCH)
ARCH      ?= $(HOST_ARCH)
CROSS_CC_amd64 := x86_64-linux-gnu-gcc
CROSS_CC_arm64 := aarch64-linux-gnu-gcc
ifneq ($(ARCH),$(HOST_ARCH))
export GOARCH := $(ARCH)
export CC := $(CROSS_CC_$(ARCH))
BIN       ?= bin/linux-$(ARCH)
endif
BIN       ?= bin
PREFIX    ?= /usr/local
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS   := -X github.com/bpfbench/bpfbench/internal/version.Version=$(VERSION) \
             -X github.com/bpfbench/bpfbench/internal/version.Revision=$(REVISION)
export CGO_ENABLED := 1
# go-nvml's headers mark many NVML calls deprecated; the warnings are not ours.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations

.PHONY: all build dist-arch deps generate test fuzz lint staticcheck clean-tree report-sample bench engine demo validate install clean check-generated rules docs image dist kernels

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/bpfbench ./cmd/bpfbench
	@if [ -d cmd/llmsim ]; then $(GO) build -trimpath -o $(BIN)/llmsim ./cmd/llmsim; fi
	@if [ -f tools/cudastub/Makefile ]; then $(MAKE) -C tools/cudastub OUT=$(abspath $(BIN)); fi
	$(CC) -O2 -g -Wall -Wextra -pthread -o $(BIN)/barrierpool tools/barrierpool/barrierpool.c
	$(CC) -O2 -g -Wall -Wextra -pthread -o $(BIN)/condserver tools/condserver/condserver.c

# Regenerate the committed bpf2go bindings (*_bpfel.go, *_bpfel.o).
generate:
	$(GO) generate ./collectors/...

# Fails when the committed generated files differ from what `make generate` produces.
check-generated: generate
	@git diff --exit-code -- collectors/ || { echo "generated files are stale: run make generate and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- collectors/)" || { git status --porcelain -- collectors/; echo "untracked generated files: commit them"; exit 1; }

# The README's test command, run as root on a fresh machine: it installs
# the Debian packages the tests need (tools/ci/deps.sh, the missing ones
# only), builds the binaries and the real engine (tools/bench/engine,
# cached in /var/cache/bpfbench/llama), then runs every test. Privileged
# tests skip when not root unless BPFBENCH_REQUIRE_PRIVILEGED=1, which
# turns the skips into failures. The source tree is snapshot before the
# tests and checked after them, pass or fail: a test that writes into it
# fails the target (tools/ci/clean-tree.sh; CLEAN_TREE_SNAPSHOT names the
# snapshot file).
test: deps build engine
	bash tools/ci/clean-tree.sh snapshot
	rc=0; $(GO) test -count=1 -p 1 -timeout 40m ./... || rc=$$?; \
	bash tools/ci/clean-tree.sh check || rc=1; exit $$rc

# The Debian packages of the build and the tests, those missing only.
deps:
	bash tools/ci/deps.sh

# Every fuzz target (func FuzzX(f *testing.F) in any _test.go, found by
# grep), each run for FUZZTIME in turn: go fuzzes one target per
# invocation. `make test` runs their seeds. A failing input is written to
# its package's testdata/fuzz/FuzzX/ (commit it with the fix); the corpus
# grown while fuzzing stays in go's cache, outside the tree, which is
# checked as `make test` checks it. go minimizes every new input for up to
# a minute by default, which stalls a short run: FUZZFLAGS bounds it.
# FUZZTIME is a count of inputs (Nx), not a duration: with a duration, Go
# 1.26's fuzzing coordinator can fail a target with a bare "context
# deadline exceeded" and no failing input when its deadline passes while a
# worker is mid-input (go.dev/issue/75804, fixed in Go 1.27); a count has
# no deadline to race. 2000 inputs take 1-25 s a target here.
FUZZTIME     ?= 2000x
FUZZFLAGS    ?= -fuzzminimizetime=200x
FUZZ_SNAPSHOT ?= $(or $(TMPDIR),/tmp)/bpfbench-fuzz-tree.$(shell id -u)
fuzz:
	CLEAN_TREE_SNAPSHOT=$(FUZZ_SNAPSHOT) bash tools/ci/clean-tree.sh snapshot
	@failed=; for t in $$(grep -rEo --include='*_test.go' --exclude-dir=.git '^func Fuzz[A-Za-z0-9_]+[(]' . | \
			sed -E 's|^[.]/(.+)/[^/]+:func (Fuzz[A-Za-z0-9_]+)[(]$$|\1:\2|' | sort -u); do \
		echo "== $${t#*:} (./$${t%%:*}, $(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$${t#*:}\$$" -fuzztime $(FUZZTIME) $(FUZZFLAGS) ./$${t%%:*} || failed="$$failed $$t"; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz targets failed:$$failed (inputs in testdata/fuzz/ of each)"; exit 1; fi
	CLEAN_TREE_SNAPSHOT=$(FUZZ_SNAPSHOT) bash tools/ci/clean-tree.sh check

lint:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(MAKE) staticcheck

# staticcheck (a Go tool in go.mod), over every package.
STATICCHECK_PKGS ?= ./...
staticcheck:
	$(GO) tool staticcheck $(STATICCHECK_PKGS)

# Release artifacts in $(DIST) (ignored by git; the test builds into a
# temporary one), for each architecture of DIST_ARCHES (amd64 and arm64; the
# one not the host's cross-compiled, see ARCH): bpfbench and llmsim
# stripped (-s -w, -trimpath) for linux/ARCH, the .deb and .rpm (nfpm,
# deploy/package/nfpm.yaml); then a CycloneDX SBOM of bpfbench's modules
# (the same for both: no module is per architecture) and SHA256SUMS over
# all of them. Neither binary can be static: bpfbench needs cgo (go-nvml
# dlopens libnvidia-ml; internal/uprobecost's calibration functions are C),
# and llmsim opens the CUDA stub through purego, which needs the dynamic
# loader even without cgo; both link only glibc. The eBPF objects are
# generated for both (bpf2go -target amd64,arm64). SOURCE_DATE_EPOCH (the
# commit's time) fixes the packages' file times.
DIST           ?= dist
DIST_ARCHES    ?= amd64 arm64
PKG_ARCH       ?= $(ARCH)
# The tag without its "v"; commits past it "+N.gHASH", a prerelease
# ("-rc1") "~rc1"; untagged 0.0.0~git<revision>: dpkg and rpm put a
# prerelease before its release and an untagged build before any, and
# neither allows "-" in a version.
PKG_VERSION    ?= $(shell echo '$(VERSION)' | sed -E 's/^v([0-9]+[.])/\1/; /^[0-9]+[.][0-9]/!s/^/0.0.0~git/; \
                  s/-([0-9]+)-g([0-9a-f]+)/+\1.g\2/; s/([+].*)-dirty$$/\1.dirty/; s/-dirty$$/+dirty/; s/-/~/g')
# The project has no mail address: its issue tracker stands in for one.
PKG_MAINTAINER ?= bpfbench developers <https://github.com/bpfbench/bpfbench/issues>
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
NFPM_ENV        = DIST='$(DIST)' PKG_ARCH='$(PKG_ARCH)' PKG_VERSION='$(PKG_VERSION)' \
                  PKG_MAINTAINER='$(PKG_MAINTAINER)' SOURCE_DATE_EPOCH='$(SOURCE_DATE_EPOCH)'
dist:
	rm -rf $(DIST)/pkg
	rm -f $(DIST)/SHA256SUMS $(DIST)/*.deb $(DIST)/*.rpm $(DIST)/*.cdx.json $(DIST)/bpfbench-linux-* $(DIST)/llmsim-linux-*
	mkdir -p $(DIST)/pkg
	sed 's|^ExecStart=/usr/local/bin/bpfbench |ExecStart=/usr/bin/bpfbench |' systemd/bpfbench.service >$(DIST)/pkg/bpfbench.service
	grep -q '^ExecStart=/usr/bin/bpfbench ' $(DIST)/pkg/bpfbench.service
	cp README.md DESIGN.md $(DIST)/pkg/
	for a in $(DIST_ARCHES); do $(MAKE) --no-print-directory dist-arch ARCH=$$a PKG_ARCH=$$a || exit 1; done
	$(GO) tool cyclonedx-gomod app -json -noserial -std -main cmd/bpfbench -output $(DIST)/bpfbench.cdx.json
	cd $(DIST) && sha256sum bpfbench-linux-* llmsim-linux-* *.deb *.rpm bpfbench.cdx.json >SHA256SUMS
	@cat $(DIST)/SHA256SUMS

# One architecture's binaries and packages (make dist runs it per ARCH;
# nfpm itself runs on the host).
dist-arch:
	$(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' -o $(DIST)/bpfbench-linux-$(PKG_ARCH) ./cmd/bpfbench
	$(GO) build -trimpath -ldflags '-s -w' -o $(DIST)/llmsim-linux-$(PKG_ARCH) ./cmd/llmsim
	$(NFPM_ENV) GOARCH= CC=cc $(GO) tool nfpm package -f deploy/package/nfpm.yaml -p deb -t $(DIST)/
	$(NFPM_ENV) GOARCH= CC=cc $(GO) tool nfpm package -f deploy/package/nfpm.yaml -p rpm -t $(DIST)/

# The container image (deploy/Containerfile, built with buildah): the
# stripped binary of `make dist` on a root file system of four Debian
# packages unpacked by mmdebstrap (deploy/rootfs.sh): glibc, ldconfig, CA
# certificates, base-files. Needs mmdebstrap, buildah and a Debian mirror;
# no container registry. ARCH=arm64 builds the arm64 image (buildah
# --platform; running it here would need qemu-user-static, building not).
image: dist
	mkdir -p build
	deploy/rootfs.sh build/rootfs-$(ARCH).tar "" $(ARCH)
	buildah build -f deploy/Containerfile --platform linux/$(ARCH) --build-arg VERSION=$(VERSION) \
		--build-arg ROOTFS=build/rootfs-$(ARCH).tar \
		--build-arg BINARY=$(DIST)/bpfbench-linux-$(ARCH) -t bpfbench:$(VERSION)-$(ARCH) .

# The CLI reference in docs/cli, generated from the commands (TestCLIDocs
# fails when it is stale).
docs:
	$(GO) generate ./cmd/bpfbench

# The Prometheus rules of deploy/prometheus: syntax and the alerts' unit tests.
rules:
	promtool check rules deploy/prometheus/rules.yml
	promtool test rules deploy/prometheus/rules_test.yml

# Fails when anything is new in the source tree since the snapshot `make
# test` took (it runs this check itself; see tools/ci/clean-tree.sh).
clean-tree:
	bash tools/ci/clean-tree.sh check

# The report's HTML page and terminal summary of the sample results in
# exporter/report/reportsample/testdata (full, empty, failed), to look at.
REPORT_SAMPLES ?= report-samples
report-sample:
	$(GO) run ./exporter/report/reportsample -o $(REPORT_SAMPLES) exporter/report/reportsample/testdata/*.json

# llama.cpp's llama-server and a tiny random-weight model, built once into
# /var/cache/bpfbench/llama (about 10 minutes on 2 cores; cached after).
engine:
	bash tools/bench/engine/build.sh

bench: build engine
	$(GO) test -run '^$$' -bench . -benchtime 3s ./collectors/...

demo: build
	$(BIN)/bpfbench demo

# Injects CPU, disk, GPU and slow-client contention in turn into llmsim and
# prints the confusion matrix of injected cause against attributed cause.
validate: build
	$(BIN)/bpfbench validate --sim

# The kernel matrix: Debian's cloud kernels (5.10, 6.1, 6.12 amd64; 6.12
# arm64) booted under qemu TCG, each running bpfbench check and the
# privileged tests of tools/kernels/tests.txt (as root; see
# tools/kernels/README.md). KERNELS picks kernels ("5.10 6.1 6.12
# 6.12-arm64"; 6.12-arm64 runs under qemu-system-aarch64 with `make build
# ARCH=arm64`'s binaries), TESTS a regexp of test names.
kernels:
	KERNELS='$(or $(KERNELS),5.10 6.1 6.12 6.12-arm64)' TESTS='$(TESTS)' bash tools/kernels/kernels.sh

install: build
	install -D -m 0755 $(BIN)/bpfbench $(DESTDIR)$(PREFIX)/bin/bpfbench
	install -D -m 0644 systemd/bpfbench.service $(DESTDIR)/etc/systemd/system/bpfbench.service
	install -D -m 0644 systemd/bpfbench.sysusers $(DESTDIR)/usr/lib/sysusers.d/bpfbench.conf
	install -D -m 0644 systemd/bpfbench.tmpfiles $(DESTDIR)/usr/lib/tmpfiles.d/bpfbench.conf
	install -D -m 0644 deploy/prometheus/rules.yml $(DESTDIR)/etc/prometheus/rules.d/bpfbench.yml
	install -D -m 0644 deploy/grafana/bpfbench.json $(DESTDIR)/usr/share/bpfbench/grafana/bpfbench.json
	@if [ ! -e $(DESTDIR)/etc/bpfbench/config.yaml ]; then install -D -m 0644 systemd/config.yaml $(DESTDIR)/etc/bpfbench/config.yaml; fi

clean:
	rm -rf $(BIN)
