package launch

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/bpfbench/bpfbench/host"
	"github.com/bpfbench/bpfbench/internal/owner"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// SimNet is the network namespace the simulated server serves in: a veth
// pair joins it to the host, HostAddr (10.200.X.1/30) on HostIface in the
// current namespace and Addr (10.200.X.2/30) on Iface inside Name. Its
// state file in the state directory records it first, so that a run
// that dies before Close is cleaned up by the next StartSim
// (sweepSimNets).
type SimNet struct {
	Name             string
	Iface, HostIface string
	Addr, HostAddr   netip.Addr
	ns               netns.NsHandle
	state            string
	once             sync.Once
	closeErr         error
}

// newSimNet sweeps what dead runs left, then creates the namespace and the
// veth pair on the first 10.200.X.0/30 that no interface of the host uses.
func newSimNet(stateDir string) (*SimNet, error) {
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the state directory %s: %w", stateDir, err)
	}
	if _, err := host.SweepLeftovers(stateDir); err != nil {
		slog.Warn("removing what a dead run left", "component", "job", "err", err)
	}
	used := map[byte]bool{}
	if addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4); err == nil {
		for _, a := range addrs {
			if ip := a.IP.To4(); ip != nil && ip[0] == 10 && ip[1] == 200 {
				used[ip[2]] = true
			}
		}
	}
	start := os.Getpid() % 250
	for i := 0; i < 250; i++ {
		x := byte((start + i) % 250)
		if used[x] {
			continue
		}
		sn, err := createSimNet(stateDir, x)
		if errors.Is(err, unix.EEXIST) {
			continue // another run took it meanwhile
		}
		return sn, err
	}
	return nil, errors.New("no free 10.200.X.0/30 subnet for the server's network namespace")
}

func createSimNet(stateDir string, x byte) (*SimNet, error) {
	sn := &SimNet{
		Name:      fmt.Sprintf("bpfbench-sim-%d", x),
		Iface:     fmt.Sprintf("bbsim%dn", x),
		HostIface: fmt.Sprintf("bbsim%dh", x),
		Addr:      netip.AddrFrom4([4]byte{10, 200, x, 2}),
		HostAddr:  netip.AddrFrom4([4]byte{10, 200, x, 1}),
		ns:        -1,
		state:     filepath.Join(stateDir, fmt.Sprintf("%sbpfbench-sim-%d.json", host.SimNetPrefix, x)),
	}
	if _, err := os.Stat(filepath.Join("/run/netns", sn.Name)); err == nil {
		return nil, unix.EEXIST
	}
	if _, err := netlink.LinkByName(sn.HostIface); err == nil {
		return nil, unix.EEXIST
	}
	f, err := os.OpenFile(sn.state, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, os.ErrExist) {
		return nil, unix.EEXIST
	}
	if err != nil {
		return nil, fmt.Errorf("saving the state of the server's network namespace: %w", err)
	}
	b, _ := json.MarshalIndent(host.SimNetState{Netns: sn.Name, Iface: sn.Iface, HostIface: sn.HostIface, Owner: owner.Self(), Started: time.Now()}, "", "  ")
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(sn.state)
		return nil, fmt.Errorf("saving the state of the server's network namespace: %w", err)
	}
	if err := owner.Recorded(stateDir); err != nil {
		slog.Warn("no reaper for the server's network namespace: if this process is killed, the next bpfbench removes it", "component", "job", "err", err)
	}
	if err := sn.create(); err != nil {
		sn.Close()
		return nil, err
	}
	return sn, nil
}

// create makes the namespace, the veth pair and the addresses.
func (sn *SimNet) create() error {
	errc := make(chan error, 1)
	go func() {
		// NewNamed moves the calling thread into the new namespace: put it
		// back, or let the thread end with this goroutine.
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("reading this thread's network namespace: %w", err)
			return
		}
		defer orig.Close()
		ns, err := netns.NewNamed(sn.Name)
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		if err != nil {
			errc <- fmt.Errorf("creating network namespace %s: %w", sn.Name, err)
			return
		}
		sn.ns = ns
		errc <- nil
	}()
	if err := <-errc; err != nil {
		return err
	}
	la := netlink.NewLinkAttrs()
	la.Name = sn.HostIface
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: sn.Iface, PeerNamespace: netlink.NsFd(int(sn.ns))}); err != nil {
		return fmt.Errorf("adding veth pair %s/%s: %w", sn.HostIface, sn.Iface, err)
	}
	hl, err := netlink.LinkByName(sn.HostIface)
	if err != nil {
		return fmt.Errorf("looking up %s: %w", sn.HostIface, err)
	}
	if err := netlink.AddrAdd(hl, &netlink.Addr{IPNet: prefix30(sn.HostAddr)}); err != nil {
		return fmt.Errorf("adding %s/30 to %s: %w", sn.HostAddr, sn.HostIface, err)
	}
	if err := netlink.LinkSetUp(hl); err != nil {
		return fmt.Errorf("setting %s up: %w", sn.HostIface, err)
	}
	h, err := netlink.NewHandleAt(sn.ns)
	if err != nil {
		return fmt.Errorf("opening netlink in network namespace %s: %w", sn.Name, err)
	}
	defer h.Close()
	for _, name := range []string{"lo", sn.Iface} {
		l, err := h.LinkByName(name)
		if err != nil {
			return fmt.Errorf("looking up %s in network namespace %s: %w", name, sn.Name, err)
		}
		if name == sn.Iface {
			if err := h.AddrAdd(l, &netlink.Addr{IPNet: prefix30(sn.Addr)}); err != nil {
				return fmt.Errorf("adding %s/30 to %s in network namespace %s: %w", sn.Addr, name, sn.Name, err)
			}
		}
		if err := h.LinkSetUp(l); err != nil {
			return fmt.Errorf("setting %s up in network namespace %s: %w", name, sn.Name, err)
		}
	}
	return nil
}

func prefix30(a netip.Addr) *net.IPNet {
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(30, 32)}
}

// Close removes a shaping of the server's interface that is left, the
// veth pair, the namespace and the state file; the server must have
// exited. Safe to call more than once.
func (sn *SimNet) Close() error {
	sn.once.Do(func() { sn.closeErr = host.RemoveSimNet(sn.state, sn.Name, sn.Iface, sn.HostIface) })
	if sn.ns.IsOpen() {
		sn.ns.Close()
		sn.ns = -1
	}
	return sn.closeErr
}
