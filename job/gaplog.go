package job

import (
	"iter"
	"math"

	"github.com/bpfbench/bpfbench/correlate/critpath"
)

// gapLog holds every flushed gap of a run, 48 bytes a gap instead of a
// critGap's 96, in blocks that are never copied as the log grows: a run
// keeps each gap to the end (the baselines, the p99 bands and
// gaps.jsonl.gz need them all), and an hour at 8 req/s of 64 tokens is
// 1.8 million gaps. A gap whose parts do not fit (one of 2^32 ns, 4.3 s,
// or more) is kept whole beside the blocks.
type gapLog struct {
	blocks [][]packedGap
	n      int
	wide   map[int]critGap
}

// gapBlock is the gaps a block holds (384 KiB).
const gapBlock = 8192

// packedGap is a critGap whose end is its start plus its parts (the parts
// of a gap sum to it), each part in 32 bits.
type packedGap struct {
	start   int64
	request int32
	index   uint32 // the top bit: no arrival
	ns      [critpath.NumCauses]uint32
}

const noArrivalBit = 1 << 31

func (l *gapLog) add(g critGap) {
	i := l.n
	l.n++
	if i%gapBlock == 0 {
		l.blocks = append(l.blocks, make([]packedGap, 0, gapBlock))
	}
	b := &l.blocks[len(l.blocks)-1]
	p := packedGap{start: g.start, request: g.request, index: uint32(g.index)}
	if g.noArrival {
		p.index |= noArrivalBit
	}
	sum, fits := int64(0), g.index >= 0
	for c, v := range g.ns {
		if v < 0 || v > math.MaxUint32 {
			fits = false
			break
		}
		p.ns[c] = uint32(v)
		sum += v
	}
	if !fits || sum != g.end-g.start {
		if l.wide == nil {
			l.wide = map[int]critGap{}
		}
		l.wide[i] = g
	}
	*b = append(*b, p)
}

func (l *gapLog) len() int { return l.n }

// all yields the gaps in the order they were added.
func (l *gapLog) all() iter.Seq[critGap] {
	return func(yield func(critGap) bool) {
		i := 0
		for _, b := range l.blocks {
			for k := range b {
				g, ok := l.wide[i]
				if !ok {
					p := &b[k]
					g = critGap{request: p.request, index: int32(p.index &^ noArrivalBit), start: p.start,
						noArrival: p.index&noArrivalBit != 0}
					end := p.start
					for c, v := range p.ns {
						g.ns[c] = int64(v)
						end += int64(v)
					}
					g.end = end
				}
				if !yield(g) {
					return
				}
				i++
			}
		}
	}
}
