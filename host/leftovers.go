package host

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/bpfbench/bpfbench/internal/atomicfile"
	"github.com/bpfbench/bpfbench/internal/owner"
	"github.com/bpfbench/bpfbench/perturb"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Leftover is something bpfbench created on the machine, from its state
// file in the state directory: the simulated server's network namespace
// with its veth pair, or a shaped interface (a tbf and the root qdisc it
// replaced).
type Leftover struct {
	Kind  string      `json:"kind"` // "netns" or "qdisc"
	What  string      `json:"what"`
	Owner owner.Owner `json:"owner"`
	// Alive: the owner runs (in use, not a leftover yet).
	Alive   bool      `json:"alive"`
	Started time.Time `json:"started"`
	State   string    `json:"state_file"`
}

// Leftovers lists what the state directory records, its owners alive or
// dead.
func Leftovers(stateDir string) []Leftover {
	var out []Leftover
	paths, _ := filepath.Glob(filepath.Join(stateDir, SimNetPrefix+"*.json"))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var st SimNetState
		if json.Unmarshal(b, &st) != nil || st.Netns == "" {
			continue
		}
		out = append(out, Leftover{Kind: "netns", What: fmt.Sprintf("network namespace %s with veth %s", st.Netns, st.HostIface),
			Owner: st.Owner, Alive: st.Owner.Alive(), Started: st.Started, State: p})
	}
	for _, n := range owner.NotesIn(stateDir) {
		alive := n.Owner.Alive()
		for _, x := range n.Notes {
			what := "the file " + x.Value
			if x.Kind == owner.KindTempDir {
				if alive {
					continue // a running writer's temporary files are its own
				}
				what = "temporary files in " + x.Value
			}
			out = append(out, Leftover{Kind: x.Kind, What: what, Owner: n.Owner, Alive: alive, State: n.State})
		}
	}
	for _, sh := range perturb.ShapedIn(stateDir) {
		what := "the tbf on " + sh.Iface
		if sh.Netns != "" {
			what += " in network namespace " + sh.Netns
		}
		out = append(out, Leftover{Kind: "qdisc", What: what, Owner: sh.Owner, Alive: sh.Owner.Alive(), Started: sh.Started, State: sh.State})
	}
	return out
}

// SweepLeftovers removes what dead bpfbench processes left in the state
// directory's records (a running owner's are its own), qdiscs first (a
// shaping inside a namespace goes with it anyway), and says what it
// removed; an error names what could not be removed.
func SweepLeftovers(stateDir string) (removed []Leftover, err error) {
	var errs []error
	for _, kind := range []string{"qdisc", "netns"} {
		for _, l := range Leftovers(stateDir) {
			if l.Kind != kind || l.Alive {
				continue
			}
			var e error
			switch l.Kind {
			case "qdisc":
				var sh perturb.Shaped
				for _, s := range perturb.ShapedIn(stateDir) {
					if s.State == l.State {
						sh = s
					}
				}
				_, e = perturb.Restore(stateDir, sh.Netns, sh.Iface)
			case "netns":
				e = removeSimNetState(l.State)
			}
			if e != nil {
				errs = append(errs, fmt.Errorf("%s (left by %s): %w", l.What, l.Owner, e))
				continue
			}
			removed = append(removed, l)
		}
	}
	for _, n := range owner.NotesIn(stateDir) {
		if n.Owner.Alive() {
			continue
		}
		err := n.Undo(func(x owner.Noted) error {
			l := Leftover{Kind: x.Kind, What: "the file " + x.Value, Owner: n.Owner, State: n.State}
			switch x.Kind {
			case owner.KindFile:
				if err := os.Remove(x.Value); err != nil {
					return err
				}
			case owner.KindTempDir:
				gone, err := atomicfile.Clean(x.Value)
				if err != nil || len(gone) == 0 {
					return err
				}
				l.What = fmt.Sprintf("%d temporary %s in %s", len(gone), pluralWord(len(gone), "file", "files"), x.Value)
			default:
				return nil
			}
			removed = append(removed, l)
			return nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("what %s noted: %w", n.Owner, err))
		}
	}
	return removed, errors.Join(errs...)
}

// removeSimNetState removes the namespace a state file records.
func removeSimNetState(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var st SimNetState
	if err := json.Unmarshal(b, &st); err != nil {
		return err
	}
	return RemoveSimNet(path, st.Netns, st.Iface, st.HostIface)
}

// SimNetState is the state file of the simulated server's network
// namespace (llmsim/launch's SimNet), which records it before creating it.
type SimNetState struct {
	Netns     string `json:"netns"`
	Iface     string `json:"iface"`
	HostIface string `json:"host_iface"`
	owner.Owner
	Started time.Time `json:"started"`
}

// SimNetPrefix begins the name of a SimNetState file in the state directory.
const SimNetPrefix = "simnet-"

// RemoveSimNet removes the network namespace name, its veth pair
// (hostIface) and a tbf left on iface, then its state file.
func RemoveSimNet(state, name, iface, hostIface string) error {
	var errs []error
	// A tbf a dead run left on the server's side: its state file goes,
	// the qdisc goes with the interface.
	if _, err := os.Stat(filepath.Join(filepath.Dir(state), fmt.Sprintf("tbf-%s-%s.json", name, iface))); err == nil {
		if _, err := perturb.Restore(filepath.Dir(state), name, iface); err != nil {
			errs = append(errs, err)
		}
	}
	if l, err := netlink.LinkByName(hostIface); err == nil {
		if err := netlink.LinkDel(l); err != nil {
			errs = append(errs, fmt.Errorf("removing veth %s: %w", hostIface, err))
		}
	}
	if _, err := os.Stat(filepath.Join("/run/netns", name)); err == nil {
		if err := netns.DeleteNamed(name); err != nil {
			errs = append(errs, fmt.Errorf("removing network namespace %s: %w", name, err))
		}
	}
	if len(errs) == 0 {
		if err := os.Remove(state); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// pluralWord is one when n is 1, else many.
func pluralWord(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
