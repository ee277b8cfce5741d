package perturb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/bpfbench/bpfbench/internal/atomicfile"
	"github.com/bpfbench/bpfbench/internal/owner"
)

// DefaultStateDir holds the state of every shaped interface, so that
// `bpfbench perturb net --restore IFACE` undoes a shaping whose process died.
const DefaultStateDir = "/run/bpfbench"

// Net shapes the egress of one interface with a token bucket filter (tbf)
// at Rate bits per second, optionally inside a named network namespace.
type Net struct {
	Iface string
	// Netns is a named network namespace (ip netns add NAME); "" is the
	// current one.
	Netns string
	// Rate in bits per second; Burst and Limit in bytes (0: defaults from
	// the rate).
	Rate  uint64
	Burst uint32
	Limit uint32
	// StateDir receives the saved state (default DefaultStateDir).
	StateDir string
}

// NetReport is what a network perturbation achieved, from the qdisc's own
// counters.
type NetReport struct {
	Iface      string  `json:"iface"`
	Netns      string  `json:"netns,omitempty"`
	RateBps    uint64  `json:"rate_bits_per_second"`
	BurstBytes uint32  `json:"burst_bytes"`
	LimitBytes uint32  `json:"limit_bytes"`
	WallS      float64 `json:"wall_seconds"`
	Bytes      uint64  `json:"bytes_sent"`
	Packets    uint64  `json:"packets_sent"`
	Drops      uint64  `json:"drops"`
	Overlimits uint64  `json:"overlimits"`
	// AchievedBps is the bytes the qdisc sent per wall second, in bits.
	AchievedBps float64 `json:"achieved_bits_per_second"`
	// Restored says what the interface was given back.
	Restored string `json:"restored"`
}

// prevQdisc is the root qdisc found before shaping; Kind "" is the
// kernel's default (no configured root).
type prevQdisc struct {
	Kind   string `json:"kind,omitempty"`
	Handle uint32 `json:"handle,omitempty"`
	Rate   uint64 `json:"rate,omitempty"`
	Buffer uint32 `json:"buffer,omitempty"`
	Limit  uint32 `json:"limit,omitempty"`
	Peak   uint64 `json:"peakrate,omitempty"`
	MinBuf uint32 `json:"minburst,omitempty"`
}

// netState is the state file of a shaped interface.
type netState struct {
	Iface string `json:"iface"`
	Netns string `json:"netns,omitempty"`
	owner.Owner
	Started time.Time `json:"started"`
	Handle  uint32    `json:"handle"`
	Prev    prevQdisc `json:"previous_root"`
}

// ourHandle is the handle of the tbf bpfbench installs (1:0 is what tc
// users pick too, so the state file, not the handle, says it is ours).
var ourHandle = netlink.MakeHandle(0xbb, 0)

// ParseRate parses a rate as tc does: "8mbit", "500kbit", "1gbit", "1mbps"
// (bytes per second), a bare number is bits per second.
func ParseRate(s string) (uint64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	units := []struct {
		suffix string
		mult   float64
	}{
		{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1},
		{"gbps", 8e9}, {"mbps", 8e6}, {"kbps", 8e3}, {"bps", 8},
	}
	mult := 1.0
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("rate %q: use e.g. 8mbit, 500kbit, 1gbit or 1mbps (bytes per second)", s)
	}
	return uint64(v * mult), nil
}

// ParseSize parses a size in bytes as tc does: "32kb" or "32k" (KiB),
// "1mb" or "1m" (MiB), a bare number of bytes.
func ParseSize(s string) (uint32, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := 1.0
	for _, u := range []struct {
		suffix string
		mult   float64
	}{{"kb", 1024}, {"mb", 1 << 20}, {"k", 1024}, {"m", 1 << 20}, {"b", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v <= 0 || v*mult > 1<<31 {
		return 0, fmt.Errorf("size %q: use e.g. 32kb, 1mb or a number of bytes", s)
	}
	return uint32(v * mult), nil
}

// Validate checks the settings and fills defaults: a burst of 20 ms at
// the rate (at least 32 KiB, so that one GSO packet fits), a queue of
// 250 ms at the rate (at least 256 KiB: shorter queues drop TCP bursts
// and the flow then stays below the rate).
func (n *Net) Validate() error {
	if n.Iface == "" {
		return errors.New("no interface to shape: give --iface NAME")
	}
	if n.Rate == 0 {
		return errors.New("no rate: give --rate, e.g. --rate 8mbit")
	}
	if n.Burst == 0 {
		n.Burst = uint32(max(n.Rate/8/50, 32<<10))
	}
	if n.Limit == 0 {
		n.Limit = uint32(max(n.Rate/8/4, 256<<10, 2*uint64(n.Burst)))
	}
	if n.StateDir == "" {
		n.StateDir = DefaultStateDir
	}
	return nil
}

func stateFile(dir, nsName, iface string) string {
	if nsName == "" {
		nsName = "host"
	}
	return filepath.Join(dir, fmt.Sprintf("tbf-%s-%s.json", nsName, iface))
}

// Shaped is an interface bpfbench shaped, from its state file.
type Shaped struct {
	Iface, Netns string
	Owner        owner.Owner
	Started      time.Time
	State        string // the state file
}

// ShapedIn lists the shapings recorded in stateDir, live or left by a
// dead process (Owner.Alive says which).
func ShapedIn(stateDir string) []Shaped {
	paths, _ := filepath.Glob(filepath.Join(stateDir, "tbf-*.json"))
	var out []Shaped
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var st netState
		if json.Unmarshal(b, &st) != nil || st.Iface == "" {
			continue
		}
		out = append(out, Shaped{Iface: st.Iface, Netns: st.Netns, Owner: st.Owner, Started: st.Started, State: p})
	}
	return out
}

func where(nsName string) string {
	if nsName == "" {
		return ""
	}
	return " in network namespace " + nsName
}

// handleIn opens a netlink handle in the named namespace ("" current).
func handleIn(nsName string) (*netlink.Handle, error) {
	if nsName == "" {
		return netlink.NewHandle()
	}
	ns, err := netns.GetFromName(nsName)
	if err != nil {
		return nil, fmt.Errorf("network namespace %s does not exist (ip netns list): %w", nsName, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, fmt.Errorf("opening netlink in network namespace %s: %w", nsName, err)
	}
	return h, nil
}

func linkOf(h *netlink.Handle, iface, nsName string) (netlink.Link, error) {
	l, err := h.LinkByName(iface)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) || errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("interface %s does not exist%s (ip link show)", iface, where(nsName))
		}
		return nil, fmt.Errorf("looking up interface %s%s: %w", iface, where(nsName), err)
	}
	return l, nil
}

func rootQdisc(h *netlink.Handle, l netlink.Link) (netlink.Qdisc, error) {
	qs, err := h.QdiscList(l)
	if err != nil {
		return nil, fmt.Errorf("listing the qdiscs of %s: %w", l.Attrs().Name, err)
	}
	for _, q := range qs {
		if q.Attrs().Parent == netlink.HANDLE_ROOT {
			return q, nil
		}
	}
	return nil, nil
}

func tbfOf(linkIndex int, handle uint32, rate uint64, buffer, limit uint32) *netlink.Tbf {
	return &netlink.Tbf{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: linkIndex, Handle: handle, Parent: netlink.HANDLE_ROOT},
		Rate:       rate / 8, // netlink's Tbf rate is in bytes per second
		Limit:      limit,
		Buffer:     buffer,
	}
}

// Shaping is an applied tbf; Stop restores the interface.
type Shaping struct {
	n     Net
	state netState
	start time.Time
	base  netlink.GnetStatsBasic
	bq    netlink.GnetStatsQueue
}

// Apply shapes the interface. The previous root qdisc is saved in the
// state directory first, so that a crash can be undone with Restore.
// Only interfaces with the kernel's default root qdisc or a tbf can be
// shaped: anything else would be lost.
func (n Net) Apply() (*Shaping, error) {
	if err := n.Validate(); err != nil {
		return nil, err
	}
	h, err := handleIn(n.Netns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	l, err := linkOf(h, n.Iface, n.Netns)
	if err != nil {
		return nil, err
	}
	path := stateFile(n.StateDir, n.Netns, n.Iface)
	if _, err := os.Stat(path); err == nil {
		return nil, fmt.Errorf("%s%s is already shaped by bpfbench (%s): run bpfbench perturb net --restore %s first", n.Iface, where(n.Netns), path, n.Iface)
	}
	st := netState{Iface: n.Iface, Netns: n.Netns, Owner: owner.Self(), Started: time.Now(), Handle: ourHandle}
	root, err := rootQdisc(h, l)
	if err != nil {
		return nil, err
	}
	if root != nil && root.Attrs().Handle != 0 {
		tbf, ok := root.(*netlink.Tbf)
		if !ok {
			return nil, fmt.Errorf("%s%s has a configured root qdisc %s: bpfbench only replaces the default qdisc or a tbf (tc qdisc del dev %s root, then retry)", n.Iface, where(n.Netns), root.Type(), n.Iface)
		}
		st.Prev = prevQdisc{Kind: "tbf", Handle: tbf.Handle, Rate: tbf.Rate, Buffer: tbf.Buffer, Limit: tbf.Limit, Peak: tbf.Peakrate, MinBuf: tbf.Minburst}
	}
	if err := os.MkdirAll(n.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the state directory %s: %w", n.StateDir, err)
	}
	b, _ := json.MarshalIndent(st, "", "  ")
	if err := atomicfile.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("saving the state of %s: %w", n.Iface, err)
	}
	if err := owner.Recorded(n.StateDir); err != nil {
		slog.Warn("no reaper for the shaping: if this process is killed, the next bpfbench restores the interface", "component", "perturb", "err", err)
	}
	q := tbfOf(l.Attrs().Index, ourHandle, n.Rate, netlink.Xmittime(n.Rate/8, n.Burst), n.Limit)
	if err := h.QdiscReplace(q); err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("adding tbf %d bit/s to %s%s: %w", n.Rate, n.Iface, where(n.Netns), err)
	}
	s := &Shaping{n: n, state: st, start: time.Now()}
	if bs, qs, err := s.stats(); err == nil {
		s.base, s.bq = bs, qs
	}
	return s, nil
}

// stats reads the counters of the tbf this shaping installed.
func (s *Shaping) stats() (netlink.GnetStatsBasic, netlink.GnetStatsQueue, error) {
	h, err := handleIn(s.n.Netns)
	if err != nil {
		return netlink.GnetStatsBasic{}, netlink.GnetStatsQueue{}, err
	}
	defer h.Close()
	l, err := linkOf(h, s.n.Iface, s.n.Netns)
	if err != nil {
		return netlink.GnetStatsBasic{}, netlink.GnetStatsQueue{}, err
	}
	root, err := rootQdisc(h, l)
	if err != nil {
		return netlink.GnetStatsBasic{}, netlink.GnetStatsQueue{}, err
	}
	if root == nil || root.Attrs().Handle != ourHandle || root.Attrs().Statistics == nil {
		return netlink.GnetStatsBasic{}, netlink.GnetStatsQueue{}, errors.New("the tbf is gone")
	}
	var bs netlink.GnetStatsBasic
	var qs netlink.GnetStatsQueue
	if st := root.Attrs().Statistics; st.Basic != nil {
		bs = *st.Basic
	}
	if st := root.Attrs().Statistics; st.Queue != nil {
		qs = *st.Queue
	}
	return bs, qs, nil
}

// Stop reads the qdisc's counters, restores the interface and reports.
func (s *Shaping) Stop() (NetReport, error) {
	rep := NetReport{Iface: s.n.Iface, Netns: s.n.Netns, RateBps: s.n.Rate, BurstBytes: s.n.Burst, LimitBytes: s.n.Limit,
		WallS: time.Since(s.start).Seconds()}
	if bs, qs, err := s.stats(); err == nil {
		rep.Bytes = bs.Bytes - s.base.Bytes
		rep.Packets = uint64(bs.Packets - s.base.Packets)
		rep.Drops = uint64(qs.Drops - s.bq.Drops)
		rep.Overlimits = uint64(qs.Overlimits - s.bq.Overlimits)
		if rep.WallS > 0 {
			rep.AchievedBps = float64(rep.Bytes) * 8 / rep.WallS
		}
	}
	restored, err := Restore(s.n.StateDir, s.n.Netns, s.n.Iface)
	rep.Restored = restored
	return rep, err
}

// Run shapes the interface until ctx is done, then restores it and reports.
func (n Net) Run(ctx context.Context) (NetReport, error) {
	s, err := n.Apply()
	if err != nil {
		return NetReport{}, err
	}
	<-ctx.Done()
	return s.Stop()
}

// Restore undoes the shaping recorded in the state directory for iface
// (in network namespace nsName, "" the current one): the previous root
// qdisc is put back (the kernel's default or the saved tbf) and the state
// file removed. It says what the interface was given back.
func Restore(stateDir, nsName, iface string) (string, error) {
	if stateDir == "" {
		stateDir = DefaultStateDir
	}
	path := stateFile(stateDir, nsName, iface)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("%s%s is not shaped by bpfbench: no state in %s", iface, where(nsName), path)
	}
	if err != nil {
		return "", fmt.Errorf("reading the state of %s: %w", iface, err)
	}
	var st netState
	if err := json.Unmarshal(b, &st); err != nil {
		return "", fmt.Errorf("%s is not a bpfbench state file: %w", path, err)
	}
	h, err := handleIn(nsName)
	if err != nil {
		return "", err
	}
	defer h.Close()
	l, err := linkOf(h, iface, nsName)
	if err != nil {
		// The interface (or its namespace) is gone: nothing is left to undo.
		os.Remove(path)
		return "nothing (the interface is gone)", nil
	}
	root, err := rootQdisc(h, l)
	if err != nil {
		return "", err
	}
	ours := root != nil && root.Attrs().Handle == st.Handle && root.Type() == "tbf"
	var what string
	switch {
	case st.Prev.Kind == "tbf":
		q := tbfOf(l.Attrs().Index, st.Prev.Handle, st.Prev.Rate*8, st.Prev.Buffer, st.Prev.Limit)
		q.Peakrate, q.Minburst = st.Prev.Peak, st.Prev.MinBuf
		if ours {
			if err := h.QdiscDel(root); err != nil {
				return "", fmt.Errorf("removing bpfbench's tbf from %s: %w", iface, err)
			}
		}
		if err := h.QdiscReplace(q); err != nil {
			return "", fmt.Errorf("restoring the previous tbf on %s: %w", iface, err)
		}
		what = fmt.Sprintf("the previous tbf (%d bit/s)", st.Prev.Rate*8)
	case ours:
		if err := h.QdiscDel(root); err != nil {
			return "", fmt.Errorf("removing bpfbench's tbf from %s: %w", iface, err)
		}
		what = "the default qdisc"
	default:
		what = "nothing (bpfbench's tbf was already gone)"
	}
	if err := os.Remove(path); err != nil {
		return what, fmt.Errorf("removing the state file %s: %w", path, err)
	}
	return what, nil
}
