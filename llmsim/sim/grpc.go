package sim

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/bpfbench/bpfbench/loadgen/kserve/inference"
)

// The gRPC side: Triton's GRPCInferenceService, as a decoupled model in
// Triton's text convention for LLM backends (inputs text_input BYTES,
// max_tokens INT32, stream BOOL, ignore_eos BOOL; output text_output BYTES;
// triton_final_response on the last response). The engine, its timings and
// its /metrics are the HTTP side's.
//
// Faults (by rate or the x-llmsim-fault metadata), per request:
//   - 500: an Internal status before any response;
//   - cut: the stream ends (status OK) after the first token, with no final response;
//   - malformed: after the first token, a response whose text_output is INT32;
//   - error: after the first token, a response with an error_message;
//   - stall: nothing more after the first token.
//
// GRPCCloseAfter ends every stream after that many responses, as cut does.

// ServeGRPC serves the gRPC API on l until ctx ends.
func (s *Server) ServeGRPC(ctx context.Context, l net.Listener) error {
	gs := s.GRPCServer()
	go func() {
		<-ctx.Done()
		stopped := make(chan struct{})
		go func() { gs.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(2 * time.Second):
			gs.Stop()
		}
	}()
	err := gs.Serve(l)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// GRPCServer returns a gRPC server of the inference service (Serve it on a
// listener; Stop it before Close).
func (s *Server) GRPCServer() *grpc.Server {
	gs := grpc.NewServer()
	inference.RegisterGRPCInferenceServiceServer(gs, &grpcService{s: s})
	return gs
}

type grpcService struct {
	inference.UnimplementedGRPCInferenceServiceServer
	s *Server
}

func (g *grpcService) ServerLive(context.Context, *inference.ServerLiveRequest) (*inference.ServerLiveResponse, error) {
	return &inference.ServerLiveResponse{Live: true}, nil
}

func (g *grpcService) ServerReady(context.Context, *inference.ServerReadyRequest) (*inference.ServerReadyResponse, error) {
	return &inference.ServerReadyResponse{Ready: true}, nil
}

func (g *grpcService) ModelReady(_ context.Context, r *inference.ModelReadyRequest) (*inference.ModelReadyResponse, error) {
	return &inference.ModelReadyResponse{Ready: r.GetName() == g.s.cfg.Model}, nil
}

func (g *grpcService) RepositoryIndex(context.Context, *inference.RepositoryIndexRequest) (*inference.RepositoryIndexResponse, error) {
	return &inference.RepositoryIndexResponse{Models: []*inference.RepositoryIndexResponse_ModelIndex{{Name: g.s.cfg.Model, Version: "1", State: "READY"}}}, nil
}

func (g *grpcService) ModelConfig(_ context.Context, r *inference.ModelConfigRequest) (*inference.ModelConfigResponse, error) {
	if r.GetName() != g.s.cfg.Model {
		return nil, status.Errorf(codes.NotFound, "Request for unknown model: '%s' is not found", r.GetName())
	}
	in := func(name string, dt inference.DataType, optional bool) *inference.ModelInput {
		return &inference.ModelInput{Name: name, DataType: dt, Dims: []int64{1}, Optional: optional}
	}
	return &inference.ModelConfigResponse{Config: &inference.ModelConfig{
		Name:    g.s.cfg.Model,
		Backend: "llmsim",
		Input: []*inference.ModelInput{
			in("text_input", inference.DataType_TYPE_STRING, false),
			in("max_tokens", inference.DataType_TYPE_INT32, true),
			in("stream", inference.DataType_TYPE_BOOL, true),
			in("ignore_eos", inference.DataType_TYPE_BOOL, true),
		},
		Output:                 []*inference.ModelOutput{{Name: "text_output", DataType: inference.DataType_TYPE_STRING, Dims: []int64{-1}}},
		ModelTransactionPolicy: &inference.ModelTransactionPolicy{Decoupled: true},
	}}, nil
}

// grpcRequest is what llmsim reads of a ModelInferRequest.
type grpcRequest struct {
	id        string
	promptLen int
	maxTokens int
	ignoreEOS bool
}

// tensorBytes returns the raw contents of input i, or its typed contents
// encoded as raw (BYTES length-prefixed, INT32 and BOOL little-endian).
func tensorBytes(r *inference.ModelInferRequest, i int) []byte {
	if raw := r.GetRawInputContents(); len(raw) > 0 {
		if i < len(raw) {
			return raw[i]
		}
		return nil
	}
	c := r.GetInputs()[i].GetContents()
	var b []byte
	for _, x := range c.GetBytesContents() {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(x)))
		b = append(b, x...)
	}
	for _, x := range c.GetIntContents() {
		b = binary.LittleEndian.AppendUint32(b, uint32(x))
	}
	for _, x := range c.GetInt64Contents() {
		b = binary.LittleEndian.AppendUint64(b, uint64(x))
	}
	for _, x := range c.GetBoolContents() {
		if x {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
	}
	return b
}

func (g *grpcService) parse(r *inference.ModelInferRequest) (grpcRequest, error) {
	cfg := &g.s.cfg
	if r.GetModelName() != cfg.Model {
		return grpcRequest{}, status.Errorf(codes.NotFound, "Request for unknown model: '%s' is not found", r.GetModelName())
	}
	q := grpcRequest{id: r.GetId(), maxTokens: 16}
	text := false
	for i, in := range r.GetInputs() {
		b := tensorBytes(r, i)
		switch in.GetName() {
		case "text_input":
			if in.GetDatatype() != "BYTES" || len(b) < 4 || int(binary.LittleEndian.Uint32(b)) != len(b)-4 {
				return q, status.Errorf(codes.InvalidArgument, "input text_input: want one BYTES element, got %s of %d bytes", in.GetDatatype(), len(b))
			}
			q.promptLen = len(strings.Fields(string(b[4:])))
			text = true
		case "max_tokens":
			switch {
			case in.GetDatatype() == "INT32" && len(b) == 4, in.GetDatatype() == "UINT32" && len(b) == 4:
				q.maxTokens = int(int32(binary.LittleEndian.Uint32(b)))
			case in.GetDatatype() == "INT64" && len(b) == 8:
				q.maxTokens = int(int64(binary.LittleEndian.Uint64(b)))
			default:
				return q, status.Errorf(codes.InvalidArgument, "input max_tokens: want one INT32 element, got %s of %d bytes", in.GetDatatype(), len(b))
			}
		case "stream", "ignore_eos":
			if in.GetDatatype() != "BOOL" || len(b) != 1 {
				return q, status.Errorf(codes.InvalidArgument, "input %s: want one BOOL element", in.GetName())
			}
			if in.GetName() == "ignore_eos" {
				q.ignoreEOS = b[0] != 0
			}
		default:
			return q, status.Errorf(codes.InvalidArgument, "unexpected inference input '%s' for model '%s'", in.GetName(), cfg.Model)
		}
	}
	if !text {
		return q, status.Errorf(codes.InvalidArgument, "expected input text_input for model '%s'", cfg.Model)
	}
	q.promptLen = max(q.promptLen, 1)
	switch {
	case q.maxTokens < 1:
		return q, status.Error(codes.InvalidArgument, "max_tokens must be at least 1")
	case q.promptLen+q.maxTokens > cfg.MaxModelLen:
		return q, status.Errorf(codes.InvalidArgument, "prompt (%d) + max_tokens (%d) exceed this model's maximum context length %d", q.promptLen, q.maxTokens, cfg.MaxModelLen)
	}
	return q, nil
}

// ModelStreamInfer serves every request sent on the stream (several may
// be in flight, told apart by their ids) and ends once the client has
// closed its side and every request has ended, or at the first request
// that ends it (an error status, or a fault that closes it).
func (g *grpcService) ModelStreamInfer(st inference.GRPCInferenceService_ModelStreamInferServer) error {
	ctx, cancel := context.WithCancel(st.Context())
	defer cancel()
	s := &grpcStream{
		g:       g,
		st:      st,
		fault:   streamFault(st.Context()),
		ended:   make(chan error, 1),
		headers: !g.s.cfg.GRPCDelayHeaders,
	}
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		s.receive(ctx)
	}()
	all := make(chan struct{})
	go func() {
		<-recvDone
		s.wg.Wait()
		close(all)
	}()
	select {
	case <-all:
		return nil
	case err := <-s.ended:
		cancel()
		s.sendMu.Lock() // no Send after the handler returns
		s.closed = true
		s.sendMu.Unlock()
		if errors.Is(err, errStreamEnd) {
			return nil
		}
		return err
	}
}

// streamFault returns the fault the stream's x-llmsim-fault metadata
// asks for, if any.
func streamFault(ctx context.Context) string {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("x-llmsim-fault"); len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// grpcStream is one ModelStreamInfer stream: the requests in flight on it
// and how it ends.
type grpcStream struct {
	g      *grpcService
	st     inference.GRPCInferenceService_ModelStreamInferServer
	fault  string // the stream's x-llmsim-fault
	sendMu sync.Mutex
	closed bool // under sendMu: the handler has returned
	wg     sync.WaitGroup
	ended  chan error // the first error (or fault) that ends the stream
	// headers: the response headers are still to be sent before the
	// next request's prefill (receive's alone).
	headers bool
}

// end ends the stream with err, unless another end came first.
func (s *grpcStream) end(err error) {
	select {
	case s.ended <- err:
	default:
	}
}

// send sends r, unless the handler has returned.
func (s *grpcStream) send(r *inference.ModelStreamInferResponse) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if s.closed {
		return errStreamEnd
	}
	return s.st.Send(r)
}

// receive starts every request the client sends until it closes its side
// or a request ends the stream.
func (s *grpcStream) receive(ctx context.Context) {
	for {
		req, err := s.st.Recv()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			s.end(err)
			return
		}
		if s.headers {
			// The headers go out now, before the prefill, as the
			// HTTP side's do; with GRPCDelayHeaders they wait for
			// the first response (gRPC-Go sends them with it).
			s.headers = false
			s.sendMu.Lock()
			if !s.closed {
				s.st.SendHeader(metadata.Pairs("x-request-id", req.GetId()))
			}
			s.sendMu.Unlock()
		}
		if err := s.start(ctx, req); err != nil {
			s.end(err)
			return
		}
	}
}

// start parses req, draws its fault and generates its responses in a
// goroutine of its own; the error is a request the stream ends at.
func (s *grpcStream) start(ctx context.Context, req *inference.ModelInferRequest) error {
	g := s.g
	q, err := g.parse(req)
	if err != nil {
		return err
	}
	f := s.fault
	if f == "" {
		f = g.s.drawFault()
	}
	if f != "" {
		g.s.m.faults.WithLabelValues(f).Inc()
	}
	if f == FaultHTTP500 {
		return status.Error(codes.Internal, "injected failure")
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := g.generate(ctx, q, f, s.send); err != nil {
			s.end(err)
		}
	}()
	return nil
}

// errStreamEnd ends a stream with status OK before its final response.
var errStreamEnd = errors.New("stream ended by a fault")

func textResponse(model, id string, text []byte, final bool) *inference.ModelStreamInferResponse {
	ir := &inference.ModelInferResponse{
		ModelName:  model,
		Id:         id,
		Parameters: map[string]*inference.InferParameter{"triton_final_response": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: final}}},
	}
	if text != nil {
		raw := binary.LittleEndian.AppendUint32(make([]byte, 0, 4+len(text)), uint32(len(text)))
		ir.Outputs = []*inference.ModelInferResponse_InferOutputTensor{{Name: "text_output", Datatype: "BYTES", Shape: []int64{1}}}
		ir.RawOutputContents = [][]byte{append(raw, text...)}
	}
	return &inference.ModelStreamInferResponse{InferResponse: ir}
}

func (g *grpcService) generate(ctx context.Context, q grpcRequest, fault string, send func(*inference.ModelStreamInferResponse) error) error {
	s := g.s
	sq := &seq{
		id:        q.id,
		promptLen: q.promptLen,
		maxTokens: q.maxTokens,
		ignoreEOS: q.ignoreEOS,
		out:       make(chan token, q.maxTokens+1),
		arrival:   time.Now(),
	}
	defer s.eng.cancel(sq)
	s.eng.submit(sq)
	var first, last time.Time
	n := 0
	var text []byte
	for {
		var t token
		select {
		case t = <-sq.out:
		case <-ctx.Done():
			return nil
		}
		if t.finish == finishOOM {
			return status.Error(codes.ResourceExhausted, oomMessage)
		}
		n++
		s.observeToken(t, sq, &first, &last)
		text = append(append(text[:0], ' '), words[t.index%len(words)]...)
		if err := send(textResponse(s.cfg.Model, q.id, text, t.finish != "")); err != nil {
			return nil // the client went away
		}
		if t.finish != "" {
			s.m.success.WithLabelValues(t.finish).Inc()
			s.m.e2e.Observe(last.Sub(sq.arrival).Seconds())
			if n > 1 {
				s.m.tpot.Observe(last.Sub(first).Seconds() / float64(n-1))
			}
			return nil
		}
		if ca := s.cfg.GRPCCloseAfter; ca > 0 && n >= ca {
			return errStreamEnd
		}
		switch fault {
		case FaultCut:
			return errStreamEnd
		case FaultStall:
			<-ctx.Done()
			return nil
		case FaultError:
			send(&inference.ModelStreamInferResponse{ErrorMessage: "injected error in stream"})
			return errStreamEnd
		case FaultMalformed:
			r := textResponse(s.cfg.Model, q.id, nil, false)
			r.InferResponse.Outputs = []*inference.ModelInferResponse_InferOutputTensor{{Name: "text_output", Datatype: "INT32", Shape: []int64{1}}}
			r.InferResponse.RawOutputContents = [][]byte{binary.LittleEndian.AppendUint32(nil, uint32(n))}
			send(r)
			fault = ""
		}
	}
}
