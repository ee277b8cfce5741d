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

	"golang.org/x/sys/unix"
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

// startSimOn starts llmsim restricted to cpus: the child inherits the
// affinity of the thread that forks it.
func startSimOn(ctx context.Context, dir string, logw io.Writer, cpus []int) (*simServer, error) {
	if len(cpus) == 0 {
		return startSim(ctx, dir, logw)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return nil, err
	}
	for _, c := range cpus {
		set.Set(c)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("pinning llmsim to CPUs %v: %w", cpus, err)
	}
	defer unix.SchedSetaffinity(0, &old)
	return startSim(ctx, dir, logw)
}
