package cuda

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/uprobecost"
)

// TestLinkModes runs the same driver workload (launches, synchronizes,
// copies, allocations with a failure, graphs, pool allocations running out)
// under uprobe_multi links and under the per-symbol perf-event uprobes of
// kernels without them: in both every probed call is counted as the driver
// made it, with its errors; the multi section holds three links per
// library (entries, returns, launches), the fallback one per probe; and
// every link is released on Close (runSection).
func TestLinkModes(t *testing.T) {
	privtest.Require(t)
	for _, mode := range []string{"uprobe_multi", "per-symbol"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "uprobe_multi" && !uprobecost.HaveMulti() {
				privtest.Skip(t, "this kernel has no uprobe_multi links (Linux 6.6+)")
			}
			perSymbolOnly = mode == "per-symbol"
			defer func() { perSymbolOnly = false }()
			for _, api := range []string{"driver", "runtime"} {
				t.Run(api, func(t *testing.T) {
					d := startDriver(t, api, "--launches", "30", "--syncs", "3", "--kernel-us", "300", "--allocs", "3", "--fail-alloc",
						"--copies", "2", "--copy-bytes", "4096", "--graphs", "3", "--fail-instantiate", "--exhaust", "2", "--pool-bytes", "4194304")
					s, stop := runSection(t, d.pid(), SectionConfig{})
					wantLinks := wantLinkCount(t, s, uint32(d.pid()), mode == "uprobe_multi")
					if got := len(s.LinkIDs()); got != wantLinks {
						t.Errorf("%d links, want %d", got, wantLinks)
					}
					d.release(t)
					r := d.graphResult(t)
					stop()
					sum := s.Aggregate()
					probed := 0
					for name, n := range r.Calls {
						id, ok := CallByName(name)
						if !ok {
							continue
						}
						probed++
						c, _ := findCall(sum, name)
						if c.Count != n {
							t.Errorf("%s: count %d, the driver made %d", name, c.Count, n)
						}
						if id.Info().returns() && c.Errors != r.Errors[name] {
							t.Errorf("%s: errors %d, the driver saw %d", name, c.Errors, r.Errors[name])
						}
					}
					if probed < 10 || r.Instantiations != 3 || r.PoolOOM != 2 {
						t.Errorf("the driver did not do what was asked: %d probed calls, %+v", probed, r)
					}
					t.Logf("%s, %s: %d probed calls counted as the driver made them, %d links", mode, api, probed, wantLinks)
				})
			}
		})
	}
}

// wantLinkCount is what the section should hold for tgid, from the
// symbols of the libraries it attached: with multi one link for the entry
// probes, one for the return probes and one for the launch probes of each
// library; without, one link per probe.
func wantLinkCount(t *testing.T, s *Section, tgid uint32, multi bool) int {
	t.Helper()
	n := 0
	for _, l := range s.Libraries(tgid) {
		offs, err := symbolOffsets(l.Open)
		if err != nil {
			t.Fatal(err)
		}
		var entries, returns, launches int
		done := map[uint64]bool{}
		for _, info := range calls {
			for _, name := range append([]string{info.Name}, info.Aliases...) {
				off, ok := offs[name]
				if !ok || done[off] {
					continue
				}
				done[off] = true
				switch {
				case info.Kind == Launch:
					launches++
				case info.returns():
					entries++
					returns++
				default:
					entries++
				}
			}
		}
		if entries+launches != l.Symbols {
			t.Fatalf("%s: %d probes for %d symbols", l.Path, entries+launches, l.Symbols)
		}
		if multi {
			for _, k := range []int{entries, returns, launches} {
				n += min(k, 1)
			}
		} else {
			n += entries + returns + launches
		}
	}
	return n
}

// Attaching to a process that no longer exists fails in both link modes
// and leaves no link behind; Close releases the programs.
func TestAttachErrorLeavesNoLink(t *testing.T) {
	privtest.Require(t)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	libs, err := FindLibraries(os.Getpid(), []string{libPath("driver"), libPath("runtime")})
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"uprobe_multi", "per-symbol"} {
		t.Run(mode, func(t *testing.T) {
			perSymbolOnly = mode == "per-symbol"
			defer func() { perSymbolOnly = false }()
			c := New(Config{})
			if err := c.Start(context.Background()); err != nil {
				t.Fatalf("start: %+v", err)
			}
			progs := c.ProgramIDs()
			got, err := c.Attach(uint32(gone.Process.Pid), libs, false)
			t.Logf("attaching to exited pid %d: %v", gone.Process.Pid, err)
			if err == nil || len(got) != 0 {
				t.Errorf("attached %v to an exited process (err %v)", got, err)
			}
			if n := len(c.LinkIDs()); n != 0 {
				t.Errorf("%d links left after a failed attach", n)
			}
			if err := c.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
			privtest.AssertReleased(t, progs, nil)
		})
	}
}
