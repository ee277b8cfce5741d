// Package launch starts the simulated server (llmsim with the CUDA stub) as a
// child process for the demo and `validate --sim`, optionally in a network
// namespace of its own (SimNet).
package launch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/bpfbench/bpfbench/internal/owner"
	"github.com/bpfbench/bpfbench/internal/spawn"
	"github.com/bpfbench/bpfbench/perturb"
)

// Sim is the simulated server (llmsim with the CUDA stub) running as a
// child process, for the demo and `validate --sim`.
type Sim struct {
	URL string
	// Control is the CUDA stub's control file (its kernel time in µs);
	// StepControl llmsim's (its decode step's CPU work in µs); IOFile the
	// KV offload file the server reads with O_DIRECT.
	Control, StepControl, IOFile string
	// Net is the network namespace the server serves in (SimConfig.Netns),
	// nil when it serves on 127.0.0.1.
	Net *SimNet
	cmd *exec.Cmd
	log *os.File
}

// SimConfig configures StartSim.
type SimConfig struct {
	// Dir receives llmsim.log, the KV offload file and the control file.
	Dir string
	// CPUs, when set, restricts the server to these CPUs.
	CPUs []int
	// Netns puts the server in a network namespace of its own, behind a
	// veth pair, so that its egress towards the client can be shaped
	// without touching any interface of the host (the net row of
	// validate).
	Netns bool
	// Processes is llmsim's --processes: 2 (the default, 0) runs a
	// frontend and an engine child process over a unix socket, as vLLM V1
	// does, so that the demo and validation cross a process boundary; 1
	// runs one process.
	Processes int
}

// siblingBinary finds a file built next to this executable (make build
// puts bpfbench, llmsim and the CUDA stub in bin/), or on PATH.
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

// StartSim starts llmsim (found next to this executable) with the CUDA
// stub, waits until it is healthy and returns it; Close stops it.
func StartSim(ctx context.Context, cfg SimConfig) (*Sim, error) {
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot create --out %s: %w", cfg.Dir, err)
	}
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
	host := "127.0.0.1"
	var sn *SimNet
	if cfg.Netns {
		if sn, err = newSimNet(perturb.DefaultStateDir); err != nil {
			return nil, err
		}
		host = sn.Addr.String()
	}
	logf, err := os.Create(filepath.Join(cfg.Dir, "llmsim.log"))
	if err != nil {
		if sn != nil {
			sn.Close()
		}
		return nil, fmt.Errorf("cannot write to --out %s: %w", cfg.Dir, err)
	}
	s := &Sim{
		Net:         sn,
		URL:         fmt.Sprintf("http://%s:%d", host, port),
		Control:     filepath.Join(cfg.Dir, "gpu-kernel-us"),
		StepControl: filepath.Join(cfg.Dir, "step-us"),
		IOFile:      filepath.Join(cfg.Dir, "kv-offload.img"),
		log:         logf,
	}
	if err := s.writeFiles(); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.start(ctx, cfg, llmsim, libcuda, fmt.Sprintf("%s:%d", host, port)); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.waitHealthy(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// writeFiles writes the KV offload file the server reads and the control
// files of its kernel time and decode step, before it starts.
func (s *Sim) writeFiles() error {
	_ = owner.Note(perturb.DefaultStateDir, owner.KindFile, s.IOFile) // removed with a dead owner's leftovers
	if err := writeDataFile(s.IOFile, 128<<20); err != nil {
		return fmt.Errorf("writing the KV offload file: %w", err)
	}
	if err := s.SetGPUKernel(DemoKernelUS); err != nil {
		return err
	}
	return s.SetStep(DemoStepUS)
}

// start spawns llmsim serving on addr with the CUDA stub libcuda, on
// cfg's CPUs and in the server's network namespace when it has one.
func (s *Sim) start(ctx context.Context, cfg SimConfig, llmsim, libcuda, addr string) error {
	s.cmd = exec.CommandContext(ctx, llmsim, "--addr", addr,
		"--work", "cpu", "--itl", strconv.Itoa(DemoStepUS)+"us", "--step-control", s.StepControl, "--max-num-seqs", "32", "--jitter", "0.05",
		"--io-file", s.IOFile, "--io-bytes", "262144", "--cuda-lib", libcuda, "--processes", strconv.Itoa(cmp.Or(cfg.Processes, 2)))
	s.cmd.Env = append(os.Environ(), "CUDASTUB_KERNEL_US="+strconv.Itoa(DemoKernelUS), "CUDASTUB_CONTROL_FILE="+s.Control)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	// The server dies with bpfbench even when bpfbench is killed, so that
	// nothing holds the namespace once its name is gone.
	opt := spawn.Options{Signal: syscall.SIGKILL, CPUs: cfg.CPUs}
	if s.Net != nil {
		opt.Netns = int(s.Net.ns)
	}
	if err := spawn.Start(s.cmd, opt); err != nil {
		return fmt.Errorf("starting llmsim: %w", err)
	}
	return nil
}

// waitHealthy polls the server's /health until it answers OK, for
// simHealthWait at most.
func (s *Sim) waitHealthy() error {
	// Up in well under a second here; a slow host (an emulated CPU, a
	// loaded node) takes longer, and only a hung one the whole minute.
	deadline := time.Now().Add(simHealthWait)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(s.URL + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("llmsim did not become healthy within %v (see llmsim.log in the run directory)", simHealthWait)
}

// simHealthWait is how long StartSim waits for the simulator's /health.
const simHealthWait = time.Minute

// Pid is the server's process id.
func (s *Sim) Pid() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// DemoStepUS is the simulated server's decode step: its CPU work, µs.
const DemoStepUS = 15000

// DemoKernelUS is the CUDA stub's kernel time of the simulated server's GPU
// step, µs (the demo's gpu phase slows it down).
const DemoKernelUS = 2000

// SetStep changes the decode step's CPU work in the running server.
func (s *Sim) SetStep(us int) error {
	return os.WriteFile(s.StepControl, []byte(strconv.Itoa(us)+"\n"), 0o644)
}

// SetGPUKernel changes the simulated GPU's step time in the running server.
func (s *Sim) SetGPUKernel(us int) error {
	return os.WriteFile(s.Control, []byte(strconv.Itoa(us)+"\n"), 0o644)
}

// Close stops the server, removes its KV offload file and its network
// namespace with the veth pair.
func (s *Sim) Close() error {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
	if os.Remove(s.IOFile) == nil {
		owner.Forget(perturb.DefaultStateDir, owner.KindFile, s.IOFile)
	}
	err := s.log.Close()
	if s.Net != nil {
		err = errors.Join(s.Net.Close(), err)
	}
	return err
}

var _ io.Closer = (*Sim)(nil)
