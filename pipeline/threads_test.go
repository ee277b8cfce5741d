package pipeline

import (
	"os"
	"runtime"
	"strconv"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A thread named with prctl(PR_SET_NAME) is named so on the timeline; an
// unknown thread keeps its tid.
func TestThreadNames(t *testing.T) {
	named := make(chan int)
	release := make(chan struct{})
	go func() {
		runtime.LockOSThread() // the thread ends with the goroutine, name and all
		if err := unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(unsafePtr("kv-prefetch"))), 0, 0, 0); err != nil {
			t.Error(err)
		}
		named <- unix.Gettid()
		<-release
	}()
	tid := <-named
	defer close(release)
	tn := newThreadNames(os.Getpid())
	if got := tn.name(uint32(tid)); got != "kv-prefetch" {
		t.Errorf("name(%d) = %q, want kv-prefetch", tid, got)
	}
	if got := tn.label(uint32(tid)); got != "kv-prefetch "+itoa(tid) {
		t.Errorf("label(%d) = %q", tid, got)
	}
	if got := tn.name(1 << 30); got != "thread 1073741824" {
		t.Errorf("unknown thread: %q", got)
	}
	// A thread of another process is named too (a child, a gateway).
	other := newThreadNames(1)
	if got := other.name(uint32(tid)); got != "kv-prefetch" {
		t.Errorf("a thread of another process: %q", got)
	}
	var none *threadNames
	if got := none.name(7); got != "thread 7" {
		t.Errorf("no namer: %q", got)
	}
}

func unsafePtr(s string) *byte {
	b, _ := unix.BytePtrFromString(s)
	return b
}

func itoa(n int) string { return strconv.Itoa(n) }
