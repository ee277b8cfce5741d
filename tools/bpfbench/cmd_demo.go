package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/bpfbench/bpfbench/collectors/bpfutil"
	"github.com/bpfbench/bpfbench/daemon"
	"github.com/bpfbench/bpfbench/exporter/report"
	"github.com/bpfbench/bpfbench/internal/caps"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/loadgen/cli"
	"github.com/bpfbench/bpfbench/perturb"
)

func init() {
	register("demo", command{
		summary: "run the whole job on the built-in simulated server: phased contention, attribution per phase",
		run:     runDemo,
	})
}

// demo settings: the simulated server's GPU step and its slowed-down one.
const (
	demoKernelUS     = 2000
	demoSlowKernelUS = 9000
)

// siblingBinary finds a file built next to this executable (make build
// puts bpfbench, llmsim and the CUDA stub in bin/).
func siblingBinary(name string) (string, error) {
	exe, err := os.Executable()
	if err == nil {
		p := filepath.Join(filepath.Dir(exe), name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s not found next to bpfbench: run make build first", name)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// writeDataFile writes size bytes of real data (not a sparse file: holes
// read without any IO) for O_DIRECT reads.
func writeDataFile(path string, size int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i*7 + 1)
	}
	for w := 0; w < size; w += len(buf) {
		if _, err := f.Write(buf); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// simServer is llmsim running as a child process.
type simServer struct {
	cmd     *exec.Cmd
	url     string
	control string
	ioFile  string
}

func startSim(ctx context.Context, dir string, logw io.Writer) (*simServer, error) {
	llmsim, err := siblingBinary("llmsim")
	if err != nil {
		return nil, err
	}
	libcuda, err := siblingBinary("libcuda.so.1")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &simServer{
		url:     fmt.Sprintf("http://127.0.0.1:%d", port),
		control: filepath.Join(dir, "gpu-kernel-us"),
		ioFile:  filepath.Join(dir, "kv-offload.img"),
	}
	if err := writeDataFile(s.ioFile, 128<<20); err != nil {
		return nil, fmt.Errorf("writing the KV offload file: %w", err)
	}
	if err := os.WriteFile(s.control, []byte(strconv.Itoa(demoKernelUS)+"\n"), 0o644); err != nil {
		return nil, err
	}
	s.cmd = exec.CommandContext(ctx, llmsim, "--addr", fmt.Sprintf("127.0.0.1:%d", port),
		"--work", "cpu", "--itl", "15ms", "--max-num-seqs", "32", "--jitter", "0.05",
		"--io-file", s.ioFile, "--io-bytes", "262144", "--cuda-lib", libcuda)
	s.cmd.Env = append(os.Environ(), "CUDASTUB_KERNEL_US="+strconv.Itoa(demoKernelUS), "CUDASTUB_CONTROL_FILE="+s.control)
	s.cmd.Stdout, s.cmd.Stderr = logw, logw
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting llmsim: %w", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(s.url + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.stop()
	return nil, errors.New("llmsim did not become healthy within 10s (see llmsim.log in the run directory)")
}

func (s *simServer) stop() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
}

// setGPUKernel changes the simulated GPU's step time in the running server.
func (s *simServer) setGPUKernel(us int) error {
	return os.WriteFile(s.control, []byte(strconv.Itoa(us)+"\n"), 0o644)
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", stderr, "demo [--out DIR] [--phase 10s] [--rate 4]")
	out := fs.String("out", "bpfbench-demo", "run directory (result.json, trace.json, report.html)")
	phase := fs.Duration("phase", 10*time.Second, "length of each phase")
	rate := fs.Float64("rate", 4, "requests per second")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *phase < 2*time.Second || *rate <= 0 {
		return usageError{"--phase must be at least 2s and --rate positive"}
	}
	if !caps.CanTrace() {
		return fmt.Errorf("the demo follows the simulated server with eBPF: %s", caps.Hint)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return fmt.Errorf("cannot create --out %s: %w", *out, err)
	}
	logger, _ := newLogger(stderr, "warn", "text")
	if err := bpfutil.EnsureFilesystems(); err != nil {
		logger.Warn("preparing kernel file systems", "err", err)
	}
	simLog, err := os.Create(filepath.Join(*out, "llmsim.log"))
	if err != nil {
		return fmt.Errorf("cannot write to --out %s: %w", *out, err)
	}
	defer simLog.Close()
	sim, err := startSim(ctx, *out, simLog)
	if err != nil {
		return err
	}
	defer sim.stop()
	defer os.Remove(sim.ioFile)

	names := []string{"baseline", "cpu contention", "disk contention", "gpu slowdown", "slow-reading client"}
	perPhase := int(*rate * phase.Seconds())
	n := perPhase * len(names)
	reqs, err := loadgen.LoadDataset(loadgen.DatasetConfig{Name: loadgen.DatasetRandom, InputLen: 64, OutputLen: 64}, n, 1)
	if err != nil {
		return err
	}
	slow := 4*perPhase + perPhase/4
	for i := range reqs {
		reqs[i].OffsetNs = -1
	}
	reqs[slow].OutputLen = 200
	reqs[slow].SlowRead = 3 * time.Second

	cfg := loadgen.DefaultConfig()
	cfg.Target = sim.url
	cfg.Rate = *rate
	cfg.Constant = true
	cfg.Requests = reqs
	cfg.NumRequests = n
	cfg.IgnoreEOS = true
	cfg.Timeout = 2 * time.Minute
	var finish func()
	cfg.Progress, finish = cli.Progress(stderr)

	fmt.Fprintf(stdout, "bpfbench demo: llmsim (pid %d) at %s with the CUDA stub; %d phases of %v at %.0f req/s\n",
		sim.cmd.Process.Pid, sim.url, len(names), *phase, *rate)
	var reports []string
	scenario := func(ctx context.Context, marks *daemon.PhaseMarks) {
		wait := func() bool {
			select {
			case <-ctx.Done():
				return false
			case <-time.After(*phase):
				return true
			}
		}
		during := func(fn func(context.Context) string) bool {
			pctx, cancel := context.WithCancel(ctx)
			done := make(chan string, 1)
			go func() { done <- fn(pctx) }()
			ok := wait()
			cancel()
			reports = append(reports, <-done)
			return ok
		}
		marks.Begin(names[0])
		if !wait() {
			return
		}
		marks.Begin(names[1])
		if !during(func(c context.Context) string {
			r, err := perturb.CPU{Threads: 2 * runtime.NumCPU()}.Run(c)
			if err != nil {
				return "cpu: " + err.Error()
			}
			return fmt.Sprintf("cpu contention: %d busy threads burnt %.1f CPU-s", r.Threads, r.CPUSeconds)
		}) {
			return
		}
		marks.Begin(names[2])
		if !during(func(c context.Context) string {
			r, err := perturb.IO{Path: sim.ioFile, BlockSize: 1 << 20, Depth: 8}.Run(c)
			if err != nil {
				return "disk: " + err.Error()
			}
			return fmt.Sprintf("disk contention: %.0f O_DIRECT reads/s of 1 MiB, %.1f ms each", r.IOPS, r.MeanLatency*1e3)
		}) {
			return
		}
		marks.Begin(names[3])
		_ = sim.setGPUKernel(demoSlowKernelUS)
		reports = append(reports, fmt.Sprintf("gpu slowdown: the stub's step kernel from %d to %d µs", demoKernelUS, demoSlowKernelUS))
		ok := wait()
		_ = sim.setGPUKernel(demoKernelUS)
		if !ok {
			return
		}
		marks.Begin(names[4])
		reports = append(reports, fmt.Sprintf("slow-reading client: request %d stops reading for 3 s after its first token", slow))
	}
	res, err := daemon.Run(ctx, daemon.RunConfig{
		Load: cfg, Pid: sim.cmd.Process.Pid, OutDir: *out, Logger: logger,
		Sections: sessionSections(), Phases: scenario, Readiness: readiness,
	})
	finish()
	if res == nil {
		return err
	}
	fmt.Fprintln(stdout, "\nWhat each phase injected:")
	for _, r := range reports {
		fmt.Fprintln(stdout, "  - "+r)
	}
	fmt.Fprintln(stdout)
	report.WriteTerminal(stdout, res.Doc)
	fmt.Fprintf(stdout, "\nwrote %s/{result.json,trace.json,report.html}; open report.html in a browser, trace.json in ui.perfetto.dev\n", *out)
	return err
}
