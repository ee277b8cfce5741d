package privtest

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// AssertReleased fails t when any of the programs or links, identified by
// their kernel IDs, still exists a few seconds after Close.
func AssertReleased(t testing.TB, progs []ebpf.ProgramID, links []link.ID) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, id := range progs {
		for {
			p, err := ebpf.NewProgramFromID(id)
			if errors.Is(err, os.ErrNotExist) {
				break
			}
			if err == nil {
				p.Close()
			}
			if time.Now().After(deadline) {
				t.Errorf("program %d still loaded after Close", id)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, id := range links {
		l, err := link.NewFromID(id)
		if err == nil {
			l.Close()
			t.Errorf("link %d still attached after Close", id)
		}
	}
}
