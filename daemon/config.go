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
}

// Target selects processes whose metrics carry target="Name". Exactly
// one selector is set.
type Target struct {
	Name string `yaml:"name"`
	// Pid follows one process.
	Pid int `yaml:"pid"`
	// Comm follows every process whose command name (/proc/PID/comm) is this.
	Comm string `yaml:"comm"`
	// Cgroup follows every process in this cgroup path or below it
	// (as in /proc/PID/cgroup, e.g. /system.slice/vllm.service).
	Cgroup string `yaml:"cgroup"`
}

// MaxConfigTargets is the number of target slots (slot 0 is the host).
const MaxConfigTargets = 63

var labelValueRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)

// DefaultConfig is used when no file is given.
func DefaultConfig() Config {
	return Config{ListenAddress: ":9464", LogLevel: "info", LogFormat: "text", RefreshInterval: 5 * time.Second}
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
		if n != 1 {
			return fmt.Errorf("%s (%s): set exactly one of pid, comm or cgroup", where, t.Name)
		}
	}
	return nil
}
