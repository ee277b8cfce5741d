package enginemetrics

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bpfbench/bpfbench/internal/clock"
	"github.com/bpfbench/bpfbench/internal/engine"
	"github.com/bpfbench/bpfbench/internal/privtest"
)

// The real llama-server with 2 slots and 4 streams at once: the scraper
// sees the engine's queue (requests_deferred > 0), and the queue estimate
// finds the two requests that waited for a slot.
func TestRealEngineQueue(t *testing.T) {
	paths, err := engine.Find()
	if err != nil {
		privtest.SkipOptional(t, "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := engine.Start(ctx, engine.Options{Paths: paths, Threads: 2, Slots: 2, Args: []string{"--metrics"}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	murl, err := MetricsURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if err := Probe(ctx, murl, time.Second); err != nil {
		t.Fatalf("probe: %v\n%s", err, srv.Output())
	}
	s, err := New(Config{URL: murl, Period: 250 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { s.Run(sctx); close(done) }()

	reqs := make([]Request, 4)
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reqs[i] = stream(t, ctx, srv.URL, i)
		}()
	}
	wg.Wait()
	time.Sleep(300 * time.Millisecond)
	stop()
	<-done

	r := s.Result()
	if r.Engine != EngineLlamaCpp || !r.VocabularyMatched || len(r.Samples) < 3 {
		t.Fatalf("engine %q matched %v, %d samples, %d failures (%s)", r.Engine, r.VocabularyMatched, len(r.Samples), r.Failures, r.LastError)
	}
	peakWait, peakRun := 0.0, 0.0
	for _, smp := range r.Samples {
		peakWait = max(peakWait, smp.Values[RequestsWaiting])
		peakRun = max(peakRun, smp.Values[RequestsRunning])
	}
	if peakWait <= 0 || peakRun != 2 {
		t.Fatalf("peak waiting %v, running %v: want > 0 and 2 with 4 streams on 2 slots", peakWait, peakRun)
	}
	if r.Overall[GenerationTokens] <= 0 {
		t.Errorf("generated tokens over the run: %v", r.Overall)
	}
	est := EstimateQueue(reqs, r.Samples, r.Period)
	t.Logf("slots %d, waits %v, share of TTFT %.2f, waiting error %.2f over %d samples", est.Slots, est.WaitNs, est.Share, est.WaitingError, est.Compared)
	if !est.Available || est.Slots != 2 || est.Queued < 1 || est.Share <= 0 {
		t.Errorf("estimate %+v", est)
	}
}

// stream sends one streaming completion of 128 tokens and times it.
func stream(t *testing.T, ctx context.Context, base string, i int) Request {
	body, _ := json.Marshal(map[string]any{
		"prompt": fmt.Sprintf("request %d: tell a story", i), "max_tokens": 128, "ignore_eos": true, "stream": true,
	})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	r := Request{StartNs: clock.Now(), Measured: true}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("request %d: %v", i, err)
		return r
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if r.FirstTokenNs == 0 && strings.HasPrefix(sc.Text(), "data: {") {
			r.FirstTokenNs = clock.Now()
		}
	}
	r.EndNs = clock.Now()
	return r
}
