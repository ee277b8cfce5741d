package result

// TCP is the `tcp` section of `bpfbench attach`.
type TCP struct {
	// Error is why the last refresh could not read every target's sockets,
	// and what to do: the connections are then those it could read (none,
	// often), not all the target has.
	Error       string          `json:"error,omitempty"`
	Connections []TCPConnection `json:"connections"`
	// Data counts the send and arrival records (sessions).
	Data *TCPDataCounts `json:"data,omitempty"`
	// Dumps are the refreshes' socket dumps and their cost.
	Dumps *TCPDumpCounts `json:"dumps,omitempty"`
}

// TCPConnection is one connection in the `tcp` section. Window and
// congestion figures are the last seen; srtt and cwnd come from tcp_info
// when the connection was still open at the last refresh.
type TCPConnection struct {
	Local                string  `json:"local"`
	Remote               string  `json:"remote"`
	SrttSeconds          float64 `json:"srtt_seconds"`
	SndCwnd              uint32  `json:"snd_cwnd"`
	SndWndMin            uint32  `json:"snd_wnd_min"`
	Retransmits          uint32  `json:"retransmits"`
	ZeroWindowSeconds    float64 `json:"zero_window_seconds"`
	RwndLimitedSeconds   float64 `json:"rwnd_limited_seconds"`
	SndbufLimitedSeconds float64 `json:"sndbuf_limited_seconds"`
	BytesSent            uint64  `json:"bytes_sent"`
	BytesReceived        uint64  `json:"bytes_received"`
	// RcvqueueFull counts segments dropped because the target's receive
	// queue was full (it was not reading fast enough).
	RcvqueueFull uint32 `json:"rcvqueue_full"`
	// RcvSpace and Rcvbuf are the receive autotuning's rcvq_space.space
	// and sk_rcvbuf (bytes) at the target's last read; 0 if it never read.
	RcvSpace uint32 `json:"rcv_space"`
	Rcvbuf   uint32 `json:"rcvbuf"`
	// RecoveryEntries and LossEntries count entries into the Recovery
	// (fast retransmit) and Loss (retransmission timeout) congestion
	// states; CongestionLossSeconds is the time spent in either.
	RecoveryEntries       uint32  `json:"recovery_entries"`
	LossEntries           uint32  `json:"loss_entries"`
	CongestionLossSeconds float64 `json:"congestion_loss_seconds"`
	// Sends and SendBytes count the target's sends on the connection
	// (folded ones included).
	Sends     uint64 `json:"sends,omitempty"`
	SendBytes uint64 `json:"send_bytes,omitempty"`
}

// TCPDataCounts count the Send and Arrival records and their bytes (folded
// ones included).
type TCPDataCounts struct {
	Sends        uint64 `json:"send_records"`
	SendBytes    uint64 `json:"send_bytes"`
	Arrivals     uint64 `json:"arrival_records"`
	ArrivalBytes uint64 `json:"arrival_bytes"`
	Folded       uint64 `json:"folded"`
	// SendsFull counts the waits of a non-blocking server for a full send
	// buffer (SendFull records).
	SendsFull uint64 `json:"sends_full,omitempty"`
	// Requests count the Request records (Config.Requests) and their bytes.
	Requests     uint64 `json:"request_records,omitempty"`
	RequestBytes uint64 `json:"request_bytes,omitempty"`
	// Releases count the Release records: a reader taking what the
	// server wrote into its full window.
	Releases uint64 `json:"releases,omitempty"`
}

// TCPDumpCounts measure the socket dumps of the refreshes. A dump walks the
// kernel's whole established-socket hash table (9 ms of a CPU here with
// 262,144 buckets, whatever the number of sockets), so refreshes dump
// only as often as keeps them within dumpBudget of a CPU: in between they
// read the followed sockets' kernel state alone, and the kernel follows
// the connections accepted on the listening ports it knows.
type TCPDumpCounts struct {
	Dumps      uint64  `json:"socket_dumps"`
	CPUSeconds float64 `json:"socket_dump_cpu_seconds"`
	PeriodS    float64 `json:"socket_dump_period_seconds"`
}
