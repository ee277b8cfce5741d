package sim

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bpfbench/bpfbench/internal/spawn"
	"golang.org/x/sys/unix"
)

// Two processes (Config.Processes 2), as vLLM's V1 splits its API server
// from its engine core: the frontend (this process) serves HTTP and gRPC,
// counts the prompt's tokens, builds the chunks' text and serves /metrics;
// the engine (a child process running this executable with
// EngineSocketEnv set, or `llmsim --engine-socket FD`) runs the scheduler
// and the steps: their CPU work, IO and CUDA calls. They talk over a unix
// socketpair in length-prefixed frames: a uint32 length (little endian) of
// what follows, a type byte, the payload.
//
//	frontend → engine  'c' the Config as JSON (first frame)
//	engine → frontend  'r' ready: empty, or why the engine could not start
//	frontend → engine  'q' a request: rid u64, prompt u32, max u32, ignore_eos u8, arrival i64 (CLOCK_MONOTONIC ns)
//	frontend → engine  'x' a cancel: rid u64
//	engine → frontend  's' a step: steps, io_errors, cuda_errors i64; waiting, running i32;
//	                       duration i64 ns (-1: no step ran); cache f64; end i64 (CLOCK_MONOTONIC ns);
//	                       generated u32; n u32 queue times i64 ns; n u32 tokens {rid u64, index u32, finish u8, prompt u32}
//	                       (finish: 0 none, 1 length, 2 stop, 3 out of memory: the KV cache allocation failed)
//
// One request is a 'q' frame; each step's tokens go out in one 's' frame
// written by the engine's thread as the step ends, and the frontend hands
// them to the requests' handlers, which write them to the clients. The
// engine's metrics ride on the step frames, so /metrics names and values
// stay those of one process. The engine dies with the frontend (Pdeathsig,
// and the end of the socket).

// EngineSocketEnv, when set in a process's environment to a file
// descriptor, makes the process the engine of a frontend (package init):
// any executable that links this package can be re-executed as one, test
// binaries included.
const EngineSocketEnv = "LLMSIM_ENGINE_SOCKET"

// ProcessesEnv sets the default of --processes (Config.Processes), so that
// tests written for one process can be run against two.
const ProcessesEnv = "LLMSIM_PROCESSES"

func defaultProcesses() int {
	if n, err := strconv.Atoi(os.Getenv(ProcessesEnv)); err == nil && n > 0 {
		return n
	}
	return 1
}

func init() {
	if v := os.Getenv(EngineSocketEnv); v != "" {
		if err := ServeEngine(v); err != nil {
			fmt.Fprintln(os.Stderr, "llmsim engine:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

const (
	frameConfig = 'c'
	frameReady  = 'r'
	frameSubmit = 'q'
	frameCancel = 'x'
	frameStep   = 's'
	maxFrame    = 64 << 20
)

func monoNow() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return 0
	}
	return ts.Nano()
}

func toMono(t time.Time) int64    { return monoNow() - int64(time.Since(t)) }
func fromMono(ns int64) time.Time { return time.Now().Add(time.Duration(ns - monoNow())) }

// appendFrame starts a frame of type typ in b; endFrame writes its length.
func appendFrame(b []byte, typ byte) []byte { return append(b, 0, 0, 0, 0, typ) }
func endFrame(b []byte, start int) []byte {
	binary.LittleEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	return b
}

// readFrame reads one frame into buf and returns its type and payload.
func readFrame(r *bufio.Reader, buf []byte) (byte, []byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint32(h[:4])
	if n < 1 || n > maxFrame {
		return 0, nil, fmt.Errorf("frame of %d bytes", n)
	}
	if cap(buf) < int(n-1) {
		buf = make([]byte, n-1)
	}
	buf = buf[:n-1]
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, nil, err
	}
	return h[4], buf, nil
}

// dec reads a payload; a short payload leaves err set.
type dec struct {
	b   []byte
	err error
}

func (d *dec) take(n int) []byte {
	if d.err != nil || len(d.b) < n {
		d.err = errors.New("short frame")
		return make([]byte, n)
	}
	x := d.b[:n]
	d.b = d.b[n:]
	return x
}
func (d *dec) u8() byte    { return d.take(1)[0] }
func (d *dec) u32() uint32 { return binary.LittleEndian.Uint32(d.take(4)) }
func (d *dec) u64() uint64 { return binary.LittleEndian.Uint64(d.take(8)) }
func (d *dec) i64() int64  { return int64(d.u64()) }

var finishes = []string{"", "length", "stop", finishOOM}

func finishCode(f string) byte {
	for i, s := range finishes {
		if s == f {
			return byte(i)
		}
	}
	return 0
}

// remoteEngine is the frontend's side: the engine process and its socket.
type remoteEngine struct {
	cfg  *Config
	m    *metrics
	log  *slog.Logger
	cmd  *exec.Cmd
	conn *net.UnixConn
	wmu  sync.Mutex // one frame at a time to the engine
	wbuf []byte
	mu   sync.Mutex
	seqs map[uint64]*seq
	next uint64
	// The engine's counters, from its last step frame.
	steps, ioErrs, gpuErrs atomic.Int64
	done                   chan struct{} // the reader has ended
	closing                atomic.Bool
	// once starts the engine (spawn), at New or at the first request
	// (Config.EngineLazy); startErr is why it did not.
	once     sync.Once
	startErr error
	pid      atomic.Int64
}

// EngineCommand returns the command that runs the engine process: this
// executable with EngineSocketEnv set (its socket is file descriptor 3).
var EngineCommand = func() (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this executable to run the engine process: %w", err)
	}
	cmd := exec.Command(exe, "--engine-socket", "3")
	cmd.Env = append(os.Environ(), EngineSocketEnv+"=3")
	return cmd, nil
}

// startRemote starts the engine process and waits until it has opened its
// devices; with cfg.EngineLazy it starts it at the first request instead.
func startRemote(cfg *Config, m *metrics, log *slog.Logger) (*remoteEngine, error) {
	r := &remoteEngine{cfg: cfg, m: m, log: log, seqs: map[uint64]*seq{}, done: make(chan struct{})}
	if cfg.EngineLazy {
		return r, nil
	}
	var err error
	r.once.Do(func() { err = r.spawn() })
	if err != nil {
		return nil, err
	}
	return r, nil
}

var errEngineClosed = errors.New("the server is closed")

func (r *remoteEngine) spawn() error {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("creating the engine's socket pair: %w", err)
	}
	local, child := os.NewFile(uintptr(fds[0]), "llmsim-frontend"), os.NewFile(uintptr(fds[1]), "llmsim-engine")
	defer child.Close()
	fc, err := net.FileConn(local)
	local.Close()
	if err != nil {
		return fmt.Errorf("opening the engine's socket: %w", err)
	}
	conn := fc.(*net.UnixConn)
	cmd, err := EngineCommand()
	if err != nil {
		conn.Close()
		return err
	}
	cmd.ExtraFiles = []*os.File{child}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := spawn.Start(cmd, spawn.Options{Signal: syscall.SIGKILL}); err != nil {
		conn.Close()
		return fmt.Errorf("starting the engine process %s: %w", cmd.Path, err)
	}
	fail := func(err error) error {
		conn.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return err
	}
	js, err := json.Marshal(r.cfg)
	if err != nil {
		return fail(err)
	}
	b := appendFrame(nil, frameConfig)
	b = endFrame(append(b, js...), 0)
	if _, err := conn.Write(b); err != nil {
		return fail(fmt.Errorf("sending the engine process its config: %w", err))
	}
	br := bufio.NewReaderSize(conn, 64<<10)
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	typ, p, err := readFrame(br, nil)
	if err != nil {
		return fail(fmt.Errorf("waiting for the engine process (pid %d) to start: %w", cmd.Process.Pid, err))
	}
	if typ != frameReady {
		return fail(fmt.Errorf("the engine process answered frame %q, want ready", typ))
	}
	if len(p) > 0 {
		return fail(errors.New(string(p)))
	}
	conn.SetReadDeadline(time.Time{})
	r.cmd, r.conn = cmd, conn
	r.pid.Store(int64(cmd.Process.Pid))
	r.log.Info("engine process started", "pid", cmd.Process.Pid)
	go r.read(br)
	return nil
}

func (r *remoteEngine) write(b []byte) {
	if _, err := r.conn.Write(b); err != nil && !r.closing.Load() {
		r.log.Error("writing to the engine process", "err", err)
	}
}

func (r *remoteEngine) submit(s *seq) {
	r.once.Do(func() { r.startErr = r.spawn() })
	if r.startErr != nil {
		r.log.Error("starting the engine process", "err", r.startErr)
		s.out <- token{finish: "abort", at: time.Now()}
		return
	}
	r.mu.Lock()
	r.next++
	s.rid = r.next
	r.seqs[s.rid] = s
	r.mu.Unlock()
	r.wmu.Lock()
	b := appendFrame(r.wbuf[:0], frameSubmit)
	b = binary.LittleEndian.AppendUint64(b, s.rid)
	b = binary.LittleEndian.AppendUint32(b, uint32(s.promptLen))
	b = binary.LittleEndian.AppendUint32(b, uint32(s.maxTokens))
	ign := byte(0)
	if s.ignoreEOS {
		ign = 1
	}
	b = append(b, ign)
	b = binary.LittleEndian.AppendUint64(b, uint64(toMono(s.arrival)))
	r.wbuf = endFrame(b, 0)
	r.write(r.wbuf)
	r.wmu.Unlock()
}

func (r *remoteEngine) cancel(s *seq) {
	if s.canceled.Swap(true) {
		return
	}
	r.mu.Lock()
	_, live := r.seqs[s.rid]
	delete(r.seqs, s.rid)
	r.mu.Unlock()
	if !live {
		return
	}
	r.wmu.Lock()
	b := appendFrame(r.wbuf[:0], frameCancel)
	r.wbuf = endFrame(binary.LittleEndian.AppendUint64(b, s.rid), 0)
	r.write(r.wbuf)
	r.wmu.Unlock()
}

func (r *remoteEngine) stats() Stats {
	return Stats{Steps: r.steps.Load(), IOErrors: r.ioErrs.Load(), CUDAErrors: r.gpuErrs.Load()}
}

// close ends the socket, which ends the engine process, and waits for it.
func (r *remoteEngine) close() error {
	r.closing.Store(true)
	r.once.Do(func() { r.startErr = errEngineClosed })
	if r.cmd == nil {
		return nil
	}
	r.conn.Close()
	<-r.done
	exited := make(chan error, 1)
	go func() { exited <- r.cmd.Wait() }()
	select {
	case err := <-exited:
		return err
	case <-time.After(5 * time.Second):
		_ = r.cmd.Process.Kill()
		<-exited
		return errors.New("the engine process did not exit within 5s of its socket's end: killed")
	}
}

// read applies the engine's step frames until the socket ends.
func (r *remoteEngine) read(br *bufio.Reader) {
	defer close(r.done)
	var buf []byte
	for {
		typ, p, err := readFrame(br, buf)
		if err != nil {
			if !r.closing.Load() {
				r.log.Error("the engine process's socket ended", "err", err)
			}
			return
		}
		buf = p
		if typ != frameStep {
			r.log.Error("unexpected frame from the engine process", "type", string(rune(typ)))
			continue
		}
		if err := r.step(p); err != nil {
			r.log.Error("decoding a step frame", "err", err)
		}
	}
}

func (r *remoteEngine) step(p []byte) error {
	d := &dec{b: p}
	r.steps.Store(d.i64())
	r.ioErrs.Store(d.i64())
	r.gpuErrs.Store(d.i64())
	waiting, running := int32(d.u32()), int32(d.u32())
	stepNs := d.i64()
	cache := math.Float64frombits(d.u64())
	at := fromMono(d.i64())
	generated := d.u32()
	nq := d.u32()
	if d.err != nil {
		return d.err
	}
	for range nq {
		r.m.queueTime.Observe(time.Duration(d.i64()).Seconds())
	}
	r.m.waiting.Set(float64(waiting))
	r.m.running.Set(float64(running))
	if stepNs >= 0 {
		r.m.stepDuration.Observe(time.Duration(stepNs).Seconds())
		r.m.cacheUsage(cache)
	}
	nt := d.u32()
	for range nt {
		rid, index, fin, prompt := d.u64(), d.u32(), d.u8(), d.u32()
		if d.err != nil {
			return d.err
		}
		if prompt > 0 {
			r.m.promptTokens.Add(float64(prompt))
		}
		t := token{index: int(index), at: at}
		if int(fin) < len(finishes) {
			t.finish = finishes[fin]
		}
		if t.finish == finishOOM {
			r.m.kvAllocFailures.Inc()
		}
		r.mu.Lock()
		s := r.seqs[rid]
		if s != nil && t.finish != "" {
			delete(r.seqs, rid)
			s.canceled.Store(true)
		}
		r.mu.Unlock()
		if s != nil {
			s.out <- t // room for every token of the sequence
		}
	}
	r.m.generationTokens.Add(float64(generated))
	return d.err
}

// ServeEngine runs the engine process on the socket socket names (a file
// descriptor number, or a unix socket path to connect to) until it ends.
func ServeEngine(socket string) error {
	conn, err := engineConn(socket)
	if err != nil {
		return err
	}
	defer conn.Close()
	log := slog.Default().With("component", "llmsim", "process", "engine")
	br := bufio.NewReaderSize(conn, 64<<10)
	cfg, err := readEngineConfig(br)
	if err != nil {
		return err
	}
	o := &remoteOut{w: conn, seqs: map[uint64]*seq{}}
	e := newEngine(&cfg, o, log)
	o.e = e
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := appendFrame(nil, frameReady)
	serr := e.start(ctx)
	if serr != nil {
		ready = append(ready, serr.Error()...)
	}
	if _, err := conn.Write(endFrame(ready, 0)); err != nil || serr != nil {
		return errors.Join(serr, err)
	}
	return serveFrontend(br, o, e)
}

// engineConn opens the engine's socket: the file descriptor socket
// numbers, or a connection to the unix socket at that path.
func engineConn(socket string) (net.Conn, error) {
	fd, err := strconv.Atoi(socket)
	if err != nil {
		conn, err := net.Dial("unix", socket)
		if err != nil {
			return nil, fmt.Errorf("connecting to --engine-socket %s: %w", socket, err)
		}
		return conn, nil
	}
	f := os.NewFile(uintptr(fd), "llmsim-engine")
	if f == nil {
		return nil, fmt.Errorf("--engine-socket %d is not a file descriptor", fd)
	}
	conn, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("opening --engine-socket %d: %w", fd, err)
	}
	return conn, nil
}

// readEngineConfig reads the config the frontend sends first.
func readEngineConfig(br *bufio.Reader) (Config, error) {
	var cfg Config
	typ, p, err := readFrame(br, nil)
	if err != nil {
		return cfg, fmt.Errorf("reading the engine's config: %w", err)
	}
	if typ != frameConfig {
		return cfg, fmt.Errorf("first frame %q, want the config", typ)
	}
	if err := json.Unmarshal(p, &cfg); err != nil {
		return cfg, fmt.Errorf("decoding the engine's config: %w", err)
	}
	return cfg, nil
}

// serveFrontend submits the requests the frontend sends to e and cancels
// those it cancels, until the frontend is gone.
func serveFrontend(br *bufio.Reader, o *remoteOut, e *engine) error {
	var buf []byte
	for {
		typ, p, err := readFrame(br, buf)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				return nil // the frontend is gone
			}
			return fmt.Errorf("reading from the frontend: %w", err)
		}
		buf = p
		d := &dec{b: p}
		switch typ {
		case frameSubmit:
			s := &seq{rid: d.u64(), promptLen: int(d.u32()), maxTokens: int(d.u32()), ignoreEOS: d.u8() == 1}
			s.arrival = fromMono(d.i64())
			if d.err != nil {
				return fmt.Errorf("decoding a request frame: %w", d.err)
			}
			s.id = strconv.FormatUint(s.rid, 10)
			o.mu.Lock()
			o.seqs[s.rid] = s
			o.mu.Unlock()
			e.submit(s)
		case frameCancel:
			rid := d.u64()
			o.mu.Lock()
			if s := o.seqs[rid]; s != nil {
				s.canceled.Store(true)
				delete(o.seqs, rid)
			}
			o.mu.Unlock()
		default:
			return fmt.Errorf("unexpected frame %q from the frontend", typ)
		}
	}
}

// remoteOut is engineOut in the engine process: it gathers a step's
// metrics and tokens and writes them in one frame as the step ends.
type remoteOut struct {
	w        net.Conn
	e        *engine
	mu       sync.Mutex // seqs
	seqs     map[uint64]*seq
	nwaiting atomic.Int32
	nrunning int
	queue    []int64
	stepNs   int64
	cache    float64
	toks     []byte
	ntoks    uint32
	at       time.Time
	buf      []byte
	errLog   bool
}

func (o *remoteOut) waiting(n int)                { o.nwaiting.Store(int32(n)) }
func (o *remoteOut) admitted(queue time.Duration) { o.queue = append(o.queue, int64(queue)) }
func (o *remoteOut) running(n int) {
	o.nrunning = n
	o.stepNs = -1
	if n == 0 {
		o.endStep(0) // the gauges, with no step
	}
}
func (o *remoteOut) stepDone(d time.Duration, cache float64) {
	o.stepNs, o.cache = int64(d), cache
}
func (o *remoteOut) token(s *seq, t token, prompt int) {
	o.at = t.at
	o.toks = binary.LittleEndian.AppendUint64(o.toks, s.rid)
	o.toks = binary.LittleEndian.AppendUint32(o.toks, uint32(t.index))
	o.toks = append(o.toks, finishCode(t.finish))
	o.toks = binary.LittleEndian.AppendUint32(o.toks, uint32(prompt))
	o.ntoks++
	if t.finish != "" {
		o.mu.Lock()
		delete(o.seqs, s.rid)
		o.mu.Unlock()
	}
}

func (o *remoteOut) endStep(generated int) {
	at := o.at
	if o.ntoks == 0 {
		at = time.Now()
	}
	b := appendFrame(o.buf[:0], frameStep)
	b = binary.LittleEndian.AppendUint64(b, uint64(o.e.steps.Load()))
	b = binary.LittleEndian.AppendUint64(b, uint64(o.e.ioErrs.Load()))
	b = binary.LittleEndian.AppendUint64(b, uint64(o.e.gpuErrs.Load()))
	b = binary.LittleEndian.AppendUint32(b, uint32(o.nwaiting.Load()))
	b = binary.LittleEndian.AppendUint32(b, uint32(o.nrunning))
	b = binary.LittleEndian.AppendUint64(b, uint64(o.stepNs))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(o.cache))
	b = binary.LittleEndian.AppendUint64(b, uint64(toMono(at)))
	b = binary.LittleEndian.AppendUint32(b, uint32(generated))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(o.queue)))
	for _, q := range o.queue {
		b = binary.LittleEndian.AppendUint64(b, uint64(q))
	}
	b = binary.LittleEndian.AppendUint32(b, o.ntoks)
	b = append(b, o.toks...)
	o.buf = endFrame(b, 0)
	o.queue, o.toks, o.ntoks = o.queue[:0], o.toks[:0], 0
	if _, err := o.w.Write(o.buf); err != nil && !o.errLog {
		o.e.log.Error("writing a step to the frontend", "err", err)
		o.errLog = true
	}
}
