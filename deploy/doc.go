// Package deploy holds what an operator installs next to `bpfbench daemon`:
// the Grafana dashboard (grafana/bpfbench.json) and the Prometheus
// recording and alerting rules (prometheus/rules.yml, unit-tested by
// prometheus/rules_test.yml). It has no Go code of its own; its tests check
// the dashboard's model, run promtool on the rules, and evaluate every
// PromQL expression of both on a real Prometheus server scraping a real
// daemon that follows real processes.
//
// The Helm chart (helm/bpfbench) carries copies of the dashboard and the
// rules (a chart reads no file outside its directory); `go generate
// ./deploy` makes them again, and a test fails while they differ.
//
// It also holds how bpfbench is shipped: the .deb and .rpm configuration
// (package/nfpm.yaml and the maintainer scripts beside it, built by `make
// dist`) and the image (Containerfile, on the root rootfs.sh makes).
// TestDist runs `make dist` into a temporary directory and checks the
// packages, binaries, SHA256SUMS and SBOM it writes.
package deploy

//go:generate cp prometheus/rules.yml helm/bpfbench/files/rules.yml
//go:generate cp grafana/bpfbench.json helm/bpfbench/files/bpfbench.json
