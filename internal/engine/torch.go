package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// The PyTorch engine (tools/torchengine/engine.py): an API server process
// and an engine-core process running a transformer-like model on torch's
// intra-op threads, laid out like vLLM V1.
const (
	// EnvTorchPython names a Python interpreter that imports torch.
	EnvTorchPython = "BPFBENCH_TORCH_PYTHON"
	// EnvTorchEngine overrides the engine script's path.
	EnvTorchEngine = "BPFBENCH_TORCH_ENGINE"

	torchHint = "install python3-torch and libopenblas0-openmp (apt-get install python3-torch libopenblas0-openmp; tools/ci/deps.sh does)"
)

// TorchPaths are the Python interpreter and the engine script.
type TorchPaths struct {
	Python string
	Script string
}

// FindTorch returns a Python that imports torch ($BPFBENCH_TORCH_PYTHON,
// else /usr/bin/python3, else python3 on the PATH: Debian's python3-torch
// is installed for the system's interpreter) and the engine script. The
// error says what is missing and how to install it.
func FindTorch() (TorchPaths, error) {
	var p TorchPaths
	p.Script = os.Getenv(EnvTorchEngine)
	if p.Script == "" {
		_, file, _, ok := runtime.Caller(0)
		if !ok {
			return p, errors.New("engine: cannot locate tools/torchengine/engine.py (set " + EnvTorchEngine + ")")
		}
		p.Script = filepath.Join(filepath.Dir(file), "..", "..", "tools", "torchengine", "engine.py")
	}
	if _, err := os.Stat(p.Script); err != nil {
		return p, fmt.Errorf("engine: the PyTorch engine script: %w (set %s)", err, EnvTorchEngine)
	}
	candidates := []string{os.Getenv(EnvTorchPython), "/usr/bin/python3"}
	if lp, err := exec.LookPath("python3"); err == nil {
		candidates = append(candidates, lp)
	}
	var tried []string
	for _, py := range candidates {
		if py == "" {
			continue
		}
		out, err := exec.Command(py, "-c", "import torch; print(torch.__version__)").CombinedOutput()
		if err == nil {
			p.Python = py
			return p, nil
		}
		tried = append(tried, fmt.Sprintf("%s: %s", py, lastLine(string(out), err)))
	}
	return p, fmt.Errorf("engine: no Python imports torch (%s): %s", strings.Join(tried, "; "), torchHint)
}

func lastLine(out string, err error) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if l := lines[len(lines)-1]; l != "" {
		return l
	}
	return err.Error()
}

// TorchOptions configure the PyTorch engine.
type TorchOptions struct {
	Paths   TorchPaths // zero: FindTorch()
	Threads int        // torch intra-op threads of the engine core (default 2)
	Slots   int        // requests decoded together at most (default 2)
	// OneProcess runs the engine core in a thread of the API server's
	// process instead of a process of its own.
	OneProcess bool
	CPUs       string // as in Options
	// Netns runs the engine in this named network namespace, listening on
	// Host (an address of that namespace); Port 0 picks a free one.
	Netns, Host  string
	Port         int
	StartTimeout time.Duration // until /health answers ok (default 60 s)
	Stderr       io.Writer
}

// StartTorch runs the PyTorch engine on a free 127.0.0.1 port and returns
// once its /health answers ok; its Pid is the API server's, the engine
// core its child. torch's OpenMP threads keep their default wait policy
// (they spin between operations). Cancelling ctx kills the server.
func StartTorch(ctx context.Context, opts TorchOptions) (*Server, error) {
	if opts.Paths == (TorchPaths{}) {
		p, err := FindTorch()
		if err != nil {
			return nil, err
		}
		opts.Paths = p
	}
	if opts.Threads <= 0 {
		opts.Threads = 2
	}
	if opts.Slots <= 0 {
		opts.Slots = 2
	}
	host, port, err := listenAddr(opts.Host, opts.Port)
	if err != nil {
		return nil, err
	}
	args := []string{opts.Paths.Script, "--host", host, "--port", strconv.Itoa(port), "--threads", strconv.Itoa(opts.Threads),
		"--slots", strconv.Itoa(opts.Slots), "--model", "torch-tiny"}
	if opts.OneProcess {
		args = append(args, "--one-process")
	}
	return launch(ctx, launchOptions{exe: opts.Paths.Python, args: args, env: append(os.Environ(), "PYTHONUNBUFFERED=1"),
		cpus: opts.CPUs, netns: opts.Netns, host: host, port: port, stderr: opts.Stderr, timeout: opts.StartTimeout})
}
