package result

// GPU is the `gpu` section of `bpfbench attach --output json`.
type GPU struct {
	// Available is false when NVML could not be started; Error says why.
	Available       bool         `json:"available"`
	Error           string       `json:"error,omitempty"`
	IntervalSeconds float64      `json:"interval_seconds"`
	Devices         []GPUDevice  `json:"devices"`
	Processes       []GPUProcess `json:"processes"`
}

// GPUDevice is one device over the session. A reading the device never
// reported is absent.
type GPUDevice struct {
	GPUDeviceInfo
	Samples            int      `json:"samples"`
	MemoryTotalBytes   uint64   `json:"memory_total_bytes,omitempty"`
	GPUUtilization     *GPUStat `json:"utilization_ratio,omitempty"`
	MemoryUtilization  *GPUStat `json:"memory_utilization_ratio,omitempty"`
	MemoryUsedBytes    *GPUStat `json:"memory_used_bytes,omitempty"`
	SMClockHz          *GPUStat `json:"sm_clock_hertz,omitempty"`
	MemoryClockHz      *GPUStat `json:"memory_clock_hertz,omitempty"`
	PowerWatts         *GPUStat `json:"power_watts,omitempty"`
	TemperatureCelsius *GPUStat `json:"temperature_celsius,omitempty"`
	PCIeTx             *GPUStat `json:"pcie_tx_bytes_per_second,omitempty"`
	PCIeRx             *GPUStat `json:"pcie_rx_bytes_per_second,omitempty"`
	// ClockEventReasons is, per active reason, the fraction of samples
	// in which it was active.
	ClockEventReasons map[string]float64 `json:"clock_event_reasons_ratio,omitempty"`
}

// GPUDeviceInfo identifies a device.
type GPUDeviceInfo struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	Name  string `json:"name"`
}

// GPUStat is the mean and maximum of a reading over the samples that held it.
type GPUStat struct {
	Mean    float64 `json:"mean"`
	Max     float64 `json:"max"`
	Samples int     `json:"samples"`
}

// GPUProcess is one target process on one device over the session.
type GPUProcess struct {
	Pid               int      `json:"pid"`
	GPU               int      `json:"gpu"`
	UUID              string   `json:"uuid"`
	SMUtilization     *GPUStat `json:"sm_utilization_ratio,omitempty"`
	MemoryUtilization *GPUStat `json:"memory_utilization_ratio,omitempty"`
	MemoryUsedBytes   *GPUStat `json:"memory_used_bytes,omitempty"`
}
