package critpath

// activeIndex holds every target thread's segments but its sleeps, for the
// timed-wait rule (activeClaims) of a server with many threads: what
// overlaps a sleep is found without a search per thread. Entries go into
// buckets by their start (bucketNs wide), appended in any order; a
// segment longer than longNs goes into a list of its own, scanned whole.
// A query over [x, y] reads the buckets from x less the longest bucketed
// entry to y, and the long list: its cost is what started in that window,
// however many threads there are, and an insert is O(1) (a sorted slice
// moved its tail on every segment that came out of order, most of them
// with thousands of threads).
type activeIndex struct {
	buckets map[int64][]activeSeg
	long    []activeSeg
	// lo is at most the lowest bucket key with entries (prune), once
	// loSet; maxLen the longest bucketed entry since the buckets were
	// last empty.
	lo, maxLen int64
	loSet      bool
	// free holds the arrays of buckets pruned, cleared, for the next
	// new buckets: a bucket's array grown anew from nothing for every
	// 4 ms of a busy server was most of the intake's allocations.
	free [][]activeSeg
	// hot is the bucket (key hotK) added to last while hotSet, out of
	// the map until sync: most adds are to the bucket of the one before
	// (a lookup and a store each were a tenth of the intake).
	hot    []activeSeg
	hotK   int64
	hotSet bool
}

// activeSeg is what the timed-wait rule reads of a segment.
type activeSeg struct {
	Start, End int64
	Holders    []Holder
	Tid        uint32
	State      State
}

const (
	bucketNs = 4e6
	longNs   = 50e6
	// maxFree bounds the arrays kept for reuse: a burst's many buckets
	// are let go once it has passed.
	maxFree = 64
)

func (a *activeIndex) add(s Segment) {
	e := activeSeg{Start: s.Start, End: s.End, Holders: s.Holders, Tid: s.Thread.Tid, State: s.State}
	if s.End-s.Start > longNs {
		a.long = append(a.long, e)
		return
	}
	if a.buckets == nil {
		a.buckets = map[int64][]activeSeg{}
	}
	k := s.Start / bucketNs
	if !a.loSet || k < a.lo {
		a.lo, a.loSet = k, true
	}
	a.maxLen = max(a.maxLen, s.End-s.Start)
	if a.hotSet && k == a.hotK {
		a.hot = append(a.hot, e)
		return
	}
	a.sync()
	b, ok := a.buckets[k]
	if !ok && len(a.free) > 0 {
		b = a.free[len(a.free)-1]
		a.free = a.free[:len(a.free)-1]
	}
	a.hot, a.hotK, a.hotSet = append(b, e), k, true
}

// sync puts the bucket added to last (hot) back into the map: before a
// read, or an add to another bucket.
func (a *activeIndex) sync() {
	if a.hotSet {
		a.buckets[a.hotK] = a.hot
		a.hot, a.hotSet = nil, false
	}
}

// each calls fn with every entry that overlaps [x, y).
func (a *activeIndex) each(x, y int64, fn func(*activeSeg)) {
	for i := range a.long {
		if s := &a.long[i]; s.End > x && s.Start < y {
			fn(s)
		}
	}
	a.sync()
	if len(a.buckets) == 0 {
		return
	}
	for k := max((x-a.maxLen)/bucketNs, a.lo); k <= (y-1)/bucketNs; k++ {
		b := a.buckets[k]
		for i := range b {
			if s := &b[i]; s.End > x && s.Start < y {
				fn(s)
			}
		}
	}
}

// prune forgets the entries that end at or before hz.
func (a *activeIndex) prune(hz int64) {
	a.sync()
	keep := a.long[:0]
	for _, s := range a.long {
		if s.End > hz {
			keep = append(keep, s)
		}
	}
	clear(a.long[len(keep):])
	a.long = keep
	if len(a.buckets) == 0 {
		a.loSet, a.maxLen = false, 0
		return
	}
	// A bucket's entries start before (k+1)·bucketNs and last at most
	// longNs: it goes whole once that is at or before hz. After a quiet
	// stretch the keys below the lowest one held are skipped at once.
	top := (hz - longNs) / bucketNs
	if top-a.lo > 4*int64(len(a.buckets)) {
		a.lo = top
		for k := range a.buckets {
			a.lo = min(a.lo, k)
		}
	}
	for ; len(a.buckets) > 0 && (a.lo+1)*bucketNs+longNs <= hz; a.lo++ {
		if b, ok := a.buckets[a.lo]; ok {
			delete(a.buckets, a.lo)
			if len(a.free) < maxFree {
				clear(b)
				a.free = append(a.free, b[:0])
			}
		}
	}
	a.loSet = len(a.buckets) > 0
}
