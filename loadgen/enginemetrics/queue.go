package enginemetrics

import (
	"container/heap"
	"math"
	"sort"
	"time"
)

// Request is one request as the client saw it (CLOCK_MONOTONIC ns):
// sent at StartNs, its first token at FirstTokenNs (0: none), closed at
// EndNs. Measured requests count in the share; the others (warm-up)
// only hold slots.
type Request struct {
	StartNs, FirstTokenNs, EndNs int64
	Measured                     bool
}

// QueueEstimate is the time each request waited in the engine's queue
// before a slot took it, estimated by EstimateQueue.
type QueueEstimate struct {
	// Available is false when the engine gave no slot count; Reason says
	// why.
	Available bool
	Reason    string
	// Slots is the engine's concurrency as it reported it (the peak of
	// requests running); PeakWaiting the peak of requests waiting.
	Slots       int
	PeakWaiting float64
	// WaitNs is each request's estimate, in the order given.
	WaitNs []int64
	// Queued counts the measured requests with a wait; Unconfirmed the
	// waits the replay found but the engine did not report (no sample
	// with requests waiting while the request waited), set to 0.
	Queued, Unconfirmed int
	// TotalNs is the measured requests' queue time, TTFTNs their TTFT;
	// Share is TotalNs / TTFTNs.
	TotalNs, TTFTNs int64
	Share           float64
	// WaitingError is the mean absolute difference between the replay's
	// count of waiting requests and the engine's, over the samples (0:
	// the engine's queue was the client's requests, as the replay
	// assumes); Compared is the number of samples compared.
	WaitingError float64
	Compared     int
}

// EstimateQueue replays the client's requests through a FIFO queue in
// front of the engine's slots and returns each request's wait.
//
// The rule: the engine's slot count S is the peak of its requests-running
// gauge over the run. Requests are taken in the order they were sent; a
// request gets a slot when fewer than S earlier requests hold one, else
// when the earliest of them ends (its EndNs, as the client saw it). Its
// wait is the time from its start to that slot, at most its TTFT (the
// queue is a part of the TTFT). A wait counts only when the engine
// confirms it: a sample between the request's start and the later of its
// slot and one period after its start reports requests waiting > 0;
// otherwise it is 0 (counted as unconfirmed). The replay assumes the
// client's requests are the engine's only load; WaitingError says how
// far the replay's waiting count was from the engine's.
func EstimateQueue(reqs []Request, samples []Sample, period time.Duration) QueueEstimate {
	est := QueueEstimate{WaitNs: make([]int64, len(reqs))}
	peakRun, peakWait, waits := gauges(samples)
	est.PeakWaiting = peakWait
	switch {
	case peakRun < 0:
		est.Reason = "the engine reports no requests running"
		return est
	case peakRun < 1:
		est.Reason = "the engine never reported a request running"
		return est
	case len(waits) == 0:
		est.Reason = "the engine reports no requests waiting"
		return est
	}
	est.Available = true
	est.Slots = int(math.Round(peakRun))

	order, slotAt := replaySlots(reqs, est.Slots)
	est.addWaits(reqs, order, slotAt, waits, period.Nanoseconds())
	if est.TTFTNs > 0 {
		est.Share = float64(est.TotalNs) / float64(est.TTFTNs)
	}
	est.Compared = len(waits)
	est.WaitingError = waitingError(reqs, order, slotAt, waits)
	return est
}

// gauges returns the peak of the engine's running gauge (-1 when no sample
// reports it), the peak of its waiting gauge and the samples that report
// the waiting gauge.
func gauges(samples []Sample) (peakRun, peakWait float64, waits []Sample) {
	peakRun = -1.0
	for _, s := range samples {
		if v, ok := s.Values[RequestsRunning]; ok {
			peakRun = max(peakRun, v)
		}
		if v, ok := s.Values[RequestsWaiting]; ok {
			peakWait = max(peakWait, v)
			waits = append(waits, s)
		}
	}
	return peakRun, peakWait, waits
}

// replaySlots replays reqs through an engine of slots slots, first come
// first served: it returns the requests that ran, in order of start, and
// when each got its slot.
func replaySlots(reqs []Request, slots int) (order []int, slotAt []int64) {
	order = make([]int, 0, len(reqs))
	for i, r := range reqs {
		if r.StartNs > 0 && r.EndNs >= r.StartNs {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool { return reqs[order[a]].StartNs < reqs[order[b]].StartNs })
	slotAt = make([]int64, len(reqs)) // when each request got its slot
	busy := &endHeap{}
	for _, i := range order {
		r := reqs[i]
		at := r.StartNs
		// Slots freed before the request came are free.
		for busy.Len() > 0 && (*busy)[0] <= at {
			heap.Pop(busy)
		}
		if busy.Len() >= slots {
			at = (*busy)[0]
		}
		slotAt[i] = at
		if at > r.EndNs {
			// It left before a slot took it: it held none.
			continue
		}
		if at > r.StartNs {
			heap.Pop(busy)
		}
		heap.Push(busy, r.EndNs)
	}
	return order, slotAt
}

// addWaits sets each replayed request's wait, at most its TTFT and 0 where
// no sample confirms it, and sums the measured ones into est.
func (est *QueueEstimate) addWaits(reqs []Request, order []int, slotAt []int64, waits []Sample, periodNs int64) {
	for _, i := range order {
		r := reqs[i]
		w := slotAt[i] - r.StartNs
		limit := r.EndNs - r.StartNs
		if r.FirstTokenNs > 0 {
			limit = r.FirstTokenNs - r.StartNs
		}
		w = min(w, limit)
		if w > 0 && !confirmed(waits, r.StartNs, max(slotAt[i], r.StartNs+periodNs)) {
			if r.Measured {
				est.Unconfirmed++
			}
			w = 0
		}
		est.WaitNs[i] = w
		if !r.Measured || r.FirstTokenNs == 0 {
			continue
		}
		est.TTFTNs += r.FirstTokenNs - r.StartNs
		est.TotalNs += w
		if w > 0 {
			est.Queued++
		}
	}
}

// waitingError is the mean distance between the replay's waiting count at
// each sample and the engine's.
func waitingError(reqs []Request, order []int, slotAt []int64, waits []Sample) float64 {
	var sum float64
	for _, s := range waits {
		n := 0
		for _, i := range order {
			if reqs[i].StartNs <= s.Ns && s.Ns < slotAt[i] && s.Ns < reqs[i].EndNs {
				n++
			}
		}
		sum += math.Abs(float64(n) - s.Values[RequestsWaiting])
	}
	return sum / float64(len(waits))
}

// confirmed says whether a sample in [lo, hi] reports requests waiting.
func confirmed(waits []Sample, lo, hi int64) bool {
	i := sort.Search(len(waits), func(i int) bool { return waits[i].Ns >= lo })
	for ; i < len(waits) && waits[i].Ns <= hi; i++ {
		if waits[i].Values[RequestsWaiting] > 0 {
			return true
		}
	}
	return false
}

// endHeap holds the end times of the requests in the slots, earliest first.
type endHeap []int64

func (h endHeap) Len() int           { return len(h) }
func (h endHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h endHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)        { *h = append(*h, x.(int64)) }
func (h *endHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
