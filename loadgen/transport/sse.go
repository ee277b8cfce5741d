package transport

import "bytes"

// SSEEvent is one server-sent event. Its slices point into the parser's
// buffers and stay valid only until the next call to Feed, Next or Flush.
type SSEEvent struct {
	// Type is the "event:" field, empty for the default "message" type.
	Type []byte
	// Data is the concatenation of the event's "data:" lines, joined by '\n'.
	Data []byte
}

// SSEParser is an incremental parser of a text/event-stream body
// (https://html.spec.whatwg.org/multipage/server-sent-events.html).
// Bytes are pushed with Feed as they arrive from the socket, in pieces of any
// size; complete events are pulled with Next. Events split across reads and
// several events in one read are both handled; comments (lines starting with
// ':') and the "id:" and "retry:" fields are skipped. After warm-up the parser
// allocates nothing: its buffers are reused from event to event.
type SSEParser struct {
	buf   []byte // bytes fed and not yet consumed, from buf[off:]
	off   int
	data  []byte // data lines of the event being assembled
	typ   []byte // event type of the event being assembled
	has   bool   // the event being assembled has at least one data line
	delim bool   // a '\r' ended the last line; a following '\n' belongs to it
	// Comments counts comment lines seen (SSE keep-alive pings).
	Comments int
}

// Reset empties the parser, keeping its buffers.
func (p *SSEParser) Reset() {
	p.buf = p.buf[:0]
	p.off = 0
	p.data = p.data[:0]
	p.typ = p.typ[:0]
	p.has = false
	p.delim = false
	p.Comments = 0
}

// idle reports whether the parser holds nothing: no bytes of an unfinished
// line, no fields of an unfinished event.
func (p *SSEParser) idle() bool {
	return p.off == len(p.buf) && !p.has && !p.delim && len(p.typ) == 0
}

// Feed appends bytes read from the stream.
func (p *SSEParser) Feed(b []byte) {
	if p.off > 0 && p.off == len(p.buf) {
		p.buf = p.buf[:0]
		p.off = 0
	} else if p.off > 0 && len(p.buf)+len(b) > cap(p.buf) {
		n := copy(p.buf, p.buf[p.off:])
		p.buf = p.buf[:n]
		p.off = 0
	}
	p.buf = append(p.buf, b...)
}

// Next returns the next complete event, or false when more bytes are needed.
// Events without data lines are not dispatched, as the specification says.
func (p *SSEParser) Next() (SSEEvent, bool) {
	for {
		line, ok := p.line()
		if !ok {
			return SSEEvent{}, false
		}
		if ev, done := p.field(line); done {
			return ev, true
		}
	}
}

// Flush is called at the end of the stream. It returns the event whose last
// line ended but whose blank terminating line never came (some servers omit
// it on the last event), and whether bytes of an unterminated line remain,
// which means the stream was cut in the middle of a line.
func (p *SSEParser) Flush() (ev SSEEvent, ok bool, partial bool) {
	partial = p.off < len(p.buf)
	p.buf = p.buf[:0]
	p.off = 0
	p.delim = false
	if p.has {
		ev = SSEEvent{Type: p.typ, Data: p.data}
		p.has = false
		return ev, true, partial
	}
	return SSEEvent{}, false, partial
}

// line returns the next complete line without its terminator.
func (p *SSEParser) line() ([]byte, bool) {
	rest := p.buf[p.off:]
	if p.delim {
		if len(rest) == 0 {
			return nil, false
		}
		p.delim = false
		if rest[0] == '\n' {
			p.off++
			rest = rest[1:]
		}
	}
	i := bytes.IndexAny(rest, "\r\n")
	if i < 0 {
		return nil, false
	}
	line := rest[:i]
	if rest[i] == '\r' {
		if i+1 < len(rest) {
			if rest[i+1] == '\n' {
				i++
			}
		} else {
			p.delim = true
		}
	}
	p.off += i + 1
	return line, true
}

// field processes one line; it returns an event when the line was blank and
// the event had data.
func (p *SSEParser) field(line []byte) (SSEEvent, bool) {
	if len(line) == 0 {
		if !p.has {
			p.typ = p.typ[:0]
			return SSEEvent{}, false
		}
		ev := SSEEvent{Type: p.typ, Data: p.data}
		// The slices stay valid until the next call: clear lazily.
		p.has = false
		p.data = p.data[:0]
		p.typ = p.typ[:0]
		return ev, true
	}
	if line[0] == ':' {
		p.Comments++
		return SSEEvent{}, false
	}
	name, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		name, value = line[:i], line[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(name) {
	case "data":
		if p.has {
			p.data = append(p.data, '\n')
		}
		p.data = append(p.data, value...)
		p.has = true
	case "event":
		p.typ = append(p.typ[:0], value...)
	}
	return SSEEvent{}, false
}
