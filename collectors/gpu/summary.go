package gpu

import (
	"github.com/bpfbench/bpfbench/result"
	"math/bits"
	"sort"
)

// Stat (result.GPUStat) is the mean and maximum of a reading over the samples that held it.
type Stat = result.GPUStat

type acc struct {
	sum, max float64
	n        int
}

func (a *acc) add(v float64) {
	if a.n == 0 || v > a.max {
		a.max = v
	}
	a.sum += v
	a.n++
}

func (a *acc) stat() *Stat {
	if a.n == 0 {
		return nil
	}
	return &Stat{Mean: a.sum / float64(a.n), Max: a.max, Samples: a.n}
}

type processStats struct {
	sm, mem, memBytes acc
}

// deviceStats accumulate over the whole session, beyond the kept series.
type deviceStats struct {
	samples                                int
	gpu, mem, memUsed, sm, memClock, power acc
	temp, tx, rx                           acc
	memTotal                               uint64
	reasonSamples                          int
	reasons                                [64]int // samples with bit i set
	procs                                  map[int]*processStats
}

func (st *deviceStats) add(s *Sample) {
	st.samples++
	if s.Has(FieldGPUUtilization) {
		st.gpu.add(s.GPUUtilization)
	}
	if s.Has(FieldMemoryUtilization) {
		st.mem.add(s.MemoryUtilization)
	}
	if s.Has(FieldMemoryUsed) {
		st.memUsed.add(float64(s.MemoryUsedBytes))
	}
	if s.Has(FieldMemoryTotal) {
		st.memTotal = s.MemoryTotalBytes
	}
	if s.Has(FieldSMClock) {
		st.sm.add(s.SMClockHz)
	}
	if s.Has(FieldMemoryClock) {
		st.memClock.add(s.MemoryClockHz)
	}
	if s.Has(FieldPower) {
		st.power.add(s.PowerWatts)
	}
	if s.Has(FieldTemperature) {
		st.temp.add(s.TemperatureCelsius)
	}
	if s.Has(FieldPCIeTx) {
		st.tx.add(s.PCIeTxBytesPerSecond)
	}
	if s.Has(FieldPCIeRx) {
		st.rx.add(s.PCIeRxBytesPerSecond)
	}
	if s.Has(FieldClockEventReasons) {
		st.reasonSamples++
		for r := s.ClockEventReasons; r != 0; r &= r - 1 {
			st.reasons[bits.TrailingZeros64(r)]++
		}
	}
	for i := range s.Processes {
		p := &s.Processes[i]
		if st.procs == nil {
			st.procs = map[int]*processStats{}
		}
		ps := st.procs[p.Pid]
		if ps == nil {
			ps = &processStats{}
			st.procs[p.Pid] = ps
		}
		if p.Has(ProcUtilization) {
			ps.sm.add(p.SMUtilization)
			ps.mem.add(p.MemoryUtilization)
		}
		if p.Has(ProcMemory) {
			ps.memBytes.add(float64(p.MemoryUsedBytes))
		}
	}
}

// Summary (result.GPU) is the `gpu` section of `bpfbench attach --output json`.
type Summary = result.GPU

// DeviceSummary (result.GPUDevice) is one device over the session. A reading the device never
// reported is absent.
type DeviceSummary = result.GPUDevice

// ProcessSummary (result.GPUProcess) is one target process on one device over the session.
type ProcessSummary = result.GPUProcess

// Summary returns the session's means and maxima, per device and per target
// process. Before Start, or when it failed, Available is false.
func (c *Collector) Summary() Summary {
	c.mu.Lock()
	defer c.mu.Unlock()
	sum := Summary{
		Available:       c.started,
		IntervalSeconds: c.cfg.Interval.Seconds(),
		Devices:         []DeviceSummary{},
		Processes:       []ProcessSummary{},
	}
	if c.initErr != nil {
		sum.Error = c.initErr.Error()
	}
	for _, d := range c.devices {
		st := &d.stats
		ds := DeviceSummary{
			GPUDeviceInfo:      d.info,
			Samples:            st.samples,
			MemoryTotalBytes:   st.memTotal,
			GPUUtilization:     st.gpu.stat(),
			MemoryUtilization:  st.mem.stat(),
			MemoryUsedBytes:    st.memUsed.stat(),
			SMClockHz:          st.sm.stat(),
			MemoryClockHz:      st.memClock.stat(),
			PowerWatts:         st.power.stat(),
			TemperatureCelsius: st.temp.stat(),
			PCIeTx:             st.tx.stat(),
			PCIeRx:             st.rx.stat(),
		}
		if st.reasonSamples > 0 {
			for i, n := range st.reasons {
				if n > 0 {
					if ds.ClockEventReasons == nil {
						ds.ClockEventReasons = map[string]float64{}
					}
					ds.ClockEventReasons[ReasonName(1<<i)] = float64(n) / float64(st.reasonSamples)
				}
			}
		}
		sum.Devices = append(sum.Devices, ds)
		for pid, ps := range st.procs {
			sum.Processes = append(sum.Processes, ProcessSummary{
				Pid: pid, GPU: d.info.Index, UUID: d.info.UUID,
				SMUtilization:     ps.sm.stat(),
				MemoryUtilization: ps.mem.stat(),
				MemoryUsedBytes:   ps.memBytes.stat(),
			})
		}
	}
	sort.Slice(sum.Processes, func(i, j int) bool {
		a, b := sum.Processes[i], sum.Processes[j]
		if a.Pid != b.Pid {
			return a.Pid < b.Pid
		}
		return a.GPU < b.GPU
	})
	return sum
}

func sortProcesses(ps []ProcessSample) {
	sort.Slice(ps, func(i, j int) bool { return ps[i].Pid < ps[j].Pid })
}
