package transport

import "testing"

func TestParseChunk(t *testing.T) {
	tests := []struct {
		in   string
		want ChunkInfo
		err  bool
	}{
		{in: `{"id":"x","choices":[{"index":0,"text":" the","logprobs":null,"finish_reason":null}]}`, want: ChunkInfo{Choices: 1, TextBytes: 4}},
		{in: `{"choices":[{"delta":{"role":"assistant","content":"hi \"x\""},"finish_reason":"stop"}]}`, want: ChunkInfo{Choices: 1, TextBytes: 8, Finished: true}},
		{in: `{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":34,"total_tokens":46}}`, want: ChunkInfo{HasUsage: true, PromptTokens: 12, CompletionTokens: 34}},
		{in: `{"choices":[{"text":"a"}],"usage":{"prompt_tokens":1,"completion_tokens":2}}`, want: ChunkInfo{Choices: 1, TextBytes: 1, HasUsage: true, PromptTokens: 1, CompletionTokens: 2}},
		{in: `{"choices":[{"text":"a"}],"usage":null}`, want: ChunkInfo{Choices: 1, TextBytes: 1}},
		{in: ` { "choices" : [ { "text" : "" } , {"text":"b"} ] } `, want: ChunkInfo{Choices: 2}},
		{in: `{"error":{"message":"overloaded","code":503}}`, want: ChunkInfo{Error: true, ErrorMessage: []byte("overloaded")}},
		{in: `{"object":"error","message":"bad","code":400}`, want: ChunkInfo{Error: true, ErrorMessage: []byte("bad")}},
		{in: `{"error":null,"choices":[{"text":"x"}]}`, want: ChunkInfo{Choices: 1, TextBytes: 1}},
		{in: `{"message":"not an error","choices":[{"text":"x"}]}`, want: ChunkInfo{Choices: 1, TextBytes: 1}},
		{in: `{"nested":{"a":[1,2.5e3,-0.1,true,false,null,"\u00e9"]},"choices":[{"text":"x"}]}`, want: ChunkInfo{Choices: 1, TextBytes: 1}},
		{in: `{"choices":[{"index":0,"text": broken`, err: true},
		{in: `{"choices":[{"text":"x"}]`, err: true},
		{in: `{"choices":[{"text":"x"}]} trailing`, err: true},
		{in: `[1]`, err: true},
		{in: ``, err: true},
		{in: `{"a":01}`, err: true},
		{in: `{"a":"\x"}`, err: true},
		{in: "{\"a\":\"\x01\"}", err: true},
	}
	for _, tc := range tests {
		var ci ChunkInfo
		err := ParseChunk([]byte(tc.in), &ci)
		if (err != nil) != tc.err {
			t.Errorf("%s: err %v, want error %v", tc.in, err, tc.err)
			continue
		}
		if tc.err {
			continue
		}
		if ci.Choices != tc.want.Choices || ci.TextBytes != tc.want.TextBytes || ci.Finished != tc.want.Finished ||
			ci.HasUsage != tc.want.HasUsage || ci.PromptTokens != tc.want.PromptTokens || ci.CompletionTokens != tc.want.CompletionTokens ||
			ci.Error != tc.want.Error || string(ci.ErrorMessage) != string(tc.want.ErrorMessage) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.in, ci, tc.want)
		}
	}
}

func TestParseChunkNoAlloc(t *testing.T) {
	b := []byte(`{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"x"},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":3,"completion_tokens":4}}`)
	var ci ChunkInfo
	if a := testing.AllocsPerRun(1000, func() { ParseChunk(b, &ci) }); a != 0 {
		t.Errorf("%v allocations per chunk, want 0", a)
	}
}
