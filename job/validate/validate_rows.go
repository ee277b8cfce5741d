package validate

import (
	"fmt"
	"strings"
	"time"

	"github.com/bpfbench/bpfbench/host"
	"github.com/bpfbench/bpfbench/loadgen"
	"github.com/bpfbench/bpfbench/perturb"
)

// ValidateRows are the rows a validation may inject, as validate's
// --skip names them, in the order they run.
var ValidateRows = []string{"cpu", "io", "gpu", "compute", "client", "net", "client-cpu"}

// ValidateRowsConfig is what validate's flags say of its rows.
type ValidateRowsConfig struct {
	// Skip are the rows left out; With the rows asked for by name
	// (compute, client-cpu), an error when they cannot run.
	Skip, With map[string]bool
	// BusyCPUs are the CPUs the cpu row keeps busy (nil: the server's).
	BusyCPUs []int
	// IOFile is the file the io row reads (""; one the server has open
	// with O_DIRECT).
	IOFile string
	// CUDAControl and GPUKernelUS: the CUDA stub's control file and its
	// kernel time during the gpu row ("": no gpu row).
	CUDAControl string
	GPUKernelUS int
	// StepControl and StepUS: the server's step control file and its step
	// work during the compute row ("": no compute row).
	StepControl string
	StepUS      int
	// SlowRead is how long the client row's request stops reading.
	SlowRead time.Duration
	// Net is the net row's shaping (Rate 0: chosen in the baseline phase;
	// Iface "": no net row).
	Net perturb.Net
	// SelfNice is bpfbench's nice level, that of the client-cpu row's
	// busy threads.
	SelfNice int
}

// ParseRowList reads a comma-separated list of rows given to flag, each
// one of allowed; a *loadgen.ConfigError otherwise.
func ParseRowList(flag, list string, allowed ...string) (map[string]bool, error) {
	rows := map[string]bool{}
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		ok := false
		for _, a := range allowed {
			ok = ok || a == s
		}
		if !ok {
			return nil, &loadgen.ConfigError{Err: fmt.Errorf("--%s %q: use %s", flag, s, orList(allowed))}
		}
		rows[s] = true
	}
	return rows, nil
}

// orList writes "a, b or c".
func orList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// Injections builds the rows to inject into the server pid. note, when
// set, says why a row was left out. A row that cannot run as given is a
// *loadgen.ConfigError.
func (c ValidateRowsConfig) Injections(pid int) (injs []Injection, note string, err error) {
	usage := func(format string, a ...any) error { return &loadgen.ConfigError{Err: fmt.Errorf(format, a...)} }
	busy := c.BusyCPUs
	if len(busy) == 0 {
		if busy, err = host.AffinityOf(pid); err != nil {
			return nil, "", err
		}
	}
	if !c.Skip["cpu"] {
		injs = append(injs, CPUInjection(busy))
	}
	if !c.Skip["io"] {
		file := c.IOFile
		if file == "" {
			if file, err = ServerIOFile(pid); err != nil {
				return nil, "", fmt.Errorf("%w (or --skip io)", err)
			}
		}
		injs = append(injs, IOInjection(file))
	}
	if !c.Skip["gpu"] && c.CUDAControl != "" {
		injs = append(injs, GPUInjection(c.CUDAControl, c.GPUKernelUS))
	}
	if c.With["compute"] && c.StepControl == "" {
		return nil, "", usage("--with compute needs the server's --step-control file (or --sim)")
	}
	if !c.Skip["compute"] && c.StepControl != "" {
		injs = append(injs, ComputeInjection(c.StepControl, c.StepUS))
	}
	if !c.Skip["client"] {
		injs = append(injs, ClientInjection(c.SlowRead))
	}
	if !c.Skip["net"] && c.Net.Iface != "" {
		check := c.Net
		if check.Rate == 0 {
			check.Rate = 1 // chosen in the baseline phase
		}
		if err := check.Validate(); err != nil {
			return nil, "", &loadgen.ConfigError{Err: err}
		}
		injs = append(injs, NetInjection(c.Net))
	}
	// Last: a starved load generator falls behind its schedule, and the
	// requests it sends late spill over into the next phase. Busy threads
	// on bpfbench's own CPUs, at its nice level: only when the server runs
	// elsewhere (--sim pins them apart); otherwise the row is left out and
	// the note says why, unless asked for by name.
	if !c.Skip["client-cpu"] {
		self, err := host.AffinityOf(0)
		if err != nil {
			return nil, "", err
		}
		if shared := host.SharedCPUs(self, busy); len(shared) > 0 {
			if c.With["client-cpu"] {
				return nil, "", usage("--with client-cpu: bpfbench shares CPUs %v with the server (run it under taskset apart from the server, or with --sim)", shared)
			}
			note = fmt.Sprintf("no client-cpu row: bpfbench shares CPUs %v with the server (run it under taskset apart from the server for one)", shared)
		} else {
			injs = append(injs, ClientCPUInjection(self, c.SelfNice))
		}
	}
	if len(injs) == 0 {
		return nil, "", usage("every injection is skipped")
	}
	return injs, note, nil
}

// Verdict is validate's exit: an error unless every injected cause is the
// top cause with at least minShare of the tail excess it added, every
// injection was strong enough to judge, and the critical path left at most
// maxUnexplained of the run's gap time unexplained.
func (v *Validation) Verdict(minShare, maxUnexplained float64) error {
	var bad, weak []string
	for _, r := range v.Rows {
		if r.Missed != "" {
			bad = append(bad, fmt.Sprintf("%s (the injection missed its phase: %s)", r.Injection, r.Missed))
			continue
		}
		if r.Weak {
			weak = append(weak, fmt.Sprintf("%s (added %.1f ms per tail gap)", r.Injection, r.AddedMs))
			continue
		}
		if !r.Correct || r.JudgedShare() < minShare {
			bad = append(bad, fmt.Sprintf("%s (top %s, %.0f%%)", r.Injection, r.JudgedTop(), r.JudgedShare()*100))
		}
	}
	if len(weak) > 0 {
		bad = append(bad, "injection too weak for "+strings.Join(weak, ", ")+fmt.Sprintf(" (under %.1f ms: a stronger injection, e.g. a longer --phase or a higher --rate, is needed to judge it)", v.MinAddedMs))
	}
	if len(bad) > 0 {
		return fmt.Errorf("attribution not validated for %s: want each injected cause on top with at least %.0f%% of the tail excess", strings.Join(bad, ", "), minShare*100)
	}
	if v.Unexplained > maxUnexplained {
		return fmt.Errorf("the critical path left %.1f%% of the run's gap time unexplained, more than %.0f%% (lost events or threads with no history: see result.json's critical_path.stats)",
			v.Unexplained*100, maxUnexplained*100)
	}
	return nil
}
