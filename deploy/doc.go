// Package deploy holds what an operator installs next to `bpfbench daemon`:
// the Grafana dashboard (grafana/bpfbench.json) and the Prometheus
// recording and alerting rules (prometheus/rules.yml, unit-tested by
// prometheus/rules_test.yml). It has no Go code of its own; its tests check
// the dashboard's model, run promtool on the rules, and evaluate every
// PromQL expression of both on a real Prometheus server scraping a real
// daemon that follows real processes.
package deploy
