package enginemetrics

import (
	"testing"
	"time"
)

const ms = int64(time.Millisecond)

// samplesEvery reports running and waiting every 250 ms from 125 ms to endMs.
func samplesEvery(endMs int64, at func(ms int64) (running, waiting float64)) []Sample {
	var out []Sample
	for t := int64(125); t < endMs; t += 250 {
		r, w := at(t)
		out = append(out, Sample{Ns: 1000*ms + t*ms, Values: map[string]float64{RequestsRunning: r, RequestsWaiting: w}})
	}
	return out
}

// Two slots, four requests sent at once, each holding its slot 1 s: the
// last two wait for the first two to end.
func TestEstimateQueueTwoSlots(t *testing.T) {
	t0 := 1000 * ms
	reqs := []Request{
		{StartNs: t0, FirstTokenNs: t0 + 100*ms, EndNs: t0 + 1000*ms, Measured: true},
		{StartNs: t0 + 1*ms, FirstTokenNs: t0 + 101*ms, EndNs: t0 + 1001*ms, Measured: true},
		{StartNs: t0 + 2*ms, FirstTokenNs: t0 + 1100*ms, EndNs: t0 + 2000*ms, Measured: true},
		{StartNs: t0 + 3*ms, FirstTokenNs: t0 + 1101*ms, EndNs: t0 + 2001*ms, Measured: true},
	}
	samples := samplesEvery(2000, func(t int64) (float64, float64) {
		if t < 1000 {
			return 2, 2
		}
		return 2, 0
	})
	est := EstimateQueue(reqs, samples, 250*time.Millisecond)
	if !est.Available || est.Slots != 2 || est.PeakWaiting != 2 {
		t.Fatalf("estimate %+v", est)
	}
	want := []int64{0, 0, 998 * ms, 998 * ms}
	for i, w := range want {
		if est.WaitNs[i] != w {
			t.Errorf("request %d waited %v, want %v", i, time.Duration(est.WaitNs[i]), time.Duration(w))
		}
	}
	if est.Queued != 2 || est.Unconfirmed != 0 {
		t.Errorf("queued %d unconfirmed %d", est.Queued, est.Unconfirmed)
	}
	wantShare := float64(2*998) / float64(100+100+1098+1098)
	if d := est.Share - wantShare; d > 1e-9 || d < -1e-9 {
		t.Errorf("share %v, want %v", est.Share, wantShare)
	}
	if est.WaitingError != 0 || est.Compared != len(samples) {
		t.Errorf("waiting error %v over %d samples", est.WaitingError, est.Compared)
	}
}

// The replay's waits count only when the engine says requests waited; a
// wait is never longer than the TTFT; a request that gave up before a
// slot freed holds none.
func TestEstimateQueueRules(t *testing.T) {
	t0 := 1000 * ms
	reqs := []Request{
		{StartNs: t0, FirstTokenNs: t0 + 10*ms, EndNs: t0 + 1000*ms, Measured: true},
		// Left at 300 ms without a token (it never had a slot).
		{StartNs: t0 + 5*ms, EndNs: t0 + 300*ms, Measured: true},
		// Its TTFT is shorter than the replay's wait: the wait is the TTFT.
		{StartNs: t0 + 10*ms, FirstTokenNs: t0 + 500*ms, EndNs: t0 + 1500*ms, Measured: true},
	}
	quiet := samplesEvery(2000, func(int64) (float64, float64) { return 1, 0 })
	est := EstimateQueue(reqs, quiet, 250*time.Millisecond)
	if !est.Available || est.Slots != 1 || est.Queued != 0 || est.Unconfirmed != 3-1 || est.TotalNs != 0 {
		t.Errorf("with no waiting reported: %+v", est)
	}
	busy := samplesEvery(2000, func(int64) (float64, float64) { return 1, 1 })
	est = EstimateQueue(reqs, busy, 250*time.Millisecond)
	if est.WaitNs[1] != 295*ms || est.WaitNs[2] != 490*ms {
		t.Errorf("waits %v", est.WaitNs)
	}
	// Only requests with a first token count in the share.
	if est.Queued != 1 || est.TotalNs != 490*ms || est.TTFTNs != 10*ms+490*ms {
		t.Errorf("estimate %+v", est)
	}

	if est := EstimateQueue(reqs, []Sample{{Ns: t0, Values: map[string]float64{RequestsWaiting: 1}}}, time.Second); est.Available || est.Reason == "" {
		t.Errorf("no running gauge: %+v", est)
	}
	if est := EstimateQueue(reqs, nil, time.Second); est.Available {
		t.Errorf("no samples: %+v", est)
	}
}
