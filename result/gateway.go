package result

// Gateway is the run's figures per hop through a proxy in front of the
// engine (run --via-pid/--via-port): for each chunk the engine's send on
// its connection to the gateway (s_e), the gateway's send on the client's
// connection (s_g), the client's arrival (r) and its read (c).
type Gateway struct {
	Pids []int  `json:"pids"`
	Comm string `json:"comm,omitempty"`
	// Rule says how chunks and connections were matched across the hop.
	Rule string `json:"rule"`
	// Hops are "engine → gateway" (s_g − s_e, the gateway's buffering
	// included), "gateway → client" (r − s_g) and "client" (c − r).
	Hops []Hop `json:"hops"`
	// Chunks is the chunks with all four times found, of ChunksSeen.
	Chunks     int `json:"chunks"`
	ChunksSeen int `json:"chunks_seen"`
	// InlineGatewaySends is the chunks whose gateway send was stamped
	// after the client's arrival (over loopback the receive runs inside
	// the send): their gateway → client hop reads 0.
	InlineGatewaySends int `json:"inline_gateway_sends"`
	// Requests is the requests matched to an engine-side connection.
	Requests          int `json:"requests"`
	RequestsUnmatched int `json:"requests_unmatched"`
	// EngineSends, GatewaySends and ClientArrivals are the send and
	// arrival records of the matched requests, on each leg.
	EngineSends    int `json:"engine_sends"`
	GatewaySends   int `json:"gateway_sends"`
	ClientArrivals int `json:"client_arrivals"`
	// EngineSendsPerGatewaySend above 1 is the gateway sending in bursts
	// (buffering): Buffering is set when it is at least BufferingRatio.
	EngineSendsPerGatewaySend float64 `json:"engine_sends_per_gateway_send"`
	ArrivalsPerRequest        float64 `json:"client_arrivals_per_request"`
	Buffering                 bool    `json:"buffering"`
	// Throughput at the gateway (the load's, client side) and at the
	// engine (its own /metrics when found, else its sends).
	Throughput Throughput `json:"throughput"`
	// Backpressure is each connection's blocking TCP episodes (zero
	// window, retransmission, loss recovery), client side and upstream.
	Backpressure []HopBackpressure `json:"backpressure,omitempty"`
	// PerRequest is each matched request's legs.
	PerRequest []GatewayRequest `json:"per_request,omitempty"`
}

// BufferingRatio is the engine sends per gateway send from which the
// gateway is said to buffer.
const BufferingRatio = 1.5

// Hop is one leg's time per chunk.
type Hop struct {
	Name   string  `json:"name"`
	Count  int     `json:"count"`
	MeanMs float64 `json:"mean_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
}

// Throughput is requests/s and tokens/s on both sides of the gateway.
type Throughput struct {
	GatewayRequestsPerS float64 `json:"gateway_requests_per_s"`
	GatewayTokensPerS   float64 `json:"gateway_tokens_per_s"`
	EngineRequestsPerS  float64 `json:"engine_requests_per_s,omitempty"`
	EngineTokensPerS    float64 `json:"engine_tokens_per_s,omitempty"`
	EngineSendsPerS     float64 `json:"engine_sends_per_s,omitempty"`
	// EngineSource is "server_metrics" or "engine sends".
	EngineSource string `json:"engine_source"`
}

// HopBackpressure is the blocking TCP time on one side of the gateway.
type HopBackpressure struct {
	// Connection is "client" (the gateway's sockets towards the load
	// generator) or "upstream" (the engine's sockets towards the gateway).
	Connection string         `json:"connection"`
	Kinds      map[string]int `json:"episodes"`
	Ms         float64        `json:"ms"`
	Requests   []int          `json:"requests,omitempty"`
}

// GatewayRequest is one request's connections and sends on each leg.
type GatewayRequest struct {
	Index          int     `json:"index"`
	ClientPort     uint16  `json:"client_port"`
	UpstreamPort   uint16  `json:"upstream_port"`
	EngineSends    int     `json:"engine_sends"`
	GatewaySends   int     `json:"gateway_sends"`
	ClientArrivals int     `json:"client_arrivals"`
	ClientBlockMs  float64 `json:"client_backpressure_ms,omitempty"`
	UpBlockMs      float64 `json:"upstream_backpressure_ms,omitempty"`
}
