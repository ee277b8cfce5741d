package kserve

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/bpfbench/bpfbench/loadgen/kserve/inference"
)

// Fuzz targets of the gRPC load path's outside input: the server's
// streamed responses and its model config. `make fuzz` runs each for a
// bounded time; `make test` runs their seeds.

// response builds a streamed response as Triton sends it: the text in raw
// output contents (or as bytes contents), the final flag, and outputs
// besides text_output before it.
func response(text []byte, final, raw bool, others int) *inference.ModelStreamInferResponse {
	ir := &inference.ModelInferResponse{ModelName: "m", Id: "1",
		Parameters: map[string]*inference.InferParameter{ParamFinal: {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: final}}}}
	for i := 0; i < others; i++ {
		ir.Outputs = append(ir.Outputs, &inference.ModelInferResponse_InferOutputTensor{Name: "tokens", Datatype: "INT32", Shape: []int64{1}})
		if raw {
			ir.RawOutputContents = append(ir.RawOutputContents, binary.LittleEndian.AppendUint32(nil, 7))
		}
	}
	out := &inference.ModelInferResponse_InferOutputTensor{Name: OutputText, Datatype: "BYTES", Shape: []int64{1}}
	if raw {
		ir.RawOutputContents = append(ir.RawOutputContents, append(binary.LittleEndian.AppendUint32(nil, uint32(len(text))), text...))
	} else {
		out.Contents = &inference.InferTensorContents{BytesContents: [][]byte{text}}
	}
	ir.Outputs = append(ir.Outputs, out)
	return &inference.ModelStreamInferResponse{InferResponse: ir}
}

func frame(t testing.TB, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzStreamResponse: any frame the server streams decodes to a response
// whose text is read or refused with a *MalformedError, never a panic; a
// response encoded again reads the same; and a response built as Triton
// builds it (the fuzzed text, raw or not, final or not) reads back its
// text.
func FuzzStreamResponse(f *testing.F) {
	f.Add(frame(f, response([]byte(" hello"), false, true, 0)), []byte(" hello"), false, true, uint8(0))
	f.Add(frame(f, response([]byte("x"), true, false, 2)), []byte("x"), true, false, uint8(2))
	f.Add(frame(f, &inference.ModelStreamInferResponse{ErrorMessage: "model is not ready"}), []byte{}, true, true, uint8(1))
	f.Add(frame(f, &inference.ModelStreamInferResponse{InferResponse: &inference.ModelInferResponse{
		Parameters: map[string]*inference.InferParameter{ParamFinal: {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}}}}}), []byte(nil), false, false, uint8(0))
	f.Add(frame(f, &inference.ModelStreamInferResponse{InferResponse: &inference.ModelInferResponse{
		Outputs:           []*inference.ModelInferResponse_InferOutputTensor{{Name: OutputText, Datatype: "BYTES"}},
		RawOutputContents: [][]byte{{9, 0, 0, 0, 'a'}}}}), []byte("\x00\x01"), false, true, uint8(3))
	f.Fuzz(func(t *testing.T, wire, text []byte, final, raw bool, others uint8) {
		var r inference.ModelStreamInferResponse
		if proto.Unmarshal(wire, &r) == nil {
			got, has, fin, msg, err := Text(&r)
			var me *MalformedError
			if err != nil && !errors.As(err, &me) {
				t.Fatalf("error %v is not a *MalformedError", err)
			}
			if err == nil && msg == "" && !has && !fin {
				t.Fatal("a response with neither text, end nor error")
			}
			var again inference.ModelStreamInferResponse
			if err := proto.Unmarshal(frame(t, &r), &again); err != nil {
				t.Fatalf("a decoded response encoded again does not decode: %v", err)
			}
			got2, has2, fin2, msg2, err2 := Text(&again)
			if !bytes.Equal(got, got2) || has != has2 || fin != fin2 || msg != msg2 || (err == nil) != (err2 == nil) {
				t.Fatalf("re-encoded response reads differently: %q %v %v %q %v, then %q %v %v %q %v", got, has, fin, msg, err, got2, has2, fin2, msg2, err2)
			}
		}
		var built inference.ModelStreamInferResponse
		if err := proto.Unmarshal(frame(t, response(text, final, raw, int(others%4))), &built); err != nil {
			t.Fatal(err)
		}
		got, has, fin, msg, err := Text(&built)
		if err != nil || !has || fin != final || msg != "" || !bytes.Equal(got, text) {
			t.Fatalf("text %q (raw %v, final %v, %d other outputs) read as %q has=%v final=%v msg=%q err=%v", text, raw, final, others%4, got, has, fin, msg, err)
		}
	})
}

// FuzzModelConfig: any model config the server answers shapes the
// requests without a panic, and every request built from it carries one
// raw content per input, its prompt first.
func FuzzModelConfig(f *testing.F) {
	f.Add(frame(f, &inference.ModelConfig{Name: "vllm_model", Input: []*inference.ModelInput{
		{Name: InputText, DataType: inference.DataType_TYPE_STRING, Dims: []int64{1}},
		{Name: InputStream, DataType: inference.DataType_TYPE_BOOL, Dims: []int64{1}},
		{Name: InputSampling, DataType: inference.DataType_TYPE_STRING, Dims: []int64{1}, Optional: true},
		{Name: InputExcludeInput, DataType: inference.DataType_TYPE_BOOL, Dims: []int64{1}, Optional: true},
	}}), "a prompt", int32(16), true)
	f.Add(frame(f, &inference.ModelConfig{Name: "ensemble", MaxBatchSize: 8, Input: []*inference.ModelInput{
		{Name: InputText, DataType: inference.DataType_TYPE_STRING, Dims: []int64{-1}},
		{Name: InputMaxTokens, DataType: inference.DataType_TYPE_INT64, Dims: []int64{1}},
		{Name: InputIgnoreEOS, DataType: inference.DataType_TYPE_BOOL, Dims: []int64{1}},
	}}), "", int32(-1), true)
	f.Add([]byte{}, "x", int32(0), false)
	f.Fuzz(func(t *testing.T, wire []byte, prompt string, maxTokens int32, ignoreEOS bool) {
		var cfg inference.ModelConfig
		if proto.Unmarshal(wire, &cfg) != nil {
			return
		}
		c := &Client{model: cfg.GetName(), form: formOf(&cfg)}
		switch c.form.maxTokensDT {
		case "INT32", "INT64", "UINT32":
		default:
			t.Fatalf("max_tokens datatype %q", c.form.maxTokensDT)
		}
		req := c.build(&Request{ID: "1", Prompt: prompt, MaxTokens: int(maxTokens), IgnoreEOS: ignoreEOS})
		if len(req.Inputs) == 0 || len(req.Inputs) != len(req.RawInputContents) {
			t.Fatalf("%d inputs, %d raw contents", len(req.Inputs), len(req.RawInputContents))
		}
		if req.Inputs[0].Name != InputText || !bytes.Equal(req.RawInputContents[0], bytesTensor(prompt)) {
			t.Fatalf("first input %s", req.Inputs[0].Name)
		}
		var again inference.ModelInferRequest
		if err := proto.Unmarshal(frame(t, req), &again); err != nil || !proto.Equal(req, &again) {
			t.Fatalf("the request does not survive its encoding: %v", err)
		}
	})
}
