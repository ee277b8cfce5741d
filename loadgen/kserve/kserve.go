// Package kserve is the load generator's client of the KServe v2 / Triton
// gRPC protocol: one decoupled ModelStreamInfer stream per request, in
// Triton's text convention for LLM backends (TensorRT-LLM, vLLM):
//
//   - inputs: "text_input" BYTES [1] (the prompt), "max_tokens" INT32 [1],
//     "stream" BOOL [1] = true, and "ignore_eos" BOOL [1] when asked and the
//     model declares it; a model whose config has max_batch_size > 0
//     (TensorRT-LLM's ensemble) gets a leading batch dimension, [1, 1]; a
//     model that takes "sampling_parameters" instead of "max_tokens" (the
//     vLLM backend) gets {"max_tokens": N, "ignore_eos": B} there, and
//     "exclude_input_in_output" true when it declares it. The model's
//     config is read once with ModelConfig; without it the plain form is
//     sent. Inputs go in raw_input_contents (BYTES as 4-byte little-endian
//     lengths and bytes), as Triton's own clients send them.
//   - request parameter "triton_enable_empty_final_response" = true, so that
//     a model that flags its end without a response still ends the stream.
//   - every ModelStreamInferResponse is one chunk: its "text_output" (BYTES,
//     from raw_output_contents or contents) is the token text; the response
//     parameter "triton_final_response" = true ends the request; a
//     non-empty error_message is an error in the stream.
//
// The package knows nothing of Records: loadgen's client drives a stream
// through a Handler and turns what it reports into one.
package kserve

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/bpfbench/bpfbench/internal/clock"
	"github.com/bpfbench/bpfbench/loadgen/kserve/inference"
)

// Names of Triton's text convention.
const (
	InputText         = "text_input"
	InputMaxTokens    = "max_tokens"
	InputStream       = "stream"
	InputIgnoreEOS    = "ignore_eos"
	InputSampling     = "sampling_parameters"
	InputExcludeInput = "exclude_input_in_output"
	OutputText        = "text_output"
	// ParamFinal is the response parameter that marks a request's last
	// response in decoupled mode.
	ParamFinal = "triton_final_response"
	// ParamEmptyFinal asks for an empty final response when a model flags
	// its end without one.
	ParamEmptyFinal = "triton_enable_empty_final_response"
)

// Target returns the gRPC address of a --target: host:port, with a
// grpc:// (or http://) scheme and a trailing slash removed.
func Target(target string) (string, error) {
	t := strings.TrimRight(target, "/")
	for _, p := range []string{"grpc://", "http://", "dns:///"} {
		t = strings.TrimPrefix(t, p)
	}
	if t == "" {
		return "", errors.New("no target: pass --target HOST:PORT (the server's gRPC port, e.g. Triton's 8001)")
	}
	if strings.Contains(t, "://") || strings.Contains(t, "/") {
		return "", fmt.Errorf("target %q: kserve-grpc takes HOST:PORT or grpc://HOST:PORT", target)
	}
	if _, _, err := net.SplitHostPort(t); err != nil {
		return "", fmt.Errorf("target %q: %v (kserve-grpc takes HOST:PORT)", target, err)
	}
	return t, nil
}

// Options configure a Client.
type Options struct {
	Target string // HOST:PORT or grpc://HOST:PORT
	Model  string
	// NewConnPerRequest dials a connection for every request (--no-keepalive).
	NewConnPerRequest bool
}

// Client sends streaming requests to one model. It is safe for concurrent use.
type Client struct {
	addr  string
	model string
	conn  *grpc.ClientConn // nil with NewConnPerRequest
	form  form
}

// form is how the model wants its inputs, from its config.
type form struct {
	batchDim    bool // max_batch_size > 0: shapes [1, 1]
	sampling    bool // max_tokens inside sampling_parameters (vLLM backend)
	exclude     bool // exclude_input_in_output declared
	ignoreEOS   bool // ignore_eos declared as an input
	noStream    bool // no "stream" input declared
	maxTokensDT string
}

func dial(addr string) (*grpc.ClientConn, error) {
	cc, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)),
		grpc.WithInitialWindowSize(1<<20), grpc.WithInitialConnWindowSize(16<<20))
	if err != nil {
		return nil, fmt.Errorf("gRPC client for %s: %w", addr, err)
	}
	return cc, nil
}

// New returns a client for opts. It reads the model's config (ModelConfig)
// to shape the inputs; a server that does not answer gets the plain form.
func New(opts Options) (*Client, error) {
	addr, err := Target(opts.Target)
	if err != nil {
		return nil, err
	}
	c := &Client{addr: addr, model: opts.Model, form: form{maxTokensDT: "INT32"}}
	cc, err := dial(addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if resp, err := inference.NewGRPCInferenceServiceClient(cc).ModelConfig(ctx, &inference.ModelConfigRequest{Name: opts.Model}); err == nil {
		c.form = formOf(resp.GetConfig())
	}
	if opts.NewConnPerRequest {
		cc.Close()
	} else {
		c.conn = cc
	}
	return c, nil
}

func formOf(cfg *inference.ModelConfig) form {
	f := form{maxTokensDT: "INT32", batchDim: cfg.GetMaxBatchSize() > 0, noStream: true}
	hasMax := false
	for _, in := range cfg.GetInput() {
		switch in.GetName() {
		case InputMaxTokens:
			hasMax = true
			switch in.GetDataType() {
			case inference.DataType_TYPE_INT64:
				f.maxTokensDT = "INT64"
			case inference.DataType_TYPE_UINT32:
				f.maxTokensDT = "UINT32"
			}
		case InputSampling:
			f.sampling = true
		case InputExcludeInput:
			f.exclude = true
		case InputIgnoreEOS:
			f.ignoreEOS = true
		case InputStream:
			f.noStream = false
		}
	}
	if len(cfg.GetInput()) == 0 {
		f.noStream = false
	}
	f.sampling = f.sampling && !hasMax
	return f
}

// Models lists the models a server has loaded (RepositoryIndex, ready
// only), for a --model left empty.
func Models(ctx context.Context, target string) ([]string, error) {
	addr, err := Target(target)
	if err != nil {
		return nil, err
	}
	cc, err := dial(addr)
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	resp, err := inference.NewGRPCInferenceServiceClient(cc).RepositoryIndex(ctx, &inference.RepositoryIndexRequest{Ready: true})
	if err != nil {
		return nil, fmt.Errorf("listing the models of %s (RepositoryIndex): %w", addr, err)
	}
	var out []string
	for _, m := range resp.GetModels() {
		out = append(out, m.GetName())
	}
	return out, nil
}

// Close closes the connection.
func (c *Client) Close() error {
	if c.conn != nil {
		return c.conn.Close()
	}
	return nil
}

// Request is one prompt.
type Request struct {
	ID        string // the request's id (ModelInferRequest.id and x-request-id)
	Prompt    string
	MaxTokens int
	IgnoreEOS bool
	// Metadata are the request's gRPC metadata (headers): traceparent and
	// the --header values.
	Metadata metadata.MD
}

func bytesTensor(s string) []byte {
	b := make([]byte, 4+len(s))
	binary.LittleEndian.PutUint32(b, uint32(len(s)))
	copy(b[4:], s)
	return b
}

func (c *Client) build(r *Request) *inference.ModelInferRequest {
	shape := []int64{1}
	if c.form.batchDim {
		shape = []int64{1, 1}
	}
	req := &inference.ModelInferRequest{
		ModelName: c.model,
		Id:        r.ID,
		Parameters: map[string]*inference.InferParameter{
			ParamEmptyFinal: {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}},
		},
		Outputs: []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: OutputText}},
	}
	add := func(name, dt string, raw []byte) {
		req.Inputs = append(req.Inputs, &inference.ModelInferRequest_InferInputTensor{Name: name, Datatype: dt, Shape: shape})
		req.RawInputContents = append(req.RawInputContents, raw)
	}
	boolRaw := func(v bool) []byte {
		if v {
			return []byte{1}
		}
		return []byte{0}
	}
	add(InputText, "BYTES", bytesTensor(r.Prompt))
	if !c.form.noStream {
		add(InputStream, "BOOL", boolRaw(true))
	}
	if c.form.sampling {
		sp, _ := json.Marshal(map[string]any{"max_tokens": r.MaxTokens, "ignore_eos": r.IgnoreEOS, "temperature": 0})
		add(InputSampling, "BYTES", bytesTensor(string(sp)))
		if c.form.exclude {
			add(InputExcludeInput, "BOOL", boolRaw(true))
		}
	} else {
		var raw []byte
		switch c.form.maxTokensDT {
		case "INT64":
			raw = binary.LittleEndian.AppendUint64(nil, uint64(r.MaxTokens))
		default:
			raw = binary.LittleEndian.AppendUint32(nil, uint32(r.MaxTokens))
		}
		add(InputMaxTokens, c.form.maxTokensDT, raw)
	}
	if r.IgnoreEOS && c.form.ignoreEOS {
		add(InputIgnoreEOS, "BOOL", boolRaw(true))
	}
	return req
}

// Handler receives one stream's events, on the request's goroutine, each
// with the clock reading (CLOCK_MONOTONIC ns, loadgen's clock) taken when
// the call that delivered it returned.
type Handler interface {
	// Started: the stream exists on a connection whose local TCP port is
	// port (0 when unknown); the request is not sent yet.
	Started(now int64, port int)
	// Sent: the request was handed to the transport and the sending side
	// closed.
	Sent(now int64)
	// Headers: the response headers (the HEADERS frame) arrived.
	Headers(now int64)
	// Response is one ModelStreamInferResponse; returning false ends the
	// stream (the request is over: final, or failed).
	Response(now int64, r *inference.ModelStreamInferResponse) bool
}

// ErrNoFinal is a stream the server ended (status OK) before a response
// with triton_final_response.
var ErrNoFinal = errors.New("the stream ended before the final response (triton_final_response)")

// Stream sends r on a new ModelStreamInfer stream and reports to h until
// h stops it or the stream ends. It returns nil when h stopped it, ErrNoFinal
// when the server closed the stream first, or the stream's error (a gRPC
// status error; ctx's cause shows in its code: Canceled, DeadlineExceeded).
func (c *Client) Stream(ctx context.Context, r *Request, h Handler) error {
	cc := c.conn
	if cc == nil {
		var err error
		if cc, err = dial(c.addr); err != nil {
			return err
		}
		defer cc.Close()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream when h stopped it early
	if len(r.Metadata) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, r.Metadata)
	}
	st, err := inference.NewGRPCInferenceServiceClient(cc).ModelStreamInfer(ctx)
	if err != nil {
		return err
	}
	port := 0
	if p, ok := peer.FromContext(st.Context()); ok && p.LocalAddr != nil {
		if a, ok := p.LocalAddr.(*net.TCPAddr); ok {
			port = a.Port
		}
	}
	h.Started(clock.Fast(), port)
	if err := st.Send(c.build(r)); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	// (On io.EOF the stream has ended: Recv returns its status.)
	if err := st.CloseSend(); err != nil {
		return err
	}
	h.Sent(clock.Fast())
	if md, _ := st.Header(); md != nil {
		h.Headers(clock.Fast())
	}
	for {
		resp, err := st.Recv()
		now := clock.Fast()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return ErrNoFinal
			}
			return err
		}
		if !h.Response(now, resp) {
			return nil
		}
	}
}

// MalformedError is a response that does not carry the text convention.
type MalformedError struct{ Reason string }

func (e *MalformedError) Error() string { return "malformed response: " + e.Reason }

// Text reads a response of the convention: the text of its "text_output"
// (nil when it has no outputs, as an empty final response), whether it is
// the request's final response, and its error message, if any. A response
// whose output is not one BYTES element is a *MalformedError.
func Text(r *inference.ModelStreamInferResponse) (text []byte, hasOutput, final bool, errMsg string, err error) {
	if r.GetErrorMessage() != "" {
		return nil, false, false, r.GetErrorMessage(), nil
	}
	ir := r.GetInferResponse()
	if ir == nil {
		return nil, false, false, "", &MalformedError{"no infer_response and no error_message"}
	}
	if p, ok := ir.GetParameters()[ParamFinal]; ok {
		final = p.GetBoolParam()
	}
	outs := ir.GetOutputs()
	if len(outs) == 0 {
		if !final {
			return nil, false, false, "", &MalformedError{"a response without outputs that is not the final one"}
		}
		return nil, false, true, "", nil
	}
	for i, o := range outs {
		if o.GetName() != OutputText {
			continue
		}
		if o.GetDatatype() != "BYTES" {
			return nil, false, final, "", &MalformedError{fmt.Sprintf("output %s has datatype %s, want BYTES", OutputText, o.GetDatatype())}
		}
		if raw := ir.GetRawOutputContents(); len(raw) > 0 {
			if i >= len(raw) {
				return nil, false, final, "", &MalformedError{fmt.Sprintf("%d raw output contents for %d outputs", len(raw), len(outs))}
			}
			b := raw[i]
			if len(b) < 4 || int(binary.LittleEndian.Uint32(b)) != len(b)-4 {
				return nil, false, final, "", &MalformedError{fmt.Sprintf("output %s: %d raw bytes are not one length-prefixed BYTES element", OutputText, len(b))}
			}
			return b[4:], true, final, "", nil
		}
		bc := o.GetContents().GetBytesContents()
		if len(bc) != 1 {
			return nil, false, final, "", &MalformedError{fmt.Sprintf("output %s holds %d elements, want 1", OutputText, len(bc))}
		}
		return bc[0], true, final, "", nil
	}
	return nil, false, final, "", &MalformedError{"no " + OutputText + " output"}
}
