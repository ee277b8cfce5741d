package live

import (
	"cmp"
	"container/heap"
	"slices"

	"github.com/bpfbench/bpfbench/correlate/critpath"
)

// Slowest keeps the N slowest gaps after the first token, with their
// paths. The zero value keeps none; set N.
type Slowest struct {
	N int
	h gapHeap
}

// Add offers g; its steps are copied when it is kept (the engine's buffer
// is reused).
func (s *Slowest) Add(g critpath.Gap) {
	if g.Index == 0 || s.N <= 0 {
		return
	}
	if len(s.h) == s.N && g.Duration() <= s.h[0].Duration() {
		return
	}
	g.Steps = slices.Clone(g.Steps)
	if len(s.h) == s.N {
		s.h[0] = g
		heap.Fix(&s.h, 0)
	} else {
		heap.Push(&s.h, g)
	}
}

// Sorted are the kept gaps, slowest first.
func (s *Slowest) Sorted() []critpath.Gap {
	out := slices.Clone([]critpath.Gap(s.h))
	slices.SortFunc(out, func(a, b critpath.Gap) int {
		return cmp.Or(cmp.Compare(b.Duration(), a.Duration()), cmp.Compare(a.Request, b.Request), cmp.Compare(a.Index, b.Index))
	})
	return out
}

type gapHeap []critpath.Gap

func (h gapHeap) Len() int           { return len(h) }
func (h gapHeap) Less(i, j int) bool { return h[i].Duration() < h[j].Duration() }
func (h gapHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *gapHeap) Push(x any)        { *h = append(*h, x.(critpath.Gap)) }
func (h *gapHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
