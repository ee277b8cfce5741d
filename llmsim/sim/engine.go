package sim

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// token is one generated token handed from the engine to a request handler.
type token struct {
	index  int    // 0-based position in the output
	finish string // "" while generating, else "length" or "stop"
	at     time.Time
}

// seq is one request inside the engine.
type seq struct {
	id        string
	rid       uint64 // its id between the frontend and the engine process (Processes 2)
	promptLen int
	maxTokens int
	ignoreEOS bool
	out       chan token
	arrival   time.Time
	admitted  time.Time
	prefilled bool
	generated int
	canceled  atomic.Bool
	kv        uint64 // its KV cache on the device (Config.KVBytesPerSeq), 0: none; the engine's thread only
}

// finishOOM is the one token of a sequence the engine could not admit
// because its KV cache allocation failed (out of device memory): its
// request fails.
const finishOOM = "out_of_memory"

// oomMessage is the error a request whose KV cache allocation failed gets.
const oomMessage = "CUDA out of memory: cuMemAlloc_v2 could not allocate the KV cache of this request"

// engine is a continuous-batching scheduler: a waiting queue, at most
// MaxNumSeqs running sequences, and a loop of steps. A step prefills the
// sequences admitted since the last one (cost proportional to their input
// tokens) and decodes one token for every running sequence.
type engine struct {
	cfg     *Config
	log     *slog.Logger
	out     engineOut
	mu      sync.Mutex
	waiting []*seq
	running []*seq
	wake    chan struct{}
	rng     *rand.Rand
	io      *directReader
	cuda    *cudaDriver
	steps   atomic.Int64
	// step is the decode step in ns (Config.StepControl, else DecodeStep).
	step    atomic.Int64
	ioErrs  atomic.Int64
	gpuErrs atomic.Int64
}

// engineOut receives what the engine produces: in one process the
// Server's metrics and the sequences' channels (localOut), in the engine
// process of two the socket to the frontend (remote.go). waiting is called
// under the engine's lock, the others on the engine's thread.
type engineOut interface {
	waiting(n int)
	admitted(queue time.Duration)
	running(n int)
	stepDone(d time.Duration, cache float64)
	// token hands t of s over; prompt is the number of prompt tokens its
	// step prefilled (the first token), else 0.
	token(s *seq, t token, prompt int)
	endStep(generated int)
}

// localOut is engineOut in one process.
type localOut struct{ m *metrics }

func (o localOut) waiting(n int)                { o.m.waiting.Set(float64(n)) }
func (o localOut) admitted(queue time.Duration) { o.m.queueTime.Observe(queue.Seconds()) }
func (o localOut) running(n int)                { o.m.running.Set(float64(n)) }
func (o localOut) stepDone(d time.Duration, cache float64) {
	o.m.stepDuration.Observe(d.Seconds())
	o.m.cacheUsage(cache)
}
func (o localOut) token(s *seq, t token, prompt int) {
	if t.finish == finishOOM {
		o.m.kvAllocFailures.Inc()
	}
	if prompt > 0 {
		o.m.promptTokens.Add(float64(prompt))
	}
	// The channel holds every token the sequence can produce: the engine
	// never waits for a slow client.
	s.out <- t
}
func (o localOut) endStep(generated int) { o.m.generationTokens.Add(float64(generated)) }

func newEngine(cfg *Config, out engineOut, log *slog.Logger) *engine {
	e := &engine{cfg: cfg, out: out, log: log, wake: make(chan struct{}, 1), rng: rand.New(rand.NewPCG(cfg.Seed, 0x656e67))}
	e.step.Store(int64(cfg.DecodeStep))
	return e
}

// followStepControl reads Config.StepControl every 50 ms until ctx ends
// and keeps its value (µs) as the decode step.
func (e *engine) followStepControl(ctx context.Context) {
	var last string
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		b, err := os.ReadFile(e.cfg.StepControl)
		v := strings.TrimSpace(string(b))
		if err == nil && v != last {
			if us, perr := strconv.ParseInt(v, 10, 64); perr == nil && us >= 0 {
				e.step.Store(us * int64(time.Microsecond))
				e.log.Info("decode step changed", "us", us)
			} else {
				e.log.Warn("step control file: want the decode step in µs", "file", e.cfg.StepControl, "content", v)
			}
			last = v
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// submit queues s.
func (e *engine) submit(s *seq) {
	e.mu.Lock()
	e.waiting = append(e.waiting, s)
	e.out.waiting(len(e.waiting))
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// start opens the engine's devices on its own locked OS thread (a CUDA
// context is bound to a thread) and runs the loop until ctx ends.
func (e *engine) start(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if e.cfg.IOFile != "" {
			r, err := openDirect(e.cfg.IOFile, e.cfg.IOBytes)
			if err != nil {
				errc <- err
				return
			}
			e.io = r
			defer r.close()
		}
		if e.cfg.CUDALib != "" {
			d, err := openCUDA(e.cfg.CUDALib, uint32(max(e.cfg.CUDAKernelIters, 1)))
			if err != nil {
				errc <- err
				return
			}
			e.cuda = d
			defer d.close()
		}
		errc <- nil
		if e.cfg.StepControl != "" {
			go e.followStepControl(ctx)
		}
		e.loop(ctx)
	}()
	return <-errc
}

// allocKV allocates s's KV cache (Config.KVBytesPerSeq) on the device;
// false: out of memory. On the engine's thread.
func (e *engine) allocKV(s *seq) bool {
	if e.cfg.KVBytesPerSeq <= 0 || e.cuda == nil {
		return true
	}
	p, r := e.cuda.allocKV(e.cfg.KVBytesPerSeq)
	if r != 0 {
		return false
	}
	s.kv = p
	return true
}

// freeKV frees s's KV cache, if it has one. On the engine's thread.
func (e *engine) freeKV(s *seq) {
	if s.kv != 0 {
		e.cuda.freeKV(s.kv)
		s.kv = 0
	}
}

// loggedOnce are the step errors the loop has logged (once each).
type loggedOnce struct{ io, cuda, oom bool }

func (e *engine) loop(ctx context.Context) {
	var logged loggedOnce
	defer func() {
		for _, s := range e.running {
			e.freeKV(s)
		}
	}()
	for {
		e.mu.Lock()
		if !e.waitWork(ctx) {
			return
		}
		now := time.Now()
		oom := e.admit(now)
		batch := append([]*seq(nil), e.running...)
		e.out.waiting(len(e.waiting))
		e.mu.Unlock()
		// The sequences whose KV cache did not fit fail (before running:
		// with no batch, running ends the frame of the engine process).
		for _, s := range oom {
			if !logged.oom {
				e.log.Error("allocating a sequence's KV cache", "bytes", e.cfg.KVBytesPerSeq, "err", "CUDA_ERROR_OUT_OF_MEMORY")
				logged.oom = true
			}
			s.canceled.Store(true)
			e.out.token(s, token{finish: finishOOM, at: now}, 0)
		}
		e.out.running(len(batch))
		if len(batch) == 0 {
			continue
		}
		d, kvTokens := e.stepCost(batch)
		stepStart := time.Now()
		e.runStep(stepStart, d, len(batch), &logged)
		end := time.Now()
		e.steps.Add(1)
		e.out.stepDone(end.Sub(stepStart), float64(kvTokens)/float64(e.cfg.KVCacheTokens))
		e.emit(batch, end)
	}
}

// waitWork waits, e.mu held, until a sequence waits or runs; false (e.mu
// released) when ctx is done first.
func (e *engine) waitWork(ctx context.Context) bool {
	for len(e.waiting) == 0 && len(e.running) == 0 {
		e.mu.Unlock()
		select {
		case <-ctx.Done():
			return false
		case <-e.wake:
		}
		e.mu.Lock()
	}
	return true
}

// admit, e.mu held, drops the canceled sequences from the batch, then
// admits from the queue as the batch and the KV cache allow; it returns
// the sequences whose KV cache did not fit.
func (e *engine) admit(now time.Time) (oom []*seq) {
	live := e.running[:0]
	for _, s := range e.running {
		if !s.canceled.Load() {
			live = append(live, s)
		} else {
			e.freeKV(s)
		}
	}
	clear(e.running[len(live):])
	e.running = live
	for len(e.running) < e.cfg.MaxNumSeqs && len(e.waiting) > 0 {
		s := e.waiting[0]
		e.waiting[0] = nil
		e.waiting = e.waiting[1:]
		if s.canceled.Load() {
			continue
		}
		s.admitted = now
		e.out.admitted(now.Sub(s.arrival))
		if !e.allocKV(s) {
			oom = append(oom, s)
			continue
		}
		e.running = append(e.running, s)
	}
	if len(e.waiting) == 0 {
		e.waiting = nil
	}
	return oom
}

// stepCost is the step's duration for batch (the prefills, the decodes
// slowed by the batch's size, the jitter) and the KV cache's tokens.
func (e *engine) stepCost(batch []*seq) (d time.Duration, kvTokens int) {
	var prefill time.Duration
	decoding := 0
	for _, s := range batch {
		if !s.prefilled {
			prefill += e.cfg.PrefillBase + time.Duration(s.promptLen)*e.cfg.PrefillPerToken
		} else {
			decoding++
		}
		kvTokens += s.promptLen + s.generated
	}
	var decode time.Duration
	if decoding > 0 {
		decode = time.Duration(float64(e.step.Load()) * (1 + e.cfg.BatchSlowdown*float64(decoding-1)))
	}
	d = prefill + decode
	if e.cfg.Jitter > 0 {
		d = time.Duration(float64(d) * (1 + e.cfg.Jitter*(2*e.rng.Float64()-1)))
	}
	return d, kvTokens
}

// runStep does a step's work for d from start (asleep or on the CPU),
// then its IO and CUDA calls for a batch of n, counting and logging
// (once) their errors.
func (e *engine) runStep(start time.Time, d time.Duration, n int, logged *loggedOnce) {
	if e.cfg.Work == WorkSleep {
		sleepUntil(start.Add(d))
	} else {
		spinCPU(d)
	}
	if e.io != nil {
		if err := e.io.read(); err != nil {
			e.ioErrs.Add(1)
			if !logged.io {
				e.log.Error("step IO", "err", err)
				logged.io = true
			}
		}
	}
	if e.cuda != nil {
		if err := e.cuda.step(n); err != nil {
			e.gpuErrs.Add(1)
			if !logged.cuda {
				e.log.Error("step CUDA calls", "err", err)
				logged.cuda = true
			}
		}
	}
}

// emit sends one token per sequence of batch at end; a sequence that
// finishes (its length, or EOS) leaves the batch at the next step.
func (e *engine) emit(batch []*seq, end time.Time) {
	generated := 0
	for _, s := range batch {
		if s.canceled.Load() {
			continue
		}
		prompt := 0
		if !s.prefilled {
			s.prefilled = true
			prompt = s.promptLen
		}
		tok := token{index: s.generated, at: end}
		s.generated++
		generated++
		switch {
		case s.generated >= s.maxTokens:
			tok.finish = "length"
		case !s.ignoreEOS && e.cfg.EOSProb > 0 && e.rng.Float64() < e.cfg.EOSProb:
			tok.finish = "stop"
		}
		e.out.token(s, tok, prompt)
		if tok.finish != "" {
			s.canceled.Store(true) // leaves the batch at the next step
			e.freeKV(s)
		}
	}
	e.out.endStep(generated)
}
