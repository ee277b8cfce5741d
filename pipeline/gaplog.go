package pipeline

import (
	"encoding/binary"
	"iter"

	"github.com/bpfbench/bpfbench/correlate/critpath"
)

// gapLog holds every flushed gap of a run in about 20 bytes a gap instead
// of a critGap's 96: a run keeps each gap to the end (the baselines, the
// p99 bands and gaps.jsonl.gz need them all), and an hour at 8 req/s of
// 64 tokens is 1.8 million gaps. A gap is varints: its start less the
// previous gap's start, its request, its index (the low bit: no arrival)
// and each cause's part (most are 0: one byte), its end being its start
// plus its parts, then the hypervisor's part of its cpu_runqueue (steal).
// Blocks are never copied as the log grows. A gap whose
// parts are negative or do not sum to it is kept whole beside them.
type gapLog struct {
	blocks [][]byte
	n      int
	last   int64 // the last gap's start
	wide   map[int]critGap
}

// gapBlock is the bytes of a block (256 KiB: about 13,000 gaps).
const gapBlock = 256 << 10

// gapMax is the most bytes a gap takes.
const gapMax = (4 + int(critpath.NumCauses)) * binary.MaxVarintLen64

func (l *gapLog) add(g critGap) {
	i := l.n
	l.n++
	sum, fits := int64(0), g.index >= 0 && g.request >= 0 && g.steal >= 0
	for _, v := range g.ns {
		fits = fits && v >= 0
		sum += v
	}
	if !fits || sum != g.end-g.start {
		if l.wide == nil {
			l.wide = map[int]critGap{}
		}
		l.wide[i] = g
	}
	if len(l.blocks) == 0 || cap(l.blocks[len(l.blocks)-1])-len(l.blocks[len(l.blocks)-1]) < gapMax {
		l.blocks = append(l.blocks, make([]byte, 0, gapBlock))
	}
	b := &l.blocks[len(l.blocks)-1]
	*b = binary.AppendVarint(*b, g.start-l.last)
	l.last = g.start
	*b = binary.AppendUvarint(*b, uint64(g.request))
	ix := uint64(g.index) << 1
	if g.noArrival {
		ix |= 1
	}
	*b = binary.AppendUvarint(*b, ix)
	for _, v := range g.ns {
		*b = binary.AppendUvarint(*b, uint64(v))
	}
	*b = binary.AppendUvarint(*b, uint64(g.steal))
}

func (l *gapLog) len() int { return l.n }

// bytes is the log's size.
func (l *gapLog) bytes() int {
	n := 0
	for _, b := range l.blocks {
		n += len(b)
	}
	return n
}

// all yields the gaps in the order they were added.
func (l *gapLog) all() iter.Seq[critGap] {
	return func(yield func(critGap) bool) {
		i, start := 0, int64(0)
		for _, b := range l.blocks {
			for len(b) > 0 {
				d, k := binary.Varint(b)
				b = b[k:]
				start += d
				req, k := binary.Uvarint(b)
				b = b[k:]
				ix, k := binary.Uvarint(b)
				b = b[k:]
				g := critGap{request: int32(req), index: int32(ix >> 1), noArrival: ix&1 != 0, start: start, end: start}
				for c := range g.ns {
					v, k := binary.Uvarint(b)
					b = b[k:]
					g.ns[c] = int64(v)
					g.end += int64(v)
				}
				v, k := binary.Uvarint(b)
				b = b[k:]
				g.steal = int64(v)
				if w, ok := l.wide[i]; ok {
					g = w
				}
				if !yield(g) {
					return
				}
				i++
			}
		}
	}
}
