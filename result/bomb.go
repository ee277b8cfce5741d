package result

import (
	"bytes"
	"fmt"
	"io"
)

// Limits on what a gzip'd input may expand to: a file crafted to inflate
// a thousandfold (a "gzip bomb") is refused with an error instead of
// taking the machine's memory.
const (
	// maxGapLine bounds one line of a gaps file: a gap's line is at most
	// a few KiB (live.MaxSteps steps), and the reader decodes a line at a
	// time, so only a line without end can exhaust memory.
	maxGapLine = 16 << 20
	// minResultCap and resultRatio bound a gzip'd result.json, read
	// whole: at most resultRatio times its compressed size, or
	// minResultCap where that is more. JSON compresses 5-20×; an
	// hour-long run's result is about 100 MB.
	minResultCap = 256 << 20
	resultRatio  = 50
)

// errTooLong is a line of a gaps file past maxGapLine.
var errTooLong = fmt.Errorf("a line longer than %d MiB: a corrupt or crafted file, not a gaps file", maxGapLine>>20)

// lineCap passes r through, failing once a line runs past max bytes.
type lineCap struct {
	r   io.Reader
	max int
	run int // bytes since the last newline
}

func (l *lineCap) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	if n > 0 {
		if i := bytes.LastIndexByte(p[:n], '\n'); i >= 0 {
			l.run = n - i - 1
		} else {
			l.run += n
		}
		if l.run > l.max {
			return n, errTooLong
		}
	}
	return n, err
}

// capped reads at most limit bytes from r and fails past them.
type capped struct {
	r     io.Reader
	left  int64
	limit int64
}

func (c *capped) Read(p []byte) (int, error) {
	if c.left <= 0 {
		// One byte more tells a stream that ends at the limit from one
		// that goes on.
		var b [1]byte
		if n, _ := c.r.Read(b[:]); n > 0 {
			return 0, fmt.Errorf("it expands past %d MiB, %d times its compressed size: a corrupt or crafted file", c.limit>>20, resultRatio)
		}
		return 0, io.EOF
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// resultCap is the most a gzip'd result.json of size compressed bytes may
// expand to.
func resultCap(compressed int64) int64 {
	return max(minResultCap, resultRatio*compressed)
}
