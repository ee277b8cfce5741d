// Package prom serves a Prometheus registry the way Prometheus' own servers
// do: /metrics, a landing page, /-/healthy and /-/ready, behind
// exporter-toolkit's web configuration (TLS, basic auth). It knows nothing of
// collectors: the daemon hands it a registry and a readiness function.
package prom

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/exporter-toolkit/web"
)

// Config says what a Server serves.
type Config struct {
	// Name, Description and Version are shown on the landing page.
	Name, Description, Version string
	// WebConfig is an exporter-toolkit web configuration file (TLS, basic
	// auth); "" serves plain HTTP.
	WebConfig string
	// Ready reports whether the server is ready to be scraped (nil: ready
	// once serving). /-/ready answers 503 with its error otherwise.
	Ready func() error
	// Pprof serves the Go runtime's profiles under /debug/pprof/ and links
	// them from the landing page.
	Pprof bool
	// Routes are further handlers served beside /metrics, keyed by
	// http.ServeMux pattern ("POST /api/v1/sessions"), behind the same web
	// configuration (the daemon's session API).
	Routes map[string]http.Handler
	Logger *slog.Logger
}

// Handler is the server's HTTP handler for reg.
func Handler(reg *prometheus.Registry, cfg Config) (http.Handler, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	mux := http.NewServeMux()
	// Content negotiation: protobuf (the only exposition that carries
	// native histograms, with their classic buckets beside them),
	// OpenMetrics 1.0 and text 0.0.4 (classic buckets only).
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelError), Registry: reg,
		EnableOpenMetrics: true,
	}))
	mux.HandleFunc("/-/healthy", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "%s is Healthy.\n", cfg.Name)
	})
	mux.HandleFunc("/-/ready", func(w http.ResponseWriter, _ *http.Request) {
		if cfg.Ready != nil {
			if err := cfg.Ready(); err != nil {
				http.Error(w, fmt.Sprintf("%s is not ready: %v\n", cfg.Name, err), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintf(w, "%s is Ready.\n", cfg.Name)
	})
	profiling := "false"
	if cfg.Pprof {
		profiling = "true"
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	for pattern, h := range cfg.Routes {
		mux.Handle(pattern, h)
	}
	landing, err := web.NewLandingPage(web.LandingConfig{
		Name: cfg.Name, Description: cfg.Description, Version: cfg.Version, Profiling: profiling,
		Links: []web.LandingLinks{
			{Address: "/metrics", Text: "Metrics"},
			{Address: "/-/healthy", Text: "Health"},
			{Address: "/-/ready", Text: "Readiness"},
		},
	})
	if err != nil {
		return nil, err
	}
	mux.Handle("/", landing)
	return mux, nil
}

// Serve serves reg on l until ctx is done, then shuts down within 5 s.
func Serve(ctx context.Context, l net.Listener, reg *prometheus.Registry, cfg Config) error {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	h, err := Handler(reg, cfg)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	addr := l.Addr().String()
	no := false
	webConfig := cfg.WebConfig
	flags := &web.FlagConfig{WebListenAddresses: &[]string{addr}, WebSystemdSocket: &no, WebConfigFile: &webConfig}
	done := make(chan error, 1)
	go func() {
		log.Info("serving metrics", "address", addr, "web_config", webConfig)
		err := web.Serve(l, srv, flags, log)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("serving metrics: %w", err)
		}
		return nil
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		// Shutdown counts a connection that has sent nothing yet as
		// busy for its first 5 s: an HTTP client's spare connection (Go's
		// transport dials one, finds another free, and parks the new one
		// unused) holds it to the deadline. Past the grace period the
		// connections are closed; that is a shutdown, not an error.
		log.Debug("closing connections still open after the 5 s grace period")
		err = srv.Close()
	}
	if serr := <-done; serr != nil && err == nil {
		err = fmt.Errorf("serving metrics: %w", serr)
	}
	return err
}
