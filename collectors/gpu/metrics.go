package gpu

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

var deviceLabels = []string{"gpu", "uuid", "name"}

type metricDescs struct {
	util, memUtil, memUsed, memTotal, smClock, memClock *prometheus.Desc
	power, temp, reason, tx, rx                         *prometheus.Desc
	procSM, procMem, procMemUsed                        *prometheus.Desc
}

func newMetricDescs() metricDescs {
	d := func(name, help string, extra ...string) *prometheus.Desc {
		return prometheus.NewDesc("bpfbench_gpu_"+name, help, append(append([]string{}, deviceLabels...), extra...), nil)
	}
	return metricDescs{
		util:        d("utilization_ratio", "Fraction of the last sample period during which one or more kernels ran on the GPU (NVML utilization.gpu)."),
		memUtil:     d("memory_utilization_ratio", "Fraction of the last sample period during which device memory was read or written (NVML utilization.memory)."),
		memUsed:     d("memory_used_bytes", "Device memory in use."),
		memTotal:    d("memory_total_bytes", "Device memory installed."),
		smClock:     d("sm_clock_hertz", "Current SM clock."),
		memClock:    d("memory_clock_hertz", "Current memory clock."),
		power:       d("power_watts", "Power drawn by the board."),
		temp:        d("temperature_celsius", "GPU core temperature."),
		reason:      d("clock_event_reason_active", "1 when NVML reports the clock event (throttle) reason as active, else 0.", "reason"),
		tx:          d("pcie_tx_bytes_total", "PCIe bytes transmitted (device to host), integrated from NVML's throughput samples (each sample's rate over NVML's 20 ms window times the interval since the previous sample): an estimate; use rate()."),
		rx:          d("pcie_rx_bytes_total", "PCIe bytes received (host to device), integrated from NVML's throughput samples (each sample's rate over NVML's 20 ms window times the interval since the previous sample): an estimate; use rate()."),
		procSM:      d("process_sm_utilization_ratio", "SM utilization of a target's processes over the last sample period (summed over its processes).", "target"),
		procMem:     d("process_memory_utilization_ratio", "Memory controller utilization of a target's processes over the last sample period (summed).", "target"),
		procMemUsed: d("process_memory_used_bytes", "Device memory used by a target's processes (summed).", "target"),
	}
}

// Describe sends the descriptions of the GPU gauges.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	m := &c.metrics
	for _, d := range []*prometheus.Desc{m.util, m.memUtil, m.memUsed, m.memTotal, m.smClock, m.memClock,
		m.power, m.temp, m.reason, m.tx, m.rx, m.procSM, m.procMem, m.procMemUsed} {
		ch <- d
	}
}

// Collect sends the newest sample of each device; it makes no NVML call.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	m := &c.metrics
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range c.devices {
		s := d.latest
		if s == nil {
			continue
		}
		labels := []string{strconv.Itoa(d.info.Index), d.info.UUID, d.info.Name}
		gauge := func(desc *prometheus.Desc, f Field, v float64) {
			if s.Has(f) {
				ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
			}
		}
		gauge(m.util, FieldGPUUtilization, s.GPUUtilization)
		gauge(m.memUtil, FieldMemoryUtilization, s.MemoryUtilization)
		gauge(m.memUsed, FieldMemoryUsed, float64(s.MemoryUsedBytes))
		gauge(m.memTotal, FieldMemoryTotal, float64(s.MemoryTotalBytes))
		gauge(m.smClock, FieldSMClock, s.SMClockHz)
		gauge(m.memClock, FieldMemoryClock, s.MemoryClockHz)
		gauge(m.power, FieldPower, s.PowerWatts)
		gauge(m.temp, FieldTemperature, s.TemperatureCelsius)
		if d.pcie.has&FieldPCIeTx != 0 {
			ch <- prometheus.MustNewConstMetric(m.tx, prometheus.CounterValue, d.pcie.tx, labels...)
		}
		if d.pcie.has&FieldPCIeRx != 0 {
			ch <- prometheus.MustNewConstMetric(m.rx, prometheus.CounterValue, d.pcie.rx, labels...)
		}
		if s.Has(FieldClockEventReasons) {
			for _, r := range Reasons {
				v := 0.0
				if s.ClockEventReasons&r.Bit != 0 {
					v = 1
				}
				ch <- prometheus.MustNewConstMetric(m.reason, prometheus.GaugeValue, v, append(labels, r.Name)...)
			}
		}
		// Per target, not per process: pids churn as servers restart and
		// would make unbounded series; a target's processes are summed.
		type agg struct {
			sm, mem, used   float64
			hasUtil, hasMem bool
		}
		byTarget := map[string]*agg{}
		var order []string
		for _, p := range s.Processes {
			t := c.targetOf(p.Pid)
			a := byTarget[t]
			if a == nil {
				a = &agg{}
				byTarget[t] = a
				order = append(order, t)
			}
			if p.Has(ProcUtilization) {
				a.sm += p.SMUtilization
				a.mem += p.MemoryUtilization
				a.hasUtil = true
			}
			if p.Has(ProcMemory) {
				a.used += float64(p.MemoryUsedBytes)
				a.hasMem = true
			}
		}
		for _, t := range order {
			a := byTarget[t]
			pl := append(append([]string{}, labels...), t)
			if a.hasUtil {
				ch <- prometheus.MustNewConstMetric(m.procSM, prometheus.GaugeValue, a.sm, pl...)
				ch <- prometheus.MustNewConstMetric(m.procMem, prometheus.GaugeValue, a.mem, pl...)
			}
			if a.hasMem {
				ch <- prometheus.MustNewConstMetric(m.procMemUsed, prometheus.GaugeValue, a.used, pl...)
			}
		}
	}
}

// targetOf names the target a pid belongs to for metric labels: the
// configured TargetOf, else the pid itself (a session follows one process).
func (c *Collector) targetOf(pid int) string {
	if c.cfg.TargetOf != nil {
		if t := c.cfg.TargetOf(pid); t != "" {
			return t
		}
	}
	return strconv.Itoa(pid)
}
