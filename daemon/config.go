// Package daemon is the host daemon of `bpfbench daemon` (the systemd
// service): its configuration, the resolution of configured targets against
// /proc, and the lifecycle of the host collectors, whose aggregates it serves
// to Prometheus through exporter/prom. It follows no single session and
// drives no load: it links neither the load generator nor the perturbations.
package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config is the daemon's configuration file (YAML).
type Config struct {
	// ListenAddress is where /metrics is served (the flag overrides it).
	ListenAddress string `yaml:"listen_address"`
	// WebConfigFile is exporter-toolkit's TLS and basic auth file.
	WebConfigFile string `yaml:"web_config_file"`
	LogLevel      string `yaml:"log_level"`
	LogFormat     string `yaml:"log_format"`
	// RefreshInterval is how often targets are matched against /proc.
	RefreshInterval time.Duration `yaml:"refresh_interval"`
	Targets         []Target      `yaml:"targets"`
	// Pprof serves the Go runtime's profiles under /debug/pprof/ (behind
	// the same web configuration as /metrics).
	Pprof bool `yaml:"enable_pprof"`
	// Kubernetes says where the pods of this node are listed, for targets
	// with Kubernetes selectors (k8s.go).
	Kubernetes Kubernetes `yaml:"kubernetes"`
	// Agent serves the session API (package agent) on the same listener
	// and behind the same web configuration as /metrics, for
	// `bpfbench run --agent`.
	Agent Agent `yaml:"agent"`
	// Live runs the live view of every target (live.go).
	Live Live `yaml:"live"`
	// Incidents keeps a flight recorder on every live target and writes
	// an incident bundle when its rule fires (incidents.go).
	Incidents Incidents `yaml:"incidents"`
}

// Incidents configures the flight recorder of every live target and the
// bundles it leaves: on by default, with the default rule (a target's
// token-gap p99 at least 3× its normal p99 for 30 s). Zero values take
// the defaults below.
type Incidents struct {
	Enabled bool `yaml:"enabled"`
	// Dir is the spool (default /var/lib/bpfbench/incidents, the unit's
	// StateDirectory); Keep and MaxBytes its retention (50 bundles, 256
	// MiB), the oldest bundle removed whole first.
	Dir      string `yaml:"dir"`
	Keep     int    `yaml:"keep"`
	MaxBytes int64  `yaml:"max_bytes"`
	// RecorderWindow is how far back a target's recorder keeps gaps (2m),
	// RecorderBytes its memory bound (32 MiB, the oldest evicted first).
	RecorderWindow time.Duration `yaml:"recorder_window"`
	RecorderBytes  int           `yaml:"recorder_bytes"`
	// After is how long after the trigger the window goes on (30s).
	After time.Duration `yaml:"after"`
	// Cooldown is the least time between two incidents of a target by its
	// rule (10m); MaxPerHour bounds every target's incidents in an hour,
	// requests included (6).
	Cooldown   time.Duration `yaml:"cooldown"`
	MaxPerHour int           `yaml:"max_per_hour"`
	// Rule is every target's rule, Targets a target's own by name.
	Rule    *IncidentRule           `yaml:"rule"`
	Targets map[string]IncidentRule `yaml:"targets"`
}

// IncidentRule is when a target's recent token gaps are an incident:
// every criterion set holds over the gaps of the last `over`, at every
// check for `for` (live.Trigger).
type IncidentRule struct {
	// P99Ms: the recent gaps' p99 above this many ms.
	P99Ms float64 `yaml:"p99_ms"`
	// P99TimesNormal: the recent p99 at least this many times the normal
	// gap's p99 (the live view's rolling baseline).
	P99TimesNormal float64 `yaml:"p99_times_normal"`
	// Cause and Share: the cause's share of the recent slowest gaps'
	// excess over the normal gap at least share (0-1), e.g. cpu_runqueue
	// and 0.5, the condition of the alert BpfbenchTokenGapRunqueueShare.
	Cause string  `yaml:"cause"`
	Share float64 `yaml:"share"`
	// For (30s), Over (10s) and MinGaps (20): how long it holds, the
	// recent window judged, the fewest gaps judged.
	For     time.Duration `yaml:"for"`
	Over    time.Duration `yaml:"over"`
	MinGaps int           `yaml:"min_gaps"`
}

// Live is the live view's switch: a session on each target's processes
// that follows its own traffic (no load generator), walks each gap
// between two writes of a response stream back along its critical path,
// and exports the gaps, the times to first byte and the blame by cause
// (bpfbench_token_gap_*). On by default; each target's session loads the
// session's eBPF programs once more.
type Live struct {
	Enabled bool `yaml:"enabled"`
}

// Agent is the session API's switch, what it may follow, and its limits.
// Zero limits take the agent package's defaults (4 sessions, 65536
// buffered spans each, 30 s idle, 10 s to send a request's body).
type Agent struct {
	// Enabled serves the API. A session attaches eBPF programs to a
	// process of this node on a client's request: the daemon refuses to
	// serve it on an address other than loopback without a web
	// configuration with TLS and basic auth (or client certificates),
	// unless started with --agent.insecure.
	Enabled bool `yaml:"enabled"`
	// Allow is what sessions may follow; empty, nothing (every start is
	// answered 403).
	Allow AgentAllow `yaml:"allow"`
	// MaxSessions bounds the sessions at once; beyond it starts get 429.
	MaxSessions int `yaml:"max_sessions"`
	// MaxBufferSpans bounds each session's spans waiting for its client
	// (the oldest are dropped and counted beyond it).
	MaxBufferSpans int `yaml:"max_buffer_spans"`
	// IdleTimeout stops a session no client has streamed for this long.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// ReadTimeout bounds the time a client takes to send a session
	// request's body; past it the connection is closed.
	ReadTimeout time.Duration `yaml:"read_timeout"`
}

// AgentAllow lists what the agent's sessions may follow: a process whose
// command name (/proc/PID/comm) is one of Comms, one in one of Cgroups
// or below it (as /proc/PID/cgroup writes it), or one of the daemon's
// targets named in Targets. Whatever it lists, the daemon's own process
// and kernel threads are never followed.
type AgentAllow struct {
	Comms   []string `yaml:"comms"`
	Cgroups []string `yaml:"cgroups"`
	Targets []string `yaml:"targets"`
}

// Empty reports whether a allows nothing.
func (a AgentAllow) Empty() bool {
	return len(a.Comms) == 0 && len(a.Cgroups) == 0 && len(a.Targets) == 0
}

// MaxAgentSessions is the largest agent.max_sessions accepted.
const MaxAgentSessions = 64

// Kubernetes is how the daemon lists the pods of its node. Every field has
// an in-cluster default, so a DaemonSet that sets NODE_NAME from
// spec.nodeName needs none of them.
type Kubernetes struct {
	// NodeName is the node whose pods are listed; empty: $NODE_NAME.
	NodeName string `yaml:"node_name"`
	// APIServer is the API server's URL; empty: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT.
	APIServer string `yaml:"api_server"`
	// TokenFile is the bearer token, read again on every request
	// (projected tokens rotate); empty: the service account's.
	TokenFile string `yaml:"token_file"`
	// CAFile verifies the API server; empty: the service account's ca.crt.
	CAFile string `yaml:"ca_file"`
	// RefreshInterval is how often the pods are listed; zero: the
	// daemon's refresh_interval.
	RefreshInterval time.Duration `yaml:"refresh_interval"`
}

// Target selects processes whose metrics carry target="Name". Exactly
// one selector is set: pid, comm, cgroup, or the Kubernetes selectors
// (namespace, pod_labels and container, any of them; all that are set
// must match).
type Target struct {
	Name string `yaml:"name"`
	// Pid follows one process.
	Pid int `yaml:"pid"`
	// Comm follows every process whose command name (/proc/PID/comm) is this.
	Comm string `yaml:"comm"`
	// Cgroup follows every process in this cgroup path or below it
	// (as in /proc/PID/cgroup, e.g. /system.slice/vllm.service).
	Cgroup string `yaml:"cgroup"`

	// Namespace follows the containers of the pods in this namespace.
	Namespace string `yaml:"namespace"`
	// PodLabels follows the containers of the pods carrying every one of
	// these labels.
	PodLabels map[string]string `yaml:"pod_labels"`
	// Container follows only the containers of this name.
	Container string `yaml:"container"`
	// MaxPods bounds the pod containers of a Kubernetes target given a
	// slot, and series with their namespace, pod and container labels, of
	// their own (DefaultMaxPods when zero); beyond it (or when the slots
	// run out) they are folded into the target's series without pod and
	// container and counted in bpfbench_target_pods_overflow (slots.go).
	MaxPods int `yaml:"max_pods"`
}

// Kubernetes reports whether t selects pods.
func (t Target) Kubernetes() bool {
	return t.Namespace != "" || len(t.PodLabels) > 0 || t.Container != ""
}

// PodLimit is the number of pod containers of t with a slot of their own.
func (t Target) PodLimit() int {
	if t.MaxPods == 0 {
		return DefaultMaxPods
	}
	return t.MaxPods
}

// DefaultMaxPods is a Kubernetes target's max_pods when none is set;
// MaxPodsLimit is the largest accepted.
const (
	DefaultMaxPods = 16
	MaxPodsLimit   = 256
)

// MaxConfigTargets is the number of target slots (slot 0 is the host).
const MaxConfigTargets = 63

var (
	labelValueRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)
	// A namespace or container name: an RFC 1123 label.
	dnsLabelRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	// A label key: an optional DNS subdomain prefix and a name.
	podLabelKeyRE   = regexp.MustCompile(`^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)
	podLabelValueRE = regexp.MustCompile(`^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$`)
)

// DefaultConfig is used when no file is given.
func DefaultConfig() Config {
	return Config{ListenAddress: ":9464", LogLevel: "info", LogFormat: "text", RefreshInterval: 5 * time.Second,
		Live: Live{Enabled: true}, Incidents: Incidents{Enabled: true}}
}

// LoadConfig reads and validates a configuration file. Unknown keys are errors.
func LoadConfig(path string) (Config, error) {
	cfg := DefaultConfig()
	b, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("reading config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// Validate checks a configuration and says what to change.
func (c *Config) Validate() error {
	if c.RefreshInterval <= 0 {
		return fmt.Errorf("refresh_interval must be positive, e.g. 5s")
	}
	if len(c.Targets) > MaxConfigTargets {
		return fmt.Errorf("%d targets configured; at most %d are supported", len(c.Targets), MaxConfigTargets)
	}
	seen := map[string]bool{"host": true}
	for i, t := range c.Targets {
		where := fmt.Sprintf("targets[%d]", i)
		if !labelValueRE.MatchString(t.Name) {
			return fmt.Errorf("%s: name %q must be 1-64 characters of letters, digits, _ . : -", where, t.Name)
		}
		if seen[t.Name] {
			return fmt.Errorf("%s: name %q is used twice (or is the reserved name host)", where, t.Name)
		}
		seen[t.Name] = true
		n := 0
		if t.Pid != 0 {
			n++
			if t.Pid < 0 {
				return fmt.Errorf("%s (%s): pid %d is not a process id", where, t.Name, t.Pid)
			}
		}
		if t.Comm != "" {
			n++
			if len(t.Comm) > 15 {
				return fmt.Errorf("%s (%s): comm %q is longer than the kernel's 15 characters; use its first 15", where, t.Name, t.Comm)
			}
		}
		if t.Cgroup != "" {
			n++
			if !strings.HasPrefix(t.Cgroup, "/") {
				return fmt.Errorf("%s (%s): cgroup %q must be an absolute cgroup path like /system.slice/vllm.service", where, t.Name, t.Cgroup)
			}
		}
		if t.Kubernetes() {
			n++
			if err := t.validateKubernetes(); err != nil {
				return fmt.Errorf("%s (%s): %w", where, t.Name, err)
			}
		} else if t.MaxPods != 0 {
			return fmt.Errorf("%s (%s): max_pods applies to targets with namespace, pod_labels or container", where, t.Name)
		}
		if n != 1 {
			return fmt.Errorf("%s (%s): set exactly one of pid, comm or cgroup, or the Kubernetes selectors (namespace, pod_labels, container)", where, t.Name)
		}
	}
	if a := c.Agent; a.MaxSessions < 0 || a.MaxSessions > MaxAgentSessions {
		return fmt.Errorf("agent.max_sessions %d must be between 1 and %d (0: the default, 4)", a.MaxSessions, MaxAgentSessions)
	}
	if c.Agent.MaxBufferSpans < 0 {
		return fmt.Errorf("agent.max_buffer_spans must not be negative (0: the default, 65536)")
	}
	if c.Agent.IdleTimeout < 0 {
		return fmt.Errorf("agent.idle_timeout must not be negative (0: the default, 30s)")
	}
	if c.Agent.ReadTimeout < 0 {
		return fmt.Errorf("agent.read_timeout must not be negative (0: the default, 10s)")
	}
	if err := c.Agent.Allow.validate(seen); err != nil {
		return err
	}
	if c.Kubernetes.RefreshInterval < 0 {
		return fmt.Errorf("kubernetes.refresh_interval must not be negative (0: the daemon's refresh_interval)")
	}
	return c.Incidents.validate(seen)
}

func (in Incidents) validate(targets map[string]bool) error {
	if in.Keep < 0 || in.MaxBytes < 0 || in.RecorderWindow < 0 || in.RecorderBytes < 0 || in.After < 0 || in.Cooldown < 0 || in.MaxPerHour < 0 {
		return fmt.Errorf("incidents: keep, max_bytes, recorder_window, recorder_bytes, after, cooldown and max_per_hour must not be negative (0: the default)")
	}
	if in.Rule != nil {
		if err := in.Rule.check(); err != nil {
			return fmt.Errorf("incidents.rule: %w", err)
		}
	}
	for name, r := range in.Targets {
		if !targets[name] || name == "host" {
			return fmt.Errorf("incidents.targets: %q is not the name of a configured target", name)
		}
		if err := r.check(); err != nil {
			return fmt.Errorf("incidents.targets.%s: %w", name, err)
		}
	}
	return nil
}

// validate checks agent.allow; targets are the configured target names.
func (a AgentAllow) validate(targets map[string]bool) error {
	for _, c := range a.Comms {
		if c == "" || len(c) > 15 {
			return fmt.Errorf("agent.allow.comms: %q must be a command name of 1-15 characters, as /proc/PID/comm shows it", c)
		}
	}
	for _, c := range a.Cgroups {
		if !strings.HasPrefix(c, "/") {
			return fmt.Errorf("agent.allow.cgroups: %q must be an absolute cgroup path like /system.slice/vllm.service", c)
		}
	}
	for _, t := range a.Targets {
		if !targets[t] || t == "host" {
			return fmt.Errorf("agent.allow.targets: %q is not the name of a configured target", t)
		}
	}
	return nil
}

func (t Target) validateKubernetes() error {
	if t.Namespace != "" && !dnsLabelRE.MatchString(t.Namespace) {
		return fmt.Errorf("namespace %q is not a Kubernetes namespace name (lower-case letters, digits and -)", t.Namespace)
	}
	if t.Container != "" && !dnsLabelRE.MatchString(t.Container) {
		return fmt.Errorf("container %q is not a Kubernetes container name (lower-case letters, digits and -)", t.Container)
	}
	for k, v := range t.PodLabels {
		if !podLabelKeyRE.MatchString(k) {
			return fmt.Errorf("pod_labels: %q is not a Kubernetes label key", k)
		}
		if !podLabelValueRE.MatchString(v) {
			return fmt.Errorf("pod_labels: %s=%q is not a Kubernetes label value", k, v)
		}
	}
	if t.MaxPods < 0 || t.MaxPods > MaxPodsLimit {
		return fmt.Errorf("max_pods %d must be between 1 and %d (0: %d)", t.MaxPods, MaxPodsLimit, DefaultMaxPods)
	}
	return nil
}
