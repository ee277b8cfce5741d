package enginemetrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/bpfbench/bpfbench/internal/clock"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Bounds of the scrape period, and the defaults.
const (
	MinPeriod     = 250 * time.Millisecond
	MaxPeriod     = time.Second
	DefaultPeriod = 500 * time.Millisecond
	// DefaultMaxRaw bounds the raw series kept for an engine the
	// vocabulary does not know.
	DefaultMaxRaw = 64
	// maxBody bounds a response read (a vLLM /metrics is ~100 KiB).
	maxBody = 16 << 20
)

// Config configures a Scraper.
type Config struct {
	// URL is the Prometheus endpoint, e.g. http://127.0.0.1:8000/metrics.
	URL string
	// Period between scrapes: MinPeriod..MaxPeriod, DefaultPeriod when 0.
	Period time.Duration
	// Timeout of one scrape, shorter than the period (default 80% of
	// it), so that scrapes never overlap.
	Timeout time.Duration
	// MaxRaw bounds the raw series of an unknown engine (DefaultMaxRaw).
	MaxRaw int
	// Client makes the requests (default: a client of its own).
	Client *http.Client
	// Now is the clock, CLOCK_MONOTONIC ns (default clock.Now).
	Now    func() int64
	Logger *slog.Logger
}

// Sample is one successful scrape: its time (CLOCK_MONOTONIC ns, the
// middle of the request) and its values by vocabulary name (or by raw
// series name for an unknown engine). A name the engine does not export,
// or an interval value with nothing in the interval, is absent.
type Sample struct {
	Ns     int64
	Values map[string]float64
}

// Result is what a Scraper saw.
type Result struct {
	URL    string
	Engine string
	// VocabularyMatched says that the engine was recognised and at least
	// one vocabulary name was read from it; when false, the samples hold
	// RawSeries instead.
	VocabularyMatched bool
	Period, Timeout   time.Duration
	Scrapes, Failures int
	// FirstError and LastError are the texts of the first and the last
	// failed scrape.
	FirstError, LastError string
	Samples               []Sample
	// Sources says which of the engine's metrics each vocabulary name
	// came from.
	Sources map[string]string
	// RawSeries are the series kept for an unmatched engine; RawDropped
	// counts those left out over MaxRaw.
	RawSeries  []string
	RawDropped int
	// Overall holds the vocabulary over the whole scrape, from the first
	// sample to the last: the interval values (queue time, prefix-cache
	// hit rate) over that span, and the counters' increase in it.
	Overall map[string]float64
}

// Scraper reads an engine's /metrics on a period. Scrape and Run are not
// meant to be called concurrently with each other; Result may be called
// at any time.
type Scraper struct {
	cfg    Config
	client *http.Client
	log    *slog.Logger

	mu    sync.Mutex
	res   Result
	vocab *vocabulary
	prev  snapshot
	first snapshot
	raw   map[string]bool // the raw series kept, when unmatched
	ready bool            // the engine is decided
}

// New checks cfg and returns a Scraper; it makes no request.
func New(cfg Config) (*Scraper, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server metrics URL %q: want http://HOST:PORT/PATH", cfg.URL)
	}
	if cfg.Period == 0 {
		cfg.Period = DefaultPeriod
	}
	if cfg.Period < MinPeriod || cfg.Period > MaxPeriod {
		return nil, fmt.Errorf("server metrics period %v: use %v to %v", cfg.Period, MinPeriod, MaxPeriod)
	}
	if cfg.Timeout <= 0 || cfg.Timeout >= cfg.Period {
		cfg.Timeout = cfg.Period * 8 / 10
	}
	if cfg.MaxRaw <= 0 {
		cfg.MaxRaw = DefaultMaxRaw
	}
	if cfg.Now == nil {
		cfg.Now = clock.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	client := cfg.Client
	if client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 1
		client = &http.Client{Transport: tr}
	}
	return &Scraper{
		cfg: cfg, client: client, log: cfg.Logger.With("component", "enginemetrics"),
		res: Result{URL: cfg.URL, Engine: EngineUnknown, Period: cfg.Period, Timeout: cfg.Timeout},
	}, nil
}

// Scrape reads the endpoint once and records the sample, or the failure.
func (s *Scraper) Scrape(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	t0 := s.cfg.Now()
	fams, err := s.fetch(ctx)
	t1 := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.res.Scrapes++
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			err = fmt.Errorf("scraping %s: no answer within %v", s.cfg.URL, s.cfg.Timeout)
		}
		s.res.Failures++
		if s.res.FirstError == "" {
			s.res.FirstError = err.Error()
		}
		s.res.LastError = err.Error()
		return err
	}
	s.record(t0+(t1-t0)/2, fams)
	return nil
}

type families = map[string]*dto.MetricFamily

func (s *Scraper) fetch(ctx context.Context) (families, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.cfg.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", s.cfg.URL, err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4;q=1,*/*;q=0.1")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", s.cfg.URL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		hint := ""
		if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusNotImplemented {
			hint = " (llama-server serves /metrics only with --metrics)"
		}
		return nil, fmt.Errorf("scraping %s: %s%s", s.cfg.URL, resp.Status, hint)
	}
	if ct := resp.Header.Get("Content-Type"); strings.HasPrefix(ct, "text/html") || strings.HasPrefix(ct, "application/json") {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil, fmt.Errorf("scraping %s: answered %s, not Prometheus text", s.cfg.URL, ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, fmt.Errorf("scraping %s: not Prometheus text: %w", s.cfg.URL, err)
	}
	if len(fams) == 0 {
		return nil, fmt.Errorf("scraping %s: answered with no metrics", s.cfg.URL)
	}
	return fams, nil
}

// record adds a sample (under s.mu).
func (s *Scraper) record(ns int64, fams families) {
	if !s.ready {
		s.ready = true
		s.res.Engine = Detect(fams)
		if s.res.Engine != EngineUnknown {
			s.vocab = newVocabulary(s.res.Engine)
			snap := s.vocab.snapshot(fams)
			if vals := s.vocab.values(snap, nil); len(s.vocab.chosen) > 0 {
				s.res.VocabularyMatched = true
				s.prev, s.first = snap, snap
				s.res.Samples = append(s.res.Samples, Sample{Ns: ns, Values: vals})
				return
			}
			s.vocab = nil
		}
		raw := rawValues(fams)
		keys := make([]string, 0, len(raw))
		for k := range raw {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if len(keys) > s.cfg.MaxRaw {
			s.res.RawDropped = len(keys) - s.cfg.MaxRaw
			keys = keys[:s.cfg.MaxRaw]
		}
		s.res.RawSeries = keys
		s.raw = make(map[string]bool, len(keys))
		for _, k := range keys {
			s.raw[k] = true
		}
		s.log.Info("server metrics: no known engine's names; keeping raw series", "url", s.cfg.URL, "engine", s.res.Engine, "series", len(keys), "left_out", s.res.RawDropped)
	}
	if s.vocab != nil {
		snap := s.vocab.snapshot(fams)
		vals := s.vocab.values(snap, s.prev)
		s.prev = snap
		s.res.Samples = append(s.res.Samples, Sample{Ns: ns, Values: vals})
		return
	}
	vals := map[string]float64{}
	for k, v := range rawValues(fams) {
		if s.raw[k] {
			vals[k] = v
		}
	}
	s.res.Samples = append(s.res.Samples, Sample{Ns: ns, Values: vals})
}

// Run scrapes every period until ctx ends; a failed scrape is counted
// and the next one is tried on time. It returns when ctx ends, with no
// request left in flight.
func (s *Scraper) Run(ctx context.Context) {
	defer s.client.CloseIdleConnections()
	t := time.NewTicker(s.cfg.Period)
	defer t.Stop()
	warned := false
	for {
		if err := s.Scrape(ctx); err != nil && ctx.Err() == nil && !warned {
			warned = true
			s.log.Warn("server metrics scrape failed; the run goes on", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Result is a copy of what the scraper has seen so far.
func (s *Scraper) Result() Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.res
	r.Samples = slices.Clone(s.res.Samples)
	r.RawSeries = slices.Clone(s.res.RawSeries)
	if s.vocab != nil {
		r.Sources = s.vocab.Sources()
		r.Overall = s.vocab.overall(s.prev, s.first)
	}
	return r
}

// Probe says whether url answers with Prometheus text, within timeout.
func Probe(ctx context.Context, rawURL string, timeout time.Duration) error {
	s, err := New(Config{URL: rawURL, Period: MaxPeriod, Timeout: min(timeout, MaxPeriod-time.Millisecond)})
	if err != nil {
		return err
	}
	defer s.client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err = s.fetch(ctx)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("scraping %s: no answer within %v", rawURL, timeout)
	}
	return err
}

// MetricsURL is the default metrics endpoint of a load target: its scheme
// and host with the path /metrics; for a gRPC (KServe v2 / Triton) target,
// Triton's HTTP metrics port 8002 on the same host.
func MetricsURL(target string) (string, error) {
	if !strings.Contains(target, "://") {
		target = "http://" + target
	}
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("target %q has no host for its /metrics", target)
	}
	if u.Scheme == "grpc" || u.Scheme == "grpcs" {
		// A KServe v2 / Triton gRPC target: Triton serves its metrics
		// over HTTP on its metrics port, 8002 by default.
		scheme := "http"
		if u.Scheme == "grpcs" {
			scheme = "https"
		}
		return (&url.URL{Scheme: scheme, Host: net.JoinHostPort(u.Hostname(), "8002"), Path: "/metrics"}).String(), nil
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/metrics"}).String(), nil
}
