package daemon

// Target slots. The collectors aggregate per slot in the kernel (1..63;
// 0 is the host) and label a slot's series with the name the daemon gives
// it. Target i keeps slot i+1 for good: a pid, comm or cgroup target's
// aggregate, and a Kubernetes target's overflow. The slots above the
// configured targets are a pool from which each pod container of a
// Kubernetes target with processes gets one of its own, at most the
// target's max_pods, while the pool lasts; the target's other pod
// containers are folded into its own slot (series without pod and
// container labels) and counted in bpfbench_target_pods_overflow.
//
// Allocation is redone at every refresh and sticky: a pod container keeps
// its slot while it has processes, a folded one gets a slot when one is
// free and its target is under max_pods. A slot whose pod container has
// no process left is freed: its series leave the next scrape at once, and
// the slot is not given again before the following refresh. The kernel
// keeps what the old owner added, so when a slot is given to a new pod
// container the daemon first reads the slot (a baseline) and subtracts it
// from the counters and histograms of the new owner's series, which thus
// start at zero like any new series.
//
// A slot's series are named by the collectors with its key (names): the
// target's name for a target's own slot, TARGET/NAMESPACE/POD/CONTAINER
// for a pod container's (target names hold no "/"). slotCollector, which
// wraps each collector, turns the key back into the target, namespace,
// pod and container labels. Series of targets without Kubernetes
// selectors keep the target label alone: an empty label is no label to
// Prometheus, so every family has one label set either way.

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/bpfbench/bpfbench/internal/hist"
)

// slotOwner is a pod container of a Kubernetes target.
type slotOwner struct {
	target int // index in Config.Targets
	pc     PodContainer
}

// slotLabels are the labels of a slot's series, and the baseline
// subtracted from them.
type slotLabels struct {
	target, namespace, pod, container string
	// base: the slot's counters and histograms when its owner got it,
	// by seriesID; nil for a slot never used before.
	base map[string]*dto.Metric
	// capture marks the key of a slot being read for a baseline: its
	// series are not exported.
	capture bool
}

// slotView is what a scrape sees of the slots; it is replaced whole.
type slotView struct {
	names map[uint32]string
	keys  map[string]*slotLabels
}

func (v *slotView) targetNames() map[uint32]string { return v.names }

// slotTable is the daemon's allocation of the pool (under Daemon.mu).
type slotTable struct {
	owners  map[uint32]slotOwner
	byOwner map[slotOwner]uint32
	// cooling slots were freed at the last refresh: free at the next one.
	cooling map[uint32]bool
	// used slots had an owner once: a new one needs a baseline.
	used map[uint32]bool
	// base is each owned slot's baseline; tbase each target slot's, read
	// when a reload gave the slot to another target.
	base, tbase map[uint32]map[string]*dto.Metric
}

func newSlotTable() slotTable {
	return slotTable{owners: map[uint32]slotOwner{}, byOwner: map[slotOwner]uint32{}, cooling: map[uint32]bool{}, used: map[uint32]bool{},
		base: map[uint32]map[string]*dto.Metric{}, tbase: map[uint32]map[string]*dto.Metric{}}
}

// podKey is the key of a pod container's slot.
func podKey(target string, pc PodContainer) string {
	return target + "/" + pc.Namespace + "/" + pc.Pod + "/" + pc.Container
}

// captureKey names a slot while its baseline is read.
func captureKey(slot uint32) string { return "/capture/" + strconv.Itoa(int(slot)) }

// allocation is the outcome of one refresh's allocation.
type allocation struct {
	// fresh are the slots given to a new owner that were used before.
	fresh []uint32
	// folded counts each target's pod containers in its own slot.
	folded map[int]int
	// owned lists each target's pod containers with a slot of their own.
	owned map[int][]PodContainer
}

// allocate gives the pod containers of the Kubernetes targets their slots
// and rewrites want (tgid -> slot) accordingly: procPods are the pod
// containers of the processes Kubernetes targets matched, with want's
// slot the target's own. pool is the highest slot.
func (s *slotTable) allocate(targets []Target, want map[uint32]uint32, procPods map[uint32]PodContainer, pool uint32) allocation {
	live := map[slotOwner]bool{}
	for tgid, pc := range procPods {
		live[slotOwner{int(want[tgid]) - 1, pc}] = true
	}
	// Slots freed at the last refresh are free now; those whose pod
	// container has no process left are freed and cool for one refresh.
	clear(s.cooling)
	for slot, o := range s.owners {
		if !live[o] {
			delete(s.owners, slot)
			delete(s.byOwner, o)
			delete(s.base, slot)
			s.cooling[slot] = true
		}
	}
	a := allocation{folded: map[int]int{}, owned: map[int][]PodContainer{}}
	perTarget := map[int][]PodContainer{}
	for o := range live {
		perTarget[o.target] = append(perTarget[o.target], o.pc)
	}
	next := uint32(len(targets)) + 1
	freeSlot := func() uint32 {
		for ; next <= pool; next++ {
			if _, taken := s.owners[next]; !taken && !s.cooling[next] {
				return next
			}
		}
		return 0
	}
	for i := range targets {
		pcs := perTarget[i]
		if len(pcs) == 0 {
			continue
		}
		slices.SortFunc(pcs, comparePods)
		n := 0
		for _, pc := range pcs {
			if _, ok := s.byOwner[slotOwner{i, pc}]; ok {
				n++
			}
		}
		for _, pc := range pcs {
			o := slotOwner{i, pc}
			if _, ok := s.byOwner[o]; ok {
				a.owned[i] = append(a.owned[i], pc)
				continue
			}
			slot := uint32(0)
			if n < targets[i].PodLimit() {
				slot = freeSlot()
			}
			if slot == 0 {
				a.folded[i]++
				continue
			}
			n++
			s.owners[slot], s.byOwner[o] = o, slot
			if s.used[slot] {
				a.fresh = append(a.fresh, slot)
			}
			s.used[slot] = true
			a.owned[i] = append(a.owned[i], pc)
		}
		slices.SortFunc(a.owned[i], comparePods)
	}
	for tgid, pc := range procPods {
		if slot, ok := s.byOwner[slotOwner{int(want[tgid]) - 1, pc}]; ok {
			want[tgid] = slot
		}
	}
	return a
}

func comparePods(a, b PodContainer) int {
	return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Pod, b.Pod), strings.Compare(a.Container, b.Container))
}

// view returns the slots as a scrape sees them; capture adds the keys of
// slots being read for a baseline.
func (s *slotTable) view(targets []Target, capture []uint32) *slotView {
	v := &slotView{names: map[uint32]string{0: "host"}, keys: map[string]*slotLabels{"host": {target: "host"}}}
	for i, t := range targets {
		v.names[uint32(i+1)] = t.Name
		l := &slotLabels{target: t.Name, base: s.tbase[uint32(i+1)]}
		if t.Kubernetes() {
			// The overflow: the target's namespace when it selects one.
			l.namespace = t.Namespace
		}
		v.keys[t.Name] = l
	}
	for slot, o := range s.owners {
		t := targets[o.target]
		k := podKey(t.Name, o.pc)
		v.names[slot] = k
		v.keys[k] = &slotLabels{target: t.Name, namespace: o.pc.Namespace, pod: o.pc.Pod, container: o.pc.Container, base: s.base[slot]}
	}
	for _, slot := range capture {
		k := captureKey(slot)
		v.names[slot] = k
		v.keys[k] = &slotLabels{capture: true}
	}
	return v
}

// seriesID identifies a series of a slot apart from its target label.
func seriesID(family string, m *dto.Metric) string {
	var b strings.Builder
	b.WriteString(family)
	for _, lp := range m.GetLabel() {
		if lp.GetName() == "target" {
			continue
		}
		fmt.Fprintf(&b, "\xff%s=%s", lp.GetName(), lp.GetValue())
	}
	return b.String()
}

// slotCollector exports one collector's series with each slot's labels.
// It gathers the collector from a registry of its own, so that the
// series come with their family's name and help.
type slotCollector struct {
	reg  *prometheus.Registry
	view func() *slotView
	log  *slog.Logger
	name string
}

func newSlotCollector(h prometheus.Collector, name string, view func() *slotView, log *slog.Logger) (*slotCollector, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(h); err != nil {
		return nil, err
	}
	return &slotCollector{reg: reg, view: view, log: log, name: name}, nil
}

// Describe describes nothing: the labels of the series depend on the
// slots of the moment, so the collector is unchecked.
func (c *slotCollector) Describe(chan<- *prometheus.Desc) {}

// gather gathers the collector under one view of the slots: a refresh
// that replaces the view while it runs makes it gather again.
func (c *slotCollector) gather() ([]*dto.MetricFamily, *slotView) {
	var mfs []*dto.MetricFamily
	var v *slotView
	for range 3 {
		v = c.view()
		var err error
		mfs, err = c.reg.Gather()
		if err != nil {
			c.log.Warn("gathering metrics", "collector", c.name, "err", err)
		}
		if c.view() == v {
			break
		}
	}
	return mfs, v
}

// Collect implements prometheus.Collector.
func (c *slotCollector) Collect(ch chan<- prometheus.Metric) {
	mfs, v := c.gather()
	for _, mf := range mfs {
		desc := prometheus.NewDesc(mf.GetName(), mf.GetHelp(), nil, nil)
		for _, m := range mf.GetMetric() {
			if relabel(mf, m, v) {
				ch <- slotMetric{desc, m}
			}
		}
	}
}

// relabel gives m the labels of its slot and subtracts the slot's
// baseline; false drops it (a slot being read, or one gone since).
func relabel(mf *dto.MetricFamily, m *dto.Metric, v *slotView) bool {
	ti := slices.IndexFunc(m.GetLabel(), func(lp *dto.LabelPair) bool { return lp.GetName() == "target" })
	if ti < 0 {
		return true
	}
	key := m.Label[ti].GetValue()
	l, ok := v.keys[key]
	if !ok {
		// A key that is no slot's: the GPU collector's pid of a process
		// of no target.
		return !strings.Contains(key, "/")
	}
	if l.capture {
		return false
	}
	if b := l.base[seriesID(mf.GetName(), m)]; b != nil {
		subtract(m, b)
	}
	if key == l.target && l.namespace == "" {
		return true
	}
	labels := slices.Delete(slices.Clone(m.Label), ti, ti+1)
	for _, lp := range [][2]string{{"target", l.target}, {"namespace", l.namespace}, {"pod", l.pod}, {"container", l.container}} {
		if lp[1] != "" {
			labels = append(labels, &dto.LabelPair{Name: &lp[0], Value: &lp[1]})
		}
	}
	slices.SortFunc(labels, func(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) })
	m.Label = labels
	return true
}

// subtract takes baseline b from m's counter or histogram (gauges are
// levels, not sums, and stay as they are).
func subtract(m, b *dto.Metric) {
	sub := func(v, w uint64) uint64 { return v - min(v, w) }
	switch {
	case m.Counter != nil && b.Counter != nil:
		v := max(m.Counter.GetValue()-b.Counter.GetValue(), 0)
		m.Counter.Value = &v
	case m.Histogram != nil && b.Histogram != nil:
		h, bh := m.Histogram, b.Histogram
		n, sum := sub(h.GetSampleCount(), bh.GetSampleCount()), max(h.GetSampleSum()-bh.GetSampleSum(), 0)
		h.SampleCount, h.SampleSum = &n, &sum
		old := map[float64]uint64{}
		for _, bk := range bh.GetBucket() {
			old[bk.GetUpperBound()] = bk.GetCumulativeCount()
		}
		for _, bk := range h.GetBucket() {
			c := sub(bk.GetCumulativeCount(), old[bk.GetUpperBound()])
			bk.CumulativeCount = &c
		}
		if h.Schema != nil && bh.Schema != nil && h.GetSchema() == bh.GetSchema() {
			// The native buckets, bucket by bucket; the count is then
			// theirs, so that buckets and count agree.
			z := sub(h.GetZeroCount(), bh.GetZeroCount())
			nb := hist.DecodeNative(h.GetPositiveSpan(), h.GetPositiveDelta())
			ob := hist.DecodeNative(bh.GetPositiveSpan(), bh.GetPositiveDelta())
			total := z
			for i, c := range nb {
				if c = sub(c, ob[i]); c > 0 {
					nb[i] = c
					total += c
				} else {
					delete(nb, i)
				}
			}
			h.ZeroCount, h.SampleCount = &z, &total
			h.PositiveSpan, h.PositiveDelta = hist.EncodeNative(nb)
		}
	}
}

// slotMetric is a gathered series, relabelled.
type slotMetric struct {
	desc *prometheus.Desc
	m    *dto.Metric
}

func (s slotMetric) Desc() *prometheus.Desc { return s.desc }

func (s slotMetric) Write(out *dto.Metric) error {
	out.Label, out.Counter, out.Gauge, out.Histogram = s.m.Label, s.m.Counter, s.m.Gauge, s.m.Histogram
	out.Summary, out.Untyped, out.TimestampMs = s.m.Summary, s.m.Untyped, s.m.TimestampMs
	return nil
}

// baselines reads the slots about to get a new owner: every collector's
// counters and histograms of each, by seriesID.
func baselines(cols []*slotCollector, slots []uint32) map[uint32]map[string]*dto.Metric {
	out := map[uint32]map[string]*dto.Metric{}
	bySlot := map[string]uint32{}
	for _, slot := range slots {
		out[slot] = map[string]*dto.Metric{}
		bySlot[captureKey(slot)] = slot
	}
	for _, c := range cols {
		mfs, err := c.reg.Gather()
		if err != nil {
			c.log.Warn("reading a slot's baseline", "collector", c.name, "err", err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					if slot, ok := bySlot[lp.GetValue()]; ok && lp.GetName() == "target" {
						out[slot][seriesID(mf.GetName(), m)] = m
					}
				}
			}
		}
	}
	return out
}
