// Package engine runs a real inference engine for tests and benchmarks:
// llama.cpp's llama-server (CPU) serving a tiny random-weight llama model,
// both built by tools/bench/engine/build.sh into /var/cache/bpfbench/llama.
package engine

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bpfbench/bpfbench/internal/spawn"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Cache paths written by tools/bench/engine/build.sh.
const (
	CacheDir     = "/var/cache/bpfbench/llama"
	DefaultBin   = CacheDir + "/bin/llama-server"
	DefaultModel = CacheDir + "/tiny-llama.gguf"

	// EnvServer and EnvModel override the cache paths.
	EnvServer = "BPFBENCH_LLAMA_SERVER"
	EnvModel  = "BPFBENCH_LLAMA_MODEL"

	buildHint = "run tools/bench/engine/build.sh (as root) to build llama-server and the tiny model"
)

// Paths are the engine's binary and model.
type Paths struct {
	Server string // llama-server
	Model  string // GGUF model
}

// Find returns the llama-server binary and model: $BPFBENCH_LLAMA_SERVER
// and $BPFBENCH_LLAMA_MODEL when set, else the build script's cache paths.
// The error says what is missing and how to build it.
func Find() (Paths, error) {
	p := Paths{Server: DefaultBin, Model: DefaultModel}
	if v := os.Getenv(EnvServer); v != "" {
		p.Server = v
	}
	if v := os.Getenv(EnvModel); v != "" {
		p.Model = v
	}
	var missing []string
	if fi, err := os.Stat(p.Server); err != nil {
		missing = append(missing, fmt.Sprintf("no llama-server at %s", p.Server))
	} else if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		missing = append(missing, fmt.Sprintf("llama-server %s is not an executable file", p.Server))
	}
	if fi, err := os.Stat(p.Model); err != nil {
		missing = append(missing, fmt.Sprintf("no model at %s", p.Model))
	} else if !fi.Mode().IsRegular() || fi.Size() == 0 {
		missing = append(missing, fmt.Sprintf("model %s is not a non-empty file", p.Model))
	}
	if len(missing) > 0 {
		return p, fmt.Errorf("engine: %s: %s (or set %s and %s)", strings.Join(missing, ", "), buildHint, EnvServer, EnvModel)
	}
	return p, nil
}

// Options configure Start. Zero values take the defaults.
type Options struct {
	Paths        Paths         // zero: Find()
	Threads      int           // -t, decode threads (default 2)
	Slots        int           // -np, parallel sequences (default 4)
	CtxSize      int           // -c, total context shared by the slots (default 1024 per slot)
	StartTimeout time.Duration // until /health answers ok (default 60 s)
	Args         []string      // extra llama-server arguments
	Env          []string      // extra environment (KEY=VALUE), after the process's own
	// SpinWait keeps llama.cpp's default OpenMP wait policy, where the
	// compute threads spin between the operations of a step. Without it
	// Start sets OMP_WAIT_POLICY=passive (threads sleep on a futex): when
	// the CPUs are shared, spinning threads wait on each other's time
	// slices and throughput falls tenfold (2 cores, -t 2, other load).
	SpinWait bool
	// Metrics serves the Prometheus endpoint /metrics (--metrics); without
	// it llama-server answers 501 there.
	Metrics bool
	// CPUs, when set (a list as taskset takes it: "0", "0,2-3"), pins the
	// server and every thread it starts to those CPUs (taskset -c), so
	// that a test can load the same CPUs on purpose.
	CPUs string
	// Netns runs the server in this named network namespace, listening
	// on Host (an address of that namespace); Port 0 picks a free one.
	Netns, Host string
	Port        int
	// Stderr, when set, also receives the server's output.
	Stderr io.Writer
}

// Server is a running engine (llama-server, or the PyTorch engine).
type Server struct {
	URL  string // http://127.0.0.1:PORT
	Port int
	Pid  int
	Cmd  *exec.Cmd

	out      *tailBuffer
	done     chan struct{}
	waitErr  error
	stopOnce sync.Once
}

// Start runs llama-server on a free 127.0.0.1 port and returns once its
// /health endpoint answers ok. Cancelling ctx kills the server.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Paths == (Paths{}) {
		p, err := Find()
		if err != nil {
			return nil, err
		}
		opts.Paths = p
	}
	if opts.Threads <= 0 {
		opts.Threads = 2
	}
	if opts.Slots <= 0 {
		opts.Slots = 4
	}
	if opts.CtxSize <= 0 {
		opts.CtxSize = 1024 * opts.Slots
	}
	host, port, err := listenAddr(opts.Host, opts.Port)
	if err != nil {
		return nil, err
	}
	args := []string{
		"--model", opts.Paths.Model,
		"--host", host, "--port", strconv.Itoa(port),
		"--threads", strconv.Itoa(opts.Threads), "--threads-batch", strconv.Itoa(opts.Threads),
		"--parallel", strconv.Itoa(opts.Slots),
		"--ctx-size", strconv.Itoa(opts.CtxSize),
		"--alias", "tiny-llama",
		"--no-webui",
	}
	if opts.Metrics {
		args = append(args, "--metrics")
	}
	args = append(args, opts.Args...)
	env := os.Environ()
	if !opts.SpinWait {
		env = append(env, "OMP_WAIT_POLICY=passive")
	}
	return launch(ctx, launchOptions{exe: opts.Paths.Server, args: args, env: append(env, opts.Env...), cpus: opts.CPUs,
		netns: opts.Netns, host: host, port: port, stderr: opts.Stderr, timeout: opts.StartTimeout})
}

// launchOptions: a server's command line, environment, CPUs and port.
type launchOptions struct {
	exe     string
	args    []string
	env     []string
	cpus    string
	netns   string // a named network namespace to run in (ip netns exec)
	host    string // the address it listens on (default 127.0.0.1)
	port    int
	stderr  io.Writer
	timeout time.Duration
}

// launch starts a server process (pinned to o.cpus when set) that dies
// with this process, and returns once its /health answers ok.
func launch(ctx context.Context, o launchOptions) (*Server, error) {
	exe, argv := o.exe, o.args
	if o.netns != "" {
		// ip execs the server in place: the pid stays the server's.
		ip, err := exec.LookPath("ip")
		if err != nil {
			return nil, fmt.Errorf("engine: running the server in network namespace %s: %w (install iproute2)", o.netns, err)
		}
		exe, argv = ip, append([]string{"netns", "exec", o.netns, exe}, argv...)
	}
	if o.cpus != "" {
		// taskset execs the server in its own process: the pid is the
		// server's, its affinity set before its first thread.
		ts, err := exec.LookPath("taskset")
		if err != nil {
			return nil, fmt.Errorf("engine: pinning the server to CPUs %s: %w (install util-linux)", o.cpus, err)
		}
		exe, argv = ts, append([]string{"--cpu-list", o.cpus, exe}, argv...)
	}
	if o.timeout <= 0 {
		o.timeout = 60 * time.Second
	}
	cmd := exec.CommandContext(ctx, exe, argv...)
	cmd.Cancel = func() error { return cmd.Process.Kill() }
	cmd.Env = o.env
	out := &tailBuffer{max: 64 << 10}
	var w io.Writer = out
	if o.stderr != nil {
		w = io.MultiWriter(out, o.stderr)
	}
	cmd.Stdout, cmd.Stderr = w, w
	s := &Server{
		URL:  "http://" + net.JoinHostPort(o.host, strconv.Itoa(o.port)),
		Port: o.port,
		Cmd:  cmd,
		out:  out,
		done: make(chan struct{}),
	}
	// The server dies with this process, however it ends (spawn).
	started := make(chan error, 1)
	go func() {
		if err := spawn.Start(cmd, spawn.Options{Signal: syscall.SIGKILL}); err != nil {
			started <- err
			return
		}
		started <- nil
		s.waitErr = cmd.Wait()
		close(s.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("engine: starting %s: %w", o.exe, err)
	}
	s.Pid = cmd.Process.Pid
	if err := s.waitHealthy(ctx, o.timeout); err != nil {
		s.Stop()
		return nil, fmt.Errorf("engine: %s %s: %w\n%s", o.exe, strings.Join(o.args, " "), err, s.Output())
	}
	return s, nil
}

func (s *Server) waitHealthy(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: 2 * time.Second}
	last := "no answer"
	for {
		select {
		case <-s.done:
			return fmt.Errorf("exited before it was ready (%v)", s.waitErr)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/health", nil)
		resp, err := client.Do(req)
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && bytes.Contains(b, []byte(`"ok"`)) {
				return nil
			}
			last = fmt.Sprintf("/health: %s %s", resp.Status, bytes.TrimSpace(b))
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("/health not ok after %v (last: %s)", timeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Metrics reads the server's /metrics once (Start with Metrics) and
// returns each family's value, its series summed: counters and gauges
// (llamacpp:tokens_predicted_total, llamacpp:requests_processing, ...).
func (s *Server) Metrics(ctx context.Context) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("engine: reading %s/metrics: %w", s.URL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("engine: %s/metrics: %s (start the server with Options.Metrics)", s.URL, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("engine: parsing %s/metrics: %w", s.URL, err)
	}
	out := make(map[string]float64, len(fams))
	for name, f := range fams {
		v := 0.0
		for _, m := range f.GetMetric() {
			switch {
			case m.Counter != nil:
				v += m.GetCounter().GetValue()
			case m.Gauge != nil:
				v += m.GetGauge().GetValue()
			case m.Untyped != nil:
				v += m.GetUntyped().GetValue()
			}
		}
		out[name] = v
	}
	return out, nil
}

// Output returns the last 64 KiB the server wrote to stdout and stderr.
func (s *Server) Output() string { return s.out.String() }

// Done is closed when the server has exited.
func (s *Server) Done() <-chan struct{} { return s.done }

// Stop sends SIGTERM, then SIGKILL after 5 s, and waits for the exit.
// It is safe to call more than once.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		select {
		case <-s.done:
			return
		default:
		}
		_ = s.Cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			_ = s.Cmd.Process.Kill()
			<-s.done
		}
	})
}

// listenAddr is where a server listens: host (default 127.0.0.1) and
// port (0: a free one).
func listenAddr(host string, port int) (string, int, error) {
	if host == "" {
		host = "127.0.0.1"
	}
	if port == 0 {
		p, err := freePort()
		if err != nil {
			return "", 0, fmt.Errorf("engine: no free port: %w", err)
		}
		port = p
	}
	return host, port, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
