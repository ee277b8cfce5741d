package run

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/loadgen/enginemetrics"
	"github.com/bpfbench/bpfbench/loadgen/transport"
	"github.com/bpfbench/bpfbench/result"
)

// ServerMetrics scrapes the server's own /metrics during the load (run's,
// and sweep --pid's signals in job/knee).
type ServerMetrics struct {
	url   string
	note  string                 // why nothing is scraped
	s     *enginemetrics.Scraper // nil: nothing scraped
	res   *enginemetrics.Result
	stopS context.CancelFunc // start's, for stop
	done  chan struct{}
}

// serverProbeTimeout bounds the look for the target's /metrics.
const serverProbeTimeout = 2 * time.Second

// NewServerMetrics resolves the endpoint: cfg.ServerMetrics, or the load
// target's /metrics when it answers with Prometheus text.
func NewServerMetrics(ctx context.Context, cfg RunConfig, log *slog.Logger) (*ServerMetrics, error) {
	sm := &ServerMetrics{url: cfg.ServerMetrics}
	if sm.url == "off" {
		return &ServerMetrics{}, nil
	}
	auto := sm.url == ""
	if auto {
		target := cfg.Load.Target.URL
		if cfg.Load.Target.Protocol == transport.ProtocolKServeGRPC && !strings.Contains(target, "://") {
			// HOST:PORT of a gRPC server: its metrics are not on that port
			// (Triton's are on 8002).
			target = "grpc://" + target
		}
		u, err := enginemetrics.MetricsURL(target)
		if err != nil {
			sm.note = err.Error()
			return sm, nil
		}
		sm.url = u
	}
	s, err := enginemetrics.New(enginemetrics.Config{URL: sm.url, Period: cfg.ServerMetricsPeriod, Logger: cfg.Logger})
	if err != nil {
		if auto {
			sm.note = err.Error()
			return sm, nil
		}
		return nil, fmt.Errorf("--server-metrics: %w", err)
	}
	if auto {
		if err := enginemetrics.Probe(ctx, sm.url, serverProbeTimeout); err != nil {
			sm.note = "no Prometheus endpoint at the target's /metrics (" + err.Error() + "); pass --server-metrics URL"
			log.Info("server metrics not found", "url", sm.url, "err", err)
			return sm, nil
		}
	}
	sm.s = s
	return sm, nil
}

// run scrapes until ctx is done and keeps what the scrapes saw.
func (sm *ServerMetrics) run(ctx context.Context) {
	if sm.s == nil {
		return
	}
	sm.s.Run(ctx)
	r := sm.s.Result()
	sm.res = &r
}

// Start scrapes in the background until Stop (sweep --pid's signals).
func (sm *ServerMetrics) Start(ctx context.Context) {
	if sm.s == nil {
		return
	}
	sctx, cancel := context.WithCancel(ctx)
	sm.stopS, sm.done = cancel, make(chan struct{})
	go func() {
		defer close(sm.done)
		sm.run(sctx)
	}()
}

// Stop ends Start's scrapes and keeps what they saw; it may be called
// again.
func (sm *ServerMetrics) Stop() {
	if sm.stopS == nil {
		return
	}
	sm.stopS()
	<-sm.done
	sm.stopS = nil
}

func (sm *ServerMetrics) result() *enginemetrics.Result { return sm.res }

// Scraper is the scraper of the server's metrics, nil when nothing is
// scraped.
func (sm *ServerMetrics) Scraper() *enginemetrics.Scraper { return sm.s }

// Note says why nothing is scraped.
func (sm *ServerMetrics) Note() string { return sm.note }

// report is the result.json sections: the samples on the load's time
// axis, the gauges' peaks, and the queue estimate of every request.
func (sm *ServerMetrics) report(res *loadgen.Result) (*result.ServerMetrics, *result.ServerQueue) {
	if sm.url == "" && sm.note == "" {
		return nil, nil
	}
	out := &result.ServerMetrics{URL: sm.url, Note: sm.note}
	r := sm.res
	if r == nil {
		return out, nil
	}
	out.Found = true
	out.Engine, out.VocabularyMatched = r.Engine, r.VocabularyMatched
	out.PeriodMs = float64(r.Period) / 1e6
	out.Scrapes, out.ScrapeFailures = r.Scrapes, r.Failures
	out.FirstError, out.LastError = r.FirstError, r.LastError
	out.Sources, out.Overall = r.Sources, r.Overall
	out.RawSeries, out.RawSeriesDropped = r.RawSeries, r.RawDropped
	out.Samples = make([]result.ServerSample, 0, len(r.Samples))
	if r.VocabularyMatched {
		out.Peaks = map[string]float64{}
	}
	for _, smp := range r.Samples {
		out.Samples = append(out.Samples, result.ServerSample{T: float64(smp.Ns-res.StartNs) / 1e9, Values: smp.Values})
		if !r.VocabularyMatched {
			continue
		}
		for _, name := range []string{enginemetrics.RequestsRunning, enginemetrics.RequestsWaiting, enginemetrics.KVCacheUsage} {
			if v, ok := smp.Values[name]; ok {
				out.Peaks[name] = max(out.Peaks[name], v)
			}
		}
	}
	if !r.VocabularyMatched {
		return out, nil
	}
	return out, serverQueue(res, r)
}

// serverQueueRule is the rule of the server_queue estimate, as
// result.json states it.
const serverQueueRule = "each request's wait for a slot, replayed in send order (FIFO) over the engine's slots " +
	"(its peak of requests running), a slot freeing when a request ends; counted only while the engine " +
	"reported requests waiting, and at most the request's TTFT. The share is the queue time over the TTFT, " +
	"summed over the successful measured requests."

// serverQueue estimates each request's time in the engine's queue.
func serverQueue(res *loadgen.Result, r *enginemetrics.Result) *result.ServerQueue {
	reqs := make([]enginemetrics.Request, 0, len(res.Warmup)+len(res.Records))
	add := func(rec *loadgen.Record, measured bool) {
		q := enginemetrics.Request{StartNs: rec.StartNs, EndNs: rec.EndNs, Measured: measured && rec.Success}
		if rec.Success && len(rec.ChunkNs) > 0 {
			q.FirstTokenNs = rec.ChunkNs[0]
		}
		reqs = append(reqs, q)
	}
	for i := range res.Warmup {
		add(&res.Warmup[i], false)
	}
	for i := range res.Records {
		add(&res.Records[i], true)
	}
	est := enginemetrics.EstimateQueue(reqs, r.Samples, r.Period)
	q := &result.ServerQueue{Rule: serverQueueRule, Available: est.Available, Reason: est.Reason}
	if !est.Available {
		return q
	}
	q.Slots, q.RequestsQueued, q.Unconfirmed = est.Slots, est.Queued, est.Unconfirmed
	q.ShareOfTTFT = est.Share
	q.TotalMs, q.TTFTMs = float64(est.TotalNs)/1e6, float64(est.TTFTNs)/1e6
	q.WaitingError = est.WaitingError
	if v, ok := r.Overall[enginemetrics.QueueTimeMs]; ok {
		q.EngineMeanMs = &v
	}
	for i := range res.Records {
		w := est.WaitNs[len(res.Warmup)+i]
		rec := &res.Records[i]
		if w <= 0 || !rec.Success || len(rec.ChunkNs) == 0 {
			continue
		}
		ms := float64(w) / 1e6
		q.MaxMs = max(q.MaxMs, ms)
		q.Requests = append(q.Requests, result.QueuedRequest{Index: rec.Index, QueueMs: ms, TTFTMs: float64(rec.TTFTNs()) / 1e6})
	}
	if est.Queued > 0 {
		q.MeanMs = q.TotalMs / float64(est.Queued)
	}
	return q
}
