package transport

import (
	"errors"
	"strconv"
)

// ChunkInfo is what the client needs from one streamed JSON chunk of an
// OpenAI-compatible server. ParseChunk fills it without allocating.
type ChunkInfo struct {
	// Choices is the number of elements of "choices"; a chunk with choices
	// carries output (vLLM's client counts it as a token arrival even when
	// its text is empty).
	Choices int
	// TextBytes is the length of the first choice's "text" (completions) or
	// "delta.content" (chat), in JSON-escaped bytes.
	TextBytes int
	// Finished is set when the first choice has a non-null finish_reason.
	Finished bool
	// OutputKey is set when the first choice has a field that carries
	// output: "text", or a "delta" (or "message") field other than "role"
	// (content, reasoning_content, tool_calls, ...). OpenAI's and
	// llama.cpp's last chat chunk has none: "delta": {} with a finish_reason.
	OutputKey bool
	// HasUsage is set when the chunk carries a non-null "usage" object.
	HasUsage         bool
	PromptTokens     int
	CompletionTokens int
	// Error is set for an error object in the stream ({"error": ...} or
	// {"object": "error", ...}); ErrorMessage is its raw message, if any,
	// and points into the chunk.
	Error        bool
	ErrorMessage []byte
}

// ErrMalformedChunk is returned by ParseChunk for data that is not a JSON object.
var ErrMalformedChunk = errors.New("malformed JSON chunk")

type jscan struct {
	b []byte
	i int
	// The output strings textLen read: how many, and the bounds of the
	// last one's token, quotes included (at is -1 when it was no string).
	texts, at, atEnd int
}

// ParseChunk inspects one "data:" payload.
func ParseChunk(data []byte, ci *ChunkInfo) error {
	s := jscan{b: data}
	return s.chunk(ci)
}

// chunkShape reads the chunks of one stream. They usually differ from the
// one before only inside the output string (the first choice's "text" or
// "delta.content"): id, object, created, model and the rest repeat. parse
// keeps the last chunk ParseChunk read that had exactly one output string,
// and reads a chunk made of the same bytes before that string, another
// string token, and the same bytes after it, by comparing those bytes: its
// ChunkInfo is the kept one's with the new string's length. ParseChunk
// would read the same: it scans left to right without looking past the
// token at hand, so the same bytes before the string bring it to the same
// state, a string token leaves it there (only TextBytes counts the
// string), and the same bytes after it lead to the same end.
type chunkShape struct {
	b       []byte // the kept chunk (a copy)
	at, end int    // its output string's token, quotes included
	ci      ChunkInfo
	ok      bool
}

func (p *chunkShape) reset() { p.ok = false }

// parse is ParseChunk(data, ci), through the kept shape when data has it.
func (p *chunkShape) parse(data []byte, ci *ChunkInfo) error {
	if p.ok && len(data) > p.at+len(p.b)-p.end && string(data[:p.at]) == string(p.b[:p.at]) {
		s := jscan{b: data, i: p.at}
		if v, ok := s.str(); ok && len(data)-s.i == len(p.b)-p.end && string(data[s.i:]) == string(p.b[p.end:]) {
			*ci = p.ci
			ci.TextBytes = len(v)
			return nil
		}
	}
	s := jscan{b: data}
	err := s.chunk(ci)
	// (An error chunk's message points into data: not kept.)
	if p.ok = err == nil && s.texts == 1 && s.at >= 0 && !ci.Error; p.ok {
		p.b = append(p.b[:0], data...)
		p.at, p.end, p.ci = s.at, s.atEnd, *ci
	}
	return err
}

func (s *jscan) chunk(ci *ChunkInfo) error {
	*ci = ChunkInfo{}
	s.ws()
	if !s.eat('{') {
		return ErrMalformedChunk
	}
	s.ws()
	if s.eat('}') {
		return s.end()
	}
	for {
		s.ws()
		key, ok := s.str()
		if !ok {
			return ErrMalformedChunk
		}
		s.ws()
		if !s.eat(':') {
			return ErrMalformedChunk
		}
		s.ws()
		switch string(key) {
		case "choices":
			ok = s.choices(ci)
		case "usage":
			ok = s.usage(ci)
		case "error":
			if s.peek() == 'n' {
				ok = s.value()
				break
			}
			ci.Error = true
			if s.peek() == '{' {
				ok = s.errorObject(ci)
			} else if s.peek() == '"' {
				ci.ErrorMessage, ok = s.str()
			} else {
				ok = s.value()
			}
		case "object":
			if s.peek() == '"' {
				var v []byte
				v, ok = s.str()
				if string(v) == "error" {
					ci.Error = true
				}
			} else {
				ok = s.value()
			}
		case "message":
			if s.peek() == '"' {
				ci.ErrorMessage, ok = s.str()
			} else {
				ok = s.value()
			}
		default:
			ok = s.value()
		}
		if !ok {
			return ErrMalformedChunk
		}
		s.ws()
		if s.eat(',') {
			continue
		}
		if s.eat('}') {
			break
		}
		return ErrMalformedChunk
	}
	if !ci.Error {
		ci.ErrorMessage = nil
	}
	return s.end()
}

func (s *jscan) end() error {
	s.ws()
	if s.i != len(s.b) {
		return ErrMalformedChunk
	}
	return nil
}

func (s *jscan) choices(ci *ChunkInfo) bool {
	if s.peek() == 'n' {
		return s.lit("null")
	}
	if !s.eat('[') {
		return false
	}
	s.ws()
	if s.eat(']') {
		return true
	}
	for {
		s.ws()
		if ci.Choices == 0 && s.peek() == '{' {
			if !s.choice(ci) {
				return false
			}
		} else if !s.value() {
			return false
		}
		ci.Choices++
		s.ws()
		if s.eat(',') {
			continue
		}
		return s.eat(']')
	}
}

// choice reads the first element of "choices".
func (s *jscan) choice(ci *ChunkInfo) bool {
	return s.object(func(key []byte) bool {
		switch string(key) {
		case "text":
			ci.OutputKey = true
			return s.textLen(ci)
		case "delta", "message":
			if s.peek() != '{' {
				return s.value()
			}
			return s.object(func(k []byte) bool {
				switch string(k) {
				case "content":
					ci.OutputKey = true
					return s.textLen(ci)
				case "role":
				default:
					ci.OutputKey = true
				}
				return s.value()
			})
		case "finish_reason":
			if s.peek() == 'n' {
				return s.lit("null")
			}
			ci.Finished = true
			return s.value()
		}
		return s.value()
	})
}

func (s *jscan) textLen(ci *ChunkInfo) bool {
	s.texts++
	if s.peek() == '"' {
		s.at = s.i
		v, ok := s.str()
		s.atEnd = s.i
		ci.TextBytes += len(v)
		return ok
	}
	s.at = -1
	return s.value()
}

func (s *jscan) usage(ci *ChunkInfo) bool {
	if s.peek() == 'n' {
		return s.lit("null")
	}
	if s.peek() != '{' {
		return false
	}
	ci.HasUsage = true
	return s.object(func(key []byte) bool {
		switch string(key) {
		case "prompt_tokens":
			n, ok := s.int()
			ci.PromptTokens = n
			return ok
		case "completion_tokens":
			n, ok := s.int()
			ci.CompletionTokens = n
			return ok
		}
		return s.value()
	})
}

func (s *jscan) errorObject(ci *ChunkInfo) bool {
	return s.object(func(key []byte) bool {
		if string(key) == "message" && s.peek() == '"' {
			var ok bool
			ci.ErrorMessage, ok = s.str()
			return ok
		}
		return s.value()
	})
}

// object reads an object, calling fn with the scanner positioned at each value.
func (s *jscan) object(fn func(key []byte) bool) bool {
	if !s.eat('{') {
		return false
	}
	s.ws()
	if s.eat('}') {
		return true
	}
	for {
		s.ws()
		key, ok := s.str()
		if !ok {
			return false
		}
		s.ws()
		if !s.eat(':') {
			return false
		}
		s.ws()
		if !fn(key) {
			return false
		}
		s.ws()
		if s.eat(',') {
			continue
		}
		return s.eat('}')
	}
}

func (s *jscan) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *jscan) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *jscan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *jscan) lit(l string) bool {
	if len(s.b)-s.i >= len(l) && string(s.b[s.i:s.i+len(l)]) == l {
		s.i += len(l)
		return true
	}
	return false
}

// strPlain marks the bytes that stand for themselves inside a JSON string
// (not '"', not '\\', not a control character).
var strPlain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str reads a string and returns its raw (still escaped) contents.
func (s *jscan) str() ([]byte, bool) {
	if !s.eat('"') {
		return nil, false
	}
	b := s.b
	start := s.i
	i := s.i
	for {
		for i < len(b) && strPlain[b[i]] {
			i++
		}
		if i >= len(b) {
			s.i = i
			return nil, false
		}
		switch b[i] {
		case '"':
			s.i = i + 1
			return b[start:i], true
		case '\\':
			i++
			if i >= len(b) {
				s.i = i
				return nil, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if len(b)-i < 5 {
					return nil, false
				}
				for _, h := range b[i+1 : i+5] {
					if !isHex(h) {
						return nil, false
					}
				}
				i += 5
			default:
				return nil, false
			}
		default: // a control character
			s.i = i
			return nil, false
		}
	}
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// number reads a JSON number and returns its text.
func (s *jscan) number() ([]byte, bool) {
	start := s.i
	s.eat('-')
	digits := func() int {
		n := 0
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	if s.peek() == '0' {
		s.i++
	} else if digits() == 0 {
		return nil, false
	}
	if s.eat('.') && digits() == 0 {
		return nil, false
	}
	if c := s.peek(); c == 'e' || c == 'E' {
		s.i++
		if c := s.peek(); c == '+' || c == '-' {
			s.i++
		}
		if digits() == 0 {
			return nil, false
		}
	}
	return s.b[start:s.i], true
}

func (s *jscan) int() (int, bool) {
	if s.peek() == 'n' {
		return 0, s.lit("null")
	}
	v, ok := s.number()
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(string(v))
	if err != nil {
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil {
			return 0, false
		}
		return int(f), true
	}
	return n, true
}

// value skips any JSON value, validating it.
func (s *jscan) value() bool {
	return s.valueDepth(0)
}

func (s *jscan) valueDepth(depth int) bool {
	if depth > 64 {
		return false
	}
	switch c := s.peek(); {
	case c == '"':
		_, ok := s.str()
		return ok
	case c == '{':
		s.i++
		s.ws()
		if s.eat('}') {
			return true
		}
		for {
			s.ws()
			if _, ok := s.str(); !ok {
				return false
			}
			s.ws()
			if !s.eat(':') {
				return false
			}
			s.ws()
			if !s.valueDepth(depth + 1) {
				return false
			}
			s.ws()
			if s.eat(',') {
				continue
			}
			return s.eat('}')
		}
	case c == '[':
		s.i++
		s.ws()
		if s.eat(']') {
			return true
		}
		for {
			s.ws()
			if !s.valueDepth(depth + 1) {
				return false
			}
			s.ws()
			if s.eat(',') {
				continue
			}
			return s.eat(']')
		}
	case c == 't':
		return s.lit("true")
	case c == 'f':
		return s.lit("false")
	case c == 'n':
		return s.lit("null")
	case c == '-' || c >= '0' && c <= '9':
		_, ok := s.number()
		return ok
	}
	return false
}
