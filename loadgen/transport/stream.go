package transport

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/bpfbench/bpfbench/result"
)

// ServerTimings is llama.cpp's "timings" object, which the last chunk of a
// llama-server stream carries (tools/server/server-task.cpp,
// result_timings::to_json): the prompt's processing and the generation as
// the engine timed them. PromptMs runs from the slot's start on the prompt
// to its first token, PredictedMs from the first token to the last, so it
// covers PredictedN-1 steps and PredictedPerTokenMs is PredictedMs over
// them (result.Timings, the type on the wire).
type ServerTimings = result.Timings

// streamState turns the body of one streaming response into a Record: SSE
// events are cut from the bytes fed, each "data:" payload is scanned
// (ParseChunk, no general JSON decoder) and every chunk carrying output is
// timestamped with the arrival time of the read that delivered it. Both
// transports (the raw HTTP/1.1 one and net/http) feed it.
type streamState struct {
	rec   *Record
	chat  bool
	p     SSEParser
	ci    ChunkInfo
	shape chunkShape // reads the chunks (ParseChunk, faster on the common shape)

	done, finished bool // [DONE] seen; a finish_reason seen
	meta           bool // the response's id and model were looked for
	failed         bool // a chunk failed the request (rec.Failure set)
	lastCum        int  // cumulative completion_tokens of per-chunk usage
	deltaOK        bool // every output chunk carried usage
	sawDeltaUsage  bool
	finalUsage     int
	hasFinalUsage  bool
}

func (s *streamState) reset(rec *Record, chat bool) {
	s.p.Reset()
	s.shape.reset()
	s.rec, s.chat = rec, chat
	s.done, s.finished, s.failed, s.meta = false, false, false, false
	s.lastCum, s.deltaOK, s.sawDeltaUsage = 0, true, false
	s.finalUsage, s.hasFinalUsage = 0, false
}

// stopped reports whether the stream needs no more bytes: [DONE] came or a
// chunk failed the request.
func (s *streamState) stopped() bool { return s.done || s.failed }

// feed processes bytes that arrived at now; it returns false once the
// stream is stopped.
func (s *streamState) feed(b []byte, now int64) bool {
	if s.stopped() {
		return false
	}
	if s.p.idle() {
		if b = s.fast(b, now); len(b) == 0 || s.stopped() {
			return !s.stopped()
		}
	}
	s.p.Feed(b)
	for {
		ev, ok := s.p.Next()
		if !ok {
			return true
		}
		s.handle(ev.Data, now)
		if s.stopped() {
			return false
		}
	}
}

// fast handles the events at the start of b that are whole and of the
// common shape, one "data:" line and a blank line, in place (no copy into
// the parser); it returns the bytes left for the general parser, from the
// first event of another shape or cut by the end of b.
func (s *streamState) fast(b []byte, now int64) []byte {
	for len(b) >= 6 && string(b[:5]) == "data:" {
		i := bytes.IndexByte(b, '\n')
		if i < 0 || i+1 >= len(b) {
			return b
		}
		j := i + 1
		if b[j] == '\r' {
			if j++; j >= len(b) || b[j] != '\n' {
				return b
			}
		} else if b[j] != '\n' {
			return b
		}
		line := b[5:i]
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		if bytes.IndexByte(line, '\r') >= 0 {
			return b // a lone CR ends a line: the general parser's case
		}
		if len(line) > 0 && line[0] == ' ' {
			line = line[1:]
		}
		s.handle(line, now)
		b = b[j+1:]
		if s.stopped() {
			return b
		}
	}
	return b
}

// eof is called when the body ends: a last event without its blank line is
// accepted if complete.
func (s *streamState) eof(now int64) {
	if ev, ok, partial := s.p.Flush(); ok && !partial && !s.stopped() {
		s.handle(ev.Data, now)
	}
}

// isEndWithoutToken reports whether the chunk just parsed is a last chunk that
// carries no token, only the end of the stream: choices with a
// finish_reason and empty text, and either the final usage (llama.cpp's
// completions: "text": "" and a usage object) or no output field at all
// (OpenAI's and llama.cpp's chat: "delta": {}), unless per-chunk usage
// says it added a token. vLLM's client would count it as one more token
// arrival (96 tokens counted 97, with one more ITL gap); here it is not a
// token, and its usage, if any, is the final usage.
func (s *streamState) isEndWithoutToken() bool {
	ci := &s.ci
	if !ci.Finished || ci.TextBytes != 0 || !(ci.HasUsage || !ci.OutputKey) {
		return false
	}
	return !(s.sawDeltaUsage && ci.HasUsage && ci.CompletionTokens > s.lastCum)
}

func (s *streamState) handle(data []byte, now int64) {
	if len(data) == 6 && string(data) == "[DONE]" {
		s.done = true
		return
	}
	rec := s.rec
	if err := s.shape.parse(data, &s.ci); err != nil {
		fail(rec, FailMalformed, fmt.Sprintf("%v: %.200q", err, data))
		s.failed = true
		return
	}
	ci := &s.ci
	if ci.Error {
		fail(rec, FailStreamError, "error in stream: "+string(ci.ErrorMessage))
		s.failed = true
		return
	}
	if !s.meta || ci.Finished || ci.Choices != 1 {
		// Twice a request (its first chunk, its last), not per token
		// unless it asked for several choices (ParseChunk reads only the
		// first): the response's id and model, the finish reasons, the
		// engine's timings (on the last chunk, or a usage-only one).
		scanMeta(data, rec, !s.meta)
		s.meta = true
	}
	switch {
	case ci.Choices > 0 && !s.isEndWithoutToken():
		rec.ChunkNs = append(rec.ChunkNs, now)
		rec.LastNs = now
		rec.TextBytes += ci.TextBytes
		if rec.FirstToken == nil && len(rec.ChunkNs) <= 2 {
			scanFirstTokenLogprobs(data, rec) // --logprobs: the first token's top-K (logprobs.go)
		}
		if ci.Finished {
			s.finished = true
		}
		if ci.HasUsage {
			s.sawDeltaUsage = true
			rec.ChunkTokens = append(rec.ChunkTokens, int32(ci.CompletionTokens-s.lastCum))
			s.lastCum = ci.CompletionTokens
		} else {
			s.deltaOK = false
		}
	case ci.HasUsage || ci.Finished:
		// The end of the stream without a token: a usage-only chunk
		// (choices: []), or a last chunk with a finish_reason and no text.
		if ci.Finished {
			s.finished = true
		}
		if ci.HasUsage {
			s.finalUsage = ci.CompletionTokens
			s.hasFinalUsage = true
			rec.UsagePromptTokens = ci.PromptTokens
		}
	}
	if s.chat && (ci.Choices > 0 || ci.HasUsage) {
		// vLLM's chat client moves its most recent timestamp on every
		// data chunk.
		rec.LastNs = now
	}
}

// complete sets the outcome of a stream that ended without a transport
// error (after eof or [DONE]).
func (s *streamState) complete() {
	rec := s.rec
	if rec.Failure != "" {
		return
	}
	switch {
	case !s.done && !s.finished:
		fail(rec, FailCut, "stream ended before [DONE]")
		return
	case len(rec.ChunkNs) == 0:
		fail(rec, FailNoTokens, "never received a chunk with output")
		return
	}
	switch {
	case s.hasFinalUsage && s.finalUsage > 0:
		rec.OutputTokens = s.finalUsage
		rec.TokenSource = TokensFromUsage
	case s.sawDeltaUsage && s.deltaOK && s.lastCum > 0:
		rec.OutputTokens = s.lastCum
		rec.TokenSource = TokensFromDelta
	default:
		rec.OutputTokens = len(rec.ChunkNs)
		rec.TokenSource = TokensFromChunks
	}
	if !(s.sawDeltaUsage && s.deltaOK) {
		rec.ChunkTokens = nil
	}
	rec.Success = true
}

// scanMeta reads, from a chunk ParseChunk accepted, the top-level "id" and
// "model" (when ids is set) into rec.ResponseID and rec.ResponseModel,
// every choice's non-null "finish_reason" into rec.FinishReasons, and a
// "timings" object into rec.ServerTimings.
func scanMeta(data []byte, rec *Record, ids bool) {
	s := jscan{b: data}
	s.ws()
	s.object(func(key []byte) bool {
		switch string(key) {
		case "timings":
			if s.peek() != '{' {
				return s.value()
			}
			start := s.i
			if !s.value() {
				return false
			}
			var t ServerTimings
			if json.Unmarshal(s.b[start:s.i], &t) == nil {
				rec.ServerTimings = &t
			}
			return true
		case "id", "model":
			if !ids || s.peek() != '"' {
				return s.value()
			}
			v, ok := s.str()
			if string(key) == "id" {
				rec.ResponseID = jsonText(v)
			} else {
				rec.ResponseModel = jsonText(v)
			}
			return ok
		case "choices":
			if !s.eat('[') {
				return s.value()
			}
			s.ws()
			if s.eat(']') {
				return true
			}
			for {
				s.ws()
				var ok bool
				if s.peek() != '{' {
					ok = s.value()
				} else {
					ok = s.object(func(k []byte) bool {
						if string(k) != "finish_reason" || s.peek() != '"' {
							return s.value()
						}
						v, ok := s.str()
						rec.FinishReasons = append(rec.FinishReasons, jsonText(v))
						return ok
					})
				}
				s.ws()
				if !ok || !s.eat(',') {
					return ok && s.eat(']')
				}
			}
		}
		return s.value()
	})
}

// jsonText is the text of a JSON string's raw contents.
func jsonText(raw []byte) string {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw)
	}
	var v string
	if json.Unmarshal(append(append([]byte{'"'}, raw...), '"'), &v) != nil {
		return string(raw)
	}
	return v
}
