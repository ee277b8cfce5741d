package transport

import "github.com/bpfbench/bpfbench/result"

// Failure kinds, the reasons a request is counted as failed.
const (
	FailHTTPStatus    = "http_status"    // the server answered with a non-200 status
	FailGRPCStatus    = "grpc_status"    // the server ended a gRPC stream with an error status
	FailConnect       = "connect"        // the connection could not be made (refused, DNS, ...)
	FailTimeout       = "timeout"        // the request ran past its total timeout
	FailStall         = "stall"          // no byte arrived for the stall timeout
	FailHeaderTimeout = "header_timeout" // the response headers were not complete within the header timeout
	FailCut           = "cut"            // the stream ended before its end ([DONE], a finish_reason, triton_final_response)
	FailMalformed     = "malformed"      // a chunk was not valid JSON (gRPC: a response without one BYTES text_output)
	FailStreamError   = "stream_error"   // the server sent an error object in the stream
	FailNoTokens      = "no_tokens"      // the stream completed without one chunk of output
	FailCanceled      = "canceled"       // the run was canceled while the request was in flight
	FailOther         = "other"
)

// Token sources, how a request's output token count was obtained.
const (
	TokensFromUsage  = "usage"  // the final usage object (stream_options.include_usage)
	TokensFromDelta  = "delta"  // per-chunk cumulative usage (continuous usage stats)
	TokensFromChunks = "chunks" // one token per chunk carrying output
)

// Record is everything measured for one request (result.Request, the
// type on the wire, with its methods TTFTNs, HeadersAfterNs, LatencyNs and
// QueueNs). Every *Ns field is a CLOCK_MONOTONIC timestamp in nanoseconds
// (internal/clock.Fast, loadgen.Mono), zero when the event never happened.
type Record = result.Request
