package bpfutil

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/ringbuf"
)

// PollRing is DrainRing for producers that submit with BPF_RB_NO_WAKEUP
// (waking the reader only when the ring fills up): it reads what the ring
// holds every period instead of being woken per record, which keeps a
// high event rate from costing a wakeup each. It returns after a Flush
// (every record written before it delivered) or Close.
func PollRing[T any](rd *ringbuf.Reader, period time.Duration, decodeErrors *atomic.Uint64, fn func(*T)) error {
	var rec ringbuf.Record
	size := int(unsafe.Sizeof(*new(T)))
	rd.SetDeadline(time.Now().Add(period))
	for {
		if err := rd.ReadInto(&rec); err != nil {
			if errors.Is(err, ringbuf.ErrClosed) || errors.Is(err, ringbuf.ErrFlushed) {
				return nil
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				rd.SetDeadline(time.Now().Add(period))
				continue
			}
			return fmt.Errorf("reading ring buffer: %w", err)
		}
		if len(rec.RawSample) < size {
			decodeErrors.Add(1)
			continue
		}
		fn((*T)(unsafe.Pointer(&rec.RawSample[0])))
	}
}
