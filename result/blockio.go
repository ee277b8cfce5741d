package result

// BlockIO is the `blockio` section of `bpfbench attach`.
type BlockIO struct {
	Devices []BlockIODevice `json:"devices"`
}

// BlockIODevice is one device's share of a summary. Latency is queue + service
// time of every request (all ops); Queue covers requests that were
// inserted into a queue (insert -> issue).
type BlockIODevice struct {
	Device     string         `json:"device"`
	Reads      uint64         `json:"reads"`
	Writes     uint64         `json:"writes"`
	ReadBytes  uint64         `json:"read_bytes"`
	WriteBytes uint64         `json:"write_bytes"`
	Latency    BlockIOLatency `json:"latency_seconds"`
	Queue      BlockIOLatency `json:"queue_seconds"`
}

// BlockIOLatency summarizes a latency distribution in seconds.
type BlockIOLatency struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}
