package daemon

// Reloading the configuration (SIGHUP, POST /-/reload), the session API's
// exposure and allow-list, and the warnings of the target refresh.

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/bpfbench/bpfbench/agent"
	"github.com/bpfbench/bpfbench/session"
)

// checkAgentExposure refuses to serve the session API, which starts eBPF
// sessions on the node's processes, where it could be reached without
// credentials over plain HTTP: an address other than loopback needs a web
// configuration with TLS and basic auth (or verified client
// certificates), unless insecure (--agent.insecure) says so.
func checkAgentExposure(listen, webConfig string, insecure bool) error {
	if insecure || loopback(listen) {
		return nil
	}
	fix := "give --web.config.file (or web_config_file) an exporter-toolkit web configuration with tls_server_config and basic_auth_users, " +
		"listen on loopback only (--web.listen-address 127.0.0.1:9464), or start the daemon with --agent.insecure to serve it as it is"
	if webConfig == "" {
		return fmt.Errorf("agent.enabled: the session API would be served on %s without TLS or authentication, so anyone reaching the port could follow the node's processes: %s", listen, fix)
	}
	tls, auth, err := webConfigSecures(webConfig)
	if err != nil {
		return fmt.Errorf("agent.enabled: reading the web configuration %s: %w", webConfig, err)
	}
	var missing []string
	if !tls {
		missing = append(missing, "TLS (tls_server_config)")
	}
	if !auth {
		missing = append(missing, "authentication (basic_auth_users, or client_auth_type: RequireAndVerifyClientCert)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("agent.enabled: the web configuration %s has no %s for the session API on %s: %s", webConfig, strings.Join(missing, " and no "), listen, fix)
	}
	return nil
}

// loopback reports whether a listen address accepts connections from
// this host only.
func loopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// webConfigSecures reads what an exporter-toolkit web configuration
// turns on: TLS, and authentication of the client.
func webConfigSecures(path string) (tls, auth bool, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return false, false, err
	}
	var wc struct {
		TLS struct {
			Cert       string `yaml:"cert"`
			CertFile   string `yaml:"cert_file"`
			ClientAuth string `yaml:"client_auth_type"`
		} `yaml:"tls_server_config"`
		Users map[string]string `yaml:"basic_auth_users"`
	}
	if err := yaml.Unmarshal(b, &wc); err != nil {
		return false, false, err
	}
	tls = wc.TLS.Cert != "" || wc.TLS.CertFile != ""
	auth = len(wc.Users) > 0 || tls && wc.TLS.ClientAuth == "RequireAndVerifyClientCert"
	return tls, auth, nil
}

// setAllow gives the session API its allow-list and says what it allows.
func (d *Daemon) setAllow(a AgentAllow) {
	d.mu.Lock()
	api := d.api
	d.mu.Unlock()
	if api == nil {
		return
	}
	allow := agent.Allow{Comms: a.Comms, Cgroups: a.Cgroups, Targets: a.Targets, InTargets: d.inTargets}
	api.SetAllow(allow)
	if allow.Empty() {
		d.log.Warn("agent.allow is empty: the session API refuses every session; list the comms, cgroups or targets its sessions may follow under agent.allow")
		return
	}
	d.log.Info("the session API follows only what agent.allow lists", "allow", allow.String())
}

// inTargets is the agent's Allow.InTargets: whether pid is a process of
// one of the named targets, by the last refresh or, for pid, comm and
// cgroup targets, by its selector now (a process started since).
func (d *Daemon) inTargets(pid int, names []string) bool {
	d.mu.Lock()
	targets := d.cfg.Targets
	slot, assigned := d.assigned[uint32(pid)]
	owner, owned := d.slots.owners[slot]
	d.mu.Unlock()
	for i, t := range targets {
		if !slices.Contains(names, t.Name) {
			continue
		}
		if assigned && (owned && owner.target == i || !owned && int(slot) == i+1) {
			return true
		}
		if d.matchProcess(t, pid) {
			return true
		}
	}
	return false
}

// matchProcess reports whether a pid, comm or cgroup target selects pid.
func (d *Daemon) matchProcess(t Target, pid int) bool {
	dir := d.procDir() + "/" + strconv.Itoa(pid)
	switch {
	case t.Pid != 0:
		return t.Pid == pid
	case t.Comm != "":
		b, err := os.ReadFile(dir + "/comm")
		return err == nil && strings.TrimSpace(string(b)) == t.Comm
	case t.Cgroup != "":
		for _, cg := range readCgroups(dir + "/cgroup") {
			if cg == t.Cgroup || strings.HasPrefix(cg, strings.TrimSuffix(t.Cgroup, "/")+"/") {
				return true
			}
		}
	}
	return false
}

func (d *Daemon) procDir() string {
	if d.proc == "" {
		return "/proc"
	}
	return d.proc
}

// ReloadConfig reads the configuration again (SetConfigLoader) and
// applies it; a configuration that does not load or apply leaves the one
// in effect, and the error says why (it is logged too).
func (d *Daemon) ReloadConfig() error {
	var err error
	var cfg Config
	if d.loader == nil {
		err = errors.New("the daemon was started without --config: there is no configuration file to read again")
	} else if cfg, err = d.loader(); err == nil {
		err = d.Reload(cfg)
	}
	if err != nil {
		d.log.Error("reloading the configuration: keeping the one in effect", "err", err)
	}
	return err
}

// serveReload is POST /-/reload, as Prometheus' lifecycle endpoint: 200
// once the new configuration is in effect, 500 with the reason when the
// one in effect is kept.
func (d *Daemon) serveReload(w http.ResponseWriter, _ *http.Request) {
	if err := d.ReloadConfig(); err != nil {
		http.Error(w, "reloading the configuration: "+err.Error()+"; the configuration in effect is kept", http.StatusInternalServerError)
		return
	}
	fmt.Fprintln(w, "bpfbench configuration reloaded.")
}

// Reload applies cfg without stopping a collector: its targets (the
// refresh that follows at once gives their processes to the collectors),
// log_level, refresh_interval, agent.allow and live.enabled (the live
// sessions follow at once). The keys only a restart
// changes (the listener, its web configuration, log_format,
// enable_pprof, kubernetes, agent.enabled and the agent's limits) are
// named in a warning. An invalid cfg changes nothing.
func (d *Daemon) Reload(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		return fmt.Errorf("log_level %q: use debug, info, warn or error", cfg.LogLevel)
	}
	d.refreshMu.Lock()
	defer d.refreshMu.Unlock()
	old := d.cfg
	restart := restartKeys(old, cfg)
	if d.level != nil {
		d.level.Set(level)
	}
	d.mu.Lock()
	if !reflect.DeepEqual(old.Targets, cfg.Targets) {
		d.retarget(old.Targets, cfg.Targets)
	}
	d.cfg.Targets, d.cfg.LogLevel, d.cfg.RefreshInterval, d.cfg.Agent.Allow = cfg.Targets, cfg.LogLevel, cfg.RefreshInterval, cfg.Agent.Allow
	d.cfg.Live = cfg.Live
	if !kubernetesTargets(cfg.Targets) {
		d.pods = nil
	} else if d.pods == nil {
		d.pods = newPodSource(d.cfg, d.log)
		d.pods.log = d.log // already the daemon's component
	}
	d.mu.Unlock()
	d.interval.Store(int64(cfg.RefreshInterval))
	d.setAllow(cfg.Agent.Allow)
	d.checkTargets(cfg.Targets)
	names := make([]string, len(cfg.Targets))
	for i, t := range cfg.Targets {
		names[i] = t.Name
	}
	d.log.Info("configuration reloaded", "targets", names, "log_level", cfg.LogLevel, "refresh_interval", cfg.RefreshInterval)
	if len(restart) > 0 {
		d.log.Warn("configuration changed where only a restart applies it: the values in effect are kept", "keys", restart)
	}
	d.warned.reset()
	d.views.resetWarnings()
	d.refreshLocked()
	d.syncLive()
	return nil
}

// restartKeys names the keys that differ between old and cur and that
// only a restart applies.
func restartKeys(old, cur Config) []string {
	var out []string
	for _, k := range []struct {
		name     string
		old, cur any
	}{
		{"listen_address", old.ListenAddress, cur.ListenAddress},
		{"web_config_file", old.WebConfigFile, cur.WebConfigFile},
		{"log_format", old.LogFormat, cur.LogFormat},
		{"enable_pprof", old.Pprof, cur.Pprof},
		{"kubernetes", old.Kubernetes, cur.Kubernetes},
		{"agent.enabled", old.Agent.Enabled, cur.Agent.Enabled},
		{"agent.max_sessions", old.Agent.MaxSessions, cur.Agent.MaxSessions},
		{"agent.max_buffer_spans", old.Agent.MaxBufferSpans, cur.Agent.MaxBufferSpans},
		{"agent.idle_timeout", old.Agent.IdleTimeout, cur.Agent.IdleTimeout},
		{"agent.read_timeout", old.Agent.ReadTimeout, cur.Agent.ReadTimeout},
		{"incidents", old.Incidents, cur.Incidents},
	} {
		if !reflect.DeepEqual(k.old, k.cur) {
			out = append(out, k.name)
		}
	}
	return out
}

// retarget moves the slots from the targets old to cur (under d.mu and
// refreshMu). A target whose place, name and selector are unchanged keeps
// its slot, its pod containers theirs, and their series go on. Every
// other process leaves its slot now; a target slot that changes owner is
// read for a baseline, so that the new target's series start at zero as
// a pod container's do (slots.go); a pod container that loses its slot
// gets one at the next refresh, read the same way.
func (d *Daemon) retarget(old, cur []Target) {
	kept := func(i int) bool { return i < len(old) && i < len(cur) && reflect.DeepEqual(old[i], cur[i]) }
	keepsSlot := func(slot uint32) bool {
		if o, ok := d.slots.owners[slot]; ok {
			return kept(o.target) && int(slot) > len(cur)
		}
		return kept(int(slot) - 1)
	}
	for tgid, slot := range d.assigned {
		if keepsSlot(slot) {
			continue
		}
		for _, h := range d.hosts {
			if err := h.DeleteTarget(tgid); err != nil {
				d.log.Debug("removing a process from its old target", "collector", h.Name(), "pid", tgid, "err", err)
			}
		}
		delete(d.assigned, tgid)
	}
	for slot, o := range d.slots.owners {
		if !keepsSlot(slot) {
			delete(d.slots.owners, slot)
			delete(d.slots.byOwner, o)
			delete(d.slots.base, slot)
		}
	}
	var capture []uint32
	for i := range cur {
		slot := uint32(i + 1)
		if kept(i) {
			continue
		}
		delete(d.slots.tbase, slot)
		if i < len(old) || d.slots.used[slot] {
			capture = append(capture, slot)
		}
	}
	for i := len(cur); i < len(old); i++ {
		// A target's slot that joins the pool: its next owner reads a
		// baseline.
		d.slots.used[uint32(i+1)] = true
		delete(d.slots.tbase, uint32(i+1))
	}
	if len(capture) > 0 {
		d.view.Store(d.slots.view(cur, capture))
		for slot, base := range baselines(d.cols, capture) {
			d.slots.tbase[slot] = base
		}
	}
	d.view.Store(d.slots.view(cur, nil))
}

// checkTargets warns of targets that cannot match: a pid that is a
// kernel thread, a cgroup whose directory does not exist.
func (d *Daemon) checkTargets(targets []Target) {
	for _, t := range targets {
		switch {
		case t.Pid != 0:
			if session.KernelThreadIn(d.procDir(), t.Pid) {
				d.log.Warn("target pid is a kernel thread: it runs no user code, so its series stay empty; give the server's pid, comm or cgroup", "target", t.Name, "pid", t.Pid)
			}
		case t.Cgroup != "":
			if root, ok := d.cgroupExists(t.Cgroup); !ok {
				d.log.Warn("target cgroup does not exist: its series stay empty until it does; give the path /proc/PID/cgroup shows for the server", "target", t.Name, "cgroup", t.Cgroup, "cgroup_fs", root)
			}
		}
	}
}

// cgroupExists looks for cgroup path p under the cgroup file system: the
// unified hierarchy's directory or a v1 hierarchy's. With no cgroup file
// system to look in, it says the path exists.
func (d *Daemon) cgroupExists(p string) (string, bool) {
	root := d.cgroupFS
	if root == "" {
		root = "/sys/fs/cgroup"
	}
	if _, err := os.Stat(root); err != nil {
		return root, true
	}
	if _, err := os.Stat(filepath.Join(root, p)); err == nil {
		return root, true
	}
	hier, _ := filepath.Glob(filepath.Join(root, "*"))
	for _, h := range hier {
		if _, err := os.Stat(filepath.Join(h, p)); err == nil {
			return root, true
		}
	}
	return root, false
}

// targetError logs a collector's refusal of a target process: at debug
// level when the process has exited since the scan (normal churn), else
// once per target, collector and warnEvery.
func (d *Daemon) targetError(what, collector string, tgid, slot uint32, err error) {
	if _, serr := os.Stat(d.procDir() + "/" + strconv.Itoa(int(tgid))); serr != nil {
		d.log.Debug(what+": the process has exited", "collector", collector, "pid", tgid, "err", err)
		return
	}
	target, _, _ := strings.Cut(d.view.Load().names[slot], "/")
	if n, ok := d.warned.allow(what + "\x00" + collector + "\x00" + target); ok {
		d.log.Warn(what, "collector", collector, "target", target, "pid", tgid, "err", agent.ExplainPermission(err.Error()), "suppressed", n)
	}
}

// warnEvery is how often one repeated warning of the refresh is logged.
const warnEvery = 5 * time.Minute

// warnLimiter lets a warning through once per key and warnEvery, and
// counts those it held back.
type warnLimiter struct {
	mu   sync.Mutex
	last map[string]time.Time
	held map[string]int
}

// allow reports whether the warning key is logged now, and how many were
// held back since it last was.
func (w *warnLimiter) allow(key string) (int, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last == nil {
		w.last, w.held = map[string]time.Time{}, map[string]int{}
	}
	if t, ok := w.last[key]; ok && time.Since(t) < warnEvery {
		w.held[key]++
		return 0, false
	}
	n := w.held[key]
	w.last[key], w.held[key] = time.Now(), 0
	return n, true
}

// reset forgets what was logged (a reload: every warning may be new).
func (w *warnLimiter) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last, w.held = nil, nil
}
