package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/prometheus/client_golang/prometheus"
	promcollectors "github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/bpfbench/bpfbench/agent"
	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/collectors/bpfutil"
	"github.com/bpfbench/bpfbench/exporter/prom"
	"github.com/bpfbench/bpfbench/incident"
	"github.com/bpfbench/bpfbench/internal/version"
	"github.com/bpfbench/bpfbench/session"
)

// HostFactory builds one of the daemon's collectors.
type HostFactory struct {
	Name string
	// Required collectors stop the daemon from starting when they fail;
	// the others are logged and left out.
	Required bool
	New      func(*slog.Logger, collectors.TargetNames) collectors.Host
}

// Daemon runs host collectors and serves their metrics.
type Daemon struct {
	cfg       Config
	log       *slog.Logger
	factories []HostFactory
	hosts     []collectors.Host
	reg       *prometheus.Registry

	// refreshMu serialises refreshes and reloads; mu guards what scrapes
	// and the agent read of the configuration and the slots.
	refreshMu sync.Mutex
	mu        sync.Mutex
	assigned  map[uint32]uint32 // tgid -> slot, as set in the kernel
	procs     map[int]int       // target index -> processes
	// Kubernetes targets: the pods of the node (k8s.go), the slots of
	// their pod containers (slots.go), and what the last refresh gave them.
	pods   *podSource
	slots  slotTable
	owned  map[int][]PodContainer
	folded map[int]int
	// view is the slots' names and labels as scrapes see them; cols are
	// the collectors as registered, relabelled through it.
	view atomic.Pointer[slotView]
	cols []*slotCollector
	// pool is the highest slot given to pod containers (MaxConfigTargets).
	pool uint32

	listening chan net.Addr
	refreshed atomic.Bool // targets resolved at least once

	// inc writes the incidents of the live targets (nil: off).
	inc *incident.Manager

	// sections build the sessions of the agent API (agent.enabled).
	sections []session.SectionFactory
	// agentPods lists the pods for the agent API's pod targets: pods,
	// or a source of its own made at the first pod target (agentpods.go).
	agentPods     *podSource
	agentPodsOnce sync.Once
	// proc is where processes are read ("" is /proc; tests set it);
	// cgroupFS where cgroup directories are ("" is /sys/fs/cgroup).
	proc, cgroupFS string

	// api is the session API (agent.enabled), insecure lets it be served
	// without a web configuration on any address (--agent.insecure).
	api      *agent.Server
	insecure bool
	// level is the logger's level, set again on reload (nil: fixed).
	level *slog.LevelVar
	// loader reads the configuration again for a reload (nil: none).
	loader func() (Config, error)
	// interval is the refresh interval in effect (a reload may change it).
	interval atomic.Int64
	// warned limits the refresh's repeated warnings.
	warned warnLimiter
	// views are the targets' live sessions and figures (live.go).
	views *liveViews
}

// SetAgentInsecure lets the daemon serve the session API without a web
// configuration on an address other than loopback (--agent.insecure).
func (d *Daemon) SetAgentInsecure(insecure bool) { d.insecure = insecure }

// SetLogLevel gives the daemon its logger's level, which a reload sets
// from log_level.
func (d *Daemon) SetLogLevel(l *slog.LevelVar) { d.level = l }

// SetConfigLoader gives the daemon what reads its configuration again on
// a reload (SIGHUP, POST /-/reload): the file, with the command line's
// overrides applied.
func (d *Daemon) SetConfigLoader(load func() (Config, error)) { d.loader = load }

// SetSessionSections gives the daemon the sections the agent API builds
// each remote session from (the composition root names the collectors).
// agent.enabled needs them; call it before Run.
func (d *Daemon) SetSessionSections(sections []session.SectionFactory) { d.sections = sections }

// New returns a daemon for cfg.
func New(cfg Config, logger *slog.Logger, factories []HostFactory) *Daemon {
	d := &Daemon{
		cfg: cfg, log: logger.With("component", "daemon"), factories: factories,
		reg: prometheus.NewRegistry(), assigned: map[uint32]uint32{}, procs: map[int]int{},
		listening: make(chan net.Addr, 1), slots: newSlotTable(), pool: MaxConfigTargets,
	}
	d.view.Store(d.slots.view(cfg.Targets, nil))
	d.views = newLiveViews(d.log)
	d.inc = newIncidents(cfg, d)
	if d.inc != nil {
		d.views.inc, d.views.recorder = d.inc, d.newRecorder
	}
	if kubernetesTargets(cfg.Targets) {
		d.pods = newPodSource(cfg, logger)
	}
	d.interval.Store(int64(cfg.RefreshInterval))
	return d
}

// Registry is the daemon's metrics registry.
func (d *Daemon) Registry() *prometheus.Registry { return d.reg }

// Listening delivers the address /metrics is served on, once.
func (d *Daemon) Listening() <-chan net.Addr { return d.listening }

// targetNames labels the slots with their keys (slots.go): 0 is the host.
func (d *Daemon) targetNames() map[uint32]string { return d.view.Load().targetNames() }

// Start builds and starts every collector, failing fast; on error it
// closes what it started.
func (d *Daemon) Start(ctx context.Context) error {
	for _, f := range d.factories {
		h := f.New(d.log, d.targetNames)
		if err := h.Start(ctx); err != nil {
			if f.Required {
				d.Close()
				return fmt.Errorf("starting the %s collector: %w", f.Name, err)
			}
			d.log.Warn("collector unavailable", "collector", f.Name, "err", err)
			continue
		}
		d.hosts = append(d.hosts, h)
		progs, links := kernelIDs(h)
		d.log.Info("collector started", "collector", f.Name, "programs", progs, "links", links)
	}
	bpfutil.ReleaseKernelBTF()
	d.reg.MustRegister(
		promcollectors.NewGoCollector(),
		promcollectors.NewProcessCollector(promcollectors.ProcessCollectorOpts{}),
		d,
		d.views,
	)
	if d.inc != nil {
		d.reg.MustRegister(d.inc)
	}
	for _, h := range d.hosts {
		c, err := newSlotCollector(h, h.Name(), d.view.Load, d.log)
		if err == nil {
			err = d.reg.Register(c)
		}
		if err != nil {
			d.Close()
			return fmt.Errorf("registering the %s metrics: %w", h.Name(), err)
		}
		d.cols = append(d.cols, c)
	}
	return nil
}

// kernelIDs reports a collector's program and link IDs when it exposes them.
func kernelIDs(h collectors.Host) (progs []ebpf.ProgramID, links []link.ID) {
	type objects interface {
		ProgramIDs() []ebpf.ProgramID
		LinkIDs() []link.ID
	}
	if o, ok := h.(objects); ok {
		return o.ProgramIDs(), o.LinkIDs()
	}
	return nil, nil
}

// Run resolves targets on every refresh and serves /metrics until ctx is done.
func (d *Daemon) Run(ctx context.Context, listen string, webConfig string) error {
	if listen == "" {
		listen = d.cfg.ListenAddress
	}
	if d.cfg.Agent.Enabled {
		if err := checkAgentExposure(listen, webConfig, d.insecure); err != nil {
			return err
		}
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w (another exporter on this port? choose one with --web.listen-address)", listen, err)
	}
	routes := map[string]http.Handler{
		"POST /-/reload": http.HandlerFunc(d.serveReload),
		"PUT /-/reload":  http.HandlerFunc(d.serveReload),
	}
	var api *agent.Server
	if d.cfg.Agent.Enabled {
		if api, err = d.startAgent(routes, webConfig); err != nil {
			l.Close()
			return err
		}
	}
	d.checkTargets(d.cfg.Targets)
	d.sweepSpool()
	d.listening <- l.Addr()
	return d.serve(ctx, l, routes, api, webConfig)
}

// startAgent builds the session API and adds its routes, and the
// capture's, to routes.
func (d *Daemon) startAgent(routes map[string]http.Handler, webConfig string) (*agent.Server, error) {
	if len(d.sections) == 0 {
		return nil, errors.New("agent.enabled: the daemon was given no session sections to build sessions from")
	}
	a := d.cfg.Agent
	api, err := agent.NewServer(d.sections, agent.Limits{MaxSessions: a.MaxSessions, MaxBufferSpans: a.MaxBufferSpans, IdleTimeout: a.IdleTimeout, ReadTimeout: a.ReadTimeout}, d.log)
	if err != nil {
		return nil, err
	}
	api.SetPodResolver(d.resolveAgentPod)
	d.mu.Lock()
	d.api = api
	d.mu.Unlock()
	d.setAllow(a.Allow)
	for p, h := range api.Routes() {
		routes[p] = h
	}
	routes["POST "+PathCapture] = http.HandlerFunc(d.serveCapture)
	if webConfig == "" {
		d.log.Warn("the session API is served without authentication (--agent.insecure or a loopback address): give --web.config.file with TLS and basic auth")
	}
	return api, nil
}

// serve runs, until ctx is done, the live views, the HTTP server on l,
// the session API (api, nil without one), the collectors and the
// targets' refresh, and ends them all.
func (d *Daemon) serve(ctx context.Context, l net.Listener, routes map[string]http.Handler, api *agent.Server, webConfig string) error {
	g, gctx := errgroup.WithContext(ctx)
	if len(d.sections) > 0 {
		d.views.begin(gctx, d.sections, d.proc)
		// Ending the live sessions releases their programs before Run
		// returns.
		g.Go(func() error {
			<-gctx.Done()
			d.views.stop()
			return nil
		})
	} else if d.cfg.Live.Enabled {
		d.log.Info("live.enabled: the daemon was given no session sections, so the targets have no live view")
	}
	g.Go(func() error {
		return prom.Serve(gctx, l, d.reg, prom.Config{
			Name: "bpfbench", Description: "eBPF observability for LLM inference servers",
			Version: version.Version, WebConfig: webConfig, Pprof: d.cfg.Pprof, Logger: d.log,
			Ready: d.ready, Routes: routes,
		})
	})
	if api != nil {
		// Ending the sessions ends their streams, so the server's
		// shutdown does not wait on them.
		g.Go(func() error {
			<-gctx.Done()
			return api.Close()
		})
	}
	for _, h := range d.hosts {
		g.Go(func() error { return h.Run(gctx) })
	}
	g.Go(func() error { return d.refreshLoop(gctx) })
	return g.Wait()
}

// refreshLoop resolves the targets at once and on every interval (which
// a reload may change) until ctx is done.
func (d *Daemon) refreshLoop(ctx context.Context) error {
	iv := time.Duration(d.interval.Load())
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		d.refresh()
		d.refreshed.Store(true)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if now := time.Duration(d.interval.Load()); now != iv {
			iv = now
			t.Reset(iv)
		}
	}
}

// ready says whether a scrape now shows what the configuration asks for.
func (d *Daemon) ready() error {
	if !d.refreshed.Load() {
		return errors.New("targets not resolved yet")
	}
	d.mu.Lock()
	pods := d.pods
	d.mu.Unlock()
	if pods != nil {
		return pods.ready()
	}
	return nil
}

// refresh matches targets against /proc and updates every collector.
func (d *Daemon) refresh() {
	d.refreshMu.Lock()
	defer d.refreshMu.Unlock()
	d.refreshLocked()
	d.syncLive()
}

// refreshLocked is refresh under refreshMu (which guards d.cfg's writes).
func (d *Daemon) refreshLocked() {
	if len(d.cfg.Targets) == 0 {
		return
	}
	r := Resolver{Proc: d.proc, Targets: d.cfg.Targets}
	if d.pods != nil {
		r.Pods = d.pods.Index(context.Background())
	}
	want, _, procPods, err := r.resolve()
	if err != nil {
		if n, ok := d.warned.allow("resolve"); ok {
			d.log.Warn("resolving targets", "err", err, "repeated", n)
		}
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	a := d.slots.allocate(d.cfg.Targets, want, procPods, d.pool)
	if len(a.fresh) > 0 {
		// Slots a pod container had before: read what the kernel kept
		// of it before the new owner's processes add to it.
		d.view.Store(d.slots.view(d.cfg.Targets, a.fresh))
		for slot, base := range baselines(d.cols, a.fresh) {
			d.slots.base[slot] = base
		}
	}
	for tgid, slot := range want {
		if d.assigned[tgid] == slot {
			continue
		}
		for _, h := range d.hosts {
			if err := h.SetTarget(tgid, slot); err != nil {
				d.targetError("adding target process", h.Name(), tgid, slot, err)
			}
		}
		d.assigned[tgid] = slot
	}
	for tgid := range d.assigned {
		if _, ok := want[tgid]; ok {
			continue
		}
		for _, h := range d.hosts {
			if err := h.DeleteTarget(tgid); err != nil {
				d.targetError("removing target process", h.Name(), tgid, d.assigned[tgid], err)
			}
		}
		delete(d.assigned, tgid)
	}
	d.view.Store(d.slots.view(d.cfg.Targets, nil))
	clear(d.procs)
	for _, slot := range d.assigned {
		if o, ok := d.slots.owners[slot]; ok {
			d.procs[o.target]++
		} else {
			d.procs[int(slot)-1]++
		}
	}
	d.owned, d.folded = a.owned, a.folded
}

// Close ends the live sessions and closes the collectors in reverse
// order. It is idempotent.
func (d *Daemon) Close() error {
	d.views.stop()
	if d.inc != nil {
		d.inc.Close()
	}
	var errs []error
	for i := len(d.hosts) - 1; i >= 0; i-- {
		if err := d.hosts[i].Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing %s: %w", d.hosts[i].Name(), err))
		}
	}
	d.hosts = nil
	return errors.Join(errs...)
}

var (
	buildInfoDesc = prometheus.NewDesc("bpfbench_build_info",
		"A metric with a constant 1 value labeled by version, revision, goversion, goos and goarch of bpfbench.",
		[]string{"version", "revision", "goversion", "goos", "goarch"}, nil)
	lostDesc = prometheus.NewDesc("bpfbench_ringbuf_lost_events_total",
		"Events the kernel could not put in a collector's ring buffer.", []string{"collector"}, nil)
	decodeDesc = prometheus.NewDesc("bpfbench_decode_errors_total",
		"Ring buffer records a collector could not decode.", []string{"collector"}, nil)
	targetProcsDesc = prometheus.NewDesc("bpfbench_target_processes",
		"Processes currently matched by each configured target (all its pod containers for a Kubernetes target).", []string{"target"}, nil)
	upDesc = prometheus.NewDesc("bpfbench_collector_up",
		"Whether a collector is loaded and attached (1) or unavailable on this host (0).", []string{"collector"}, nil)
	targetInfoDesc = prometheus.NewDesc("bpfbench_target_info",
		"The pod containers of a Kubernetes target with a slot of their own, at most max_pods per target: its series carry these labels.",
		[]string{"target", "namespace", "pod", "container"}, nil)
	targetOverflowDesc = prometheus.NewDesc("bpfbench_target_pods_overflow",
		"Pod containers of a Kubernetes target beyond its max_pods (or the 63 slots), folded into its series without pod and container labels.",
		[]string{"target"}, nil)
)

// Describe implements prometheus.Collector for the daemon's own metrics.
func (d *Daemon) Describe(ch chan<- *prometheus.Desc) {
	ch <- buildInfoDesc
	ch <- lostDesc
	ch <- decodeDesc
	ch <- targetProcsDesc
	ch <- upDesc
	ch <- targetInfoDesc
	ch <- targetOverflowDesc
}

// Collect implements prometheus.Collector for the daemon's own metrics.
func (d *Daemon) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(buildInfoDesc, prometheus.GaugeValue, 1, version.Version, version.Revision, version.GoVersion, runtime.GOOS, runtime.GOARCH)
	up := map[string]bool{}
	for _, h := range d.hosts {
		lost, dec := h.Losses()
		ch <- prometheus.MustNewConstMetric(lostDesc, prometheus.CounterValue, float64(lost), h.Name())
		ch <- prometheus.MustNewConstMetric(decodeDesc, prometheus.CounterValue, float64(dec), h.Name())
		up[h.Name()] = true
	}
	for _, f := range d.factories {
		v := 0.0
		if up[f.Name] {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, v, f.Name)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, t := range d.cfg.Targets {
		ch <- prometheus.MustNewConstMetric(targetProcsDesc, prometheus.GaugeValue, float64(d.procs[i]), t.Name)
		if t.Kubernetes() {
			for _, pc := range d.owned[i] {
				ch <- prometheus.MustNewConstMetric(targetInfoDesc, prometheus.GaugeValue, 1, t.Name, pc.Namespace, pc.Pod, pc.Container)
			}
			ch <- prometheus.MustNewConstMetric(targetOverflowDesc, prometheus.GaugeValue, float64(d.folded[i]), t.Name)
		}
	}
}
