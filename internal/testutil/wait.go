package testutil

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// logs is the text of the files, for a failure's message.
func logs(files []string) string {
	var b strings.Builder
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintf(&b, "\n(%s: %v)", f, err)
			continue
		}
		fmt.Fprintf(&b, "\n%s:\n%s", f, text)
	}
	return b.String()
}

// WaitTCP waits until addr accepts a connection, or fails t with the
// text of the log files.
func WaitTCP(t testing.TB, addr string, timeout time.Duration, log ...string) {
	t.Helper()
	ok := Until(timeout, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	if !ok {
		t.Fatalf("%s accepts no connection within %v%s", addr, timeout, logs(log))
	}
}

// WaitHTTP waits until url answers a GET (any status), or fails t with
// the text of the log files.
func WaitHTTP(t testing.TB, url string, timeout time.Duration, log ...string) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	ok := Until(timeout, func() bool {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	if !ok {
		t.Fatalf("%s did not answer within %v%s", url, timeout, logs(log))
	}
}

// WaitFile waits until path exists, or fails t.
func WaitFile(t testing.TB, path string, timeout time.Duration) {
	t.Helper()
	Eventually(t, timeout, func() bool {
		_, err := os.Stat(path)
		return err == nil
	}, "file %s", path)
}

// Wchan is what pid's main thread waits on in the kernel ("" when it runs
// or is gone).
func Wchan(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", pid))
	return strings.TrimSpace(string(b))
}

// WaitBlocked waits until pid's main thread is blocked in the kernel in a
// function whose name holds one of in (e.g. "wait_for_partner", a fifo's
// open waiting for a writer; "pipe_read"), or fails t.
func WaitBlocked(t testing.TB, pid int, timeout time.Duration, in ...string) {
	t.Helper()
	ok := Until(timeout, func() bool {
		w := Wchan(pid)
		for _, s := range in {
			if strings.Contains(w, s) {
				return true
			}
		}
		return false
	})
	if !ok {
		t.Fatalf("pid %d not blocked in %v within %v (in %q)", pid, in, timeout, Wchan(pid))
	}
}

// BPFFiles counts the BPF programs and links pid holds open, from its
// /proc/PID/fdinfo (the kernel writes prog_type for a program's file,
// link_type for a link's).
func BPFFiles(pid int) (progs, links int) {
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		switch {
		case bytes.Contains(b, []byte("\nlink_type:")):
			links++
		case bytes.Contains(b, []byte("\nprog_type:")):
			progs++
		}
	}
	return progs, links
}

// WaitBPFLinks waits until pid holds at least n BPF links (programs it
// attached), or fails t.
func WaitBPFLinks(t testing.TB, pid, n int, timeout time.Duration) {
	t.Helper()
	Eventually(t, timeout, func() bool {
		_, l := BPFFiles(pid)
		return l >= n
	}, "pid %d holding %d BPF links", pid, n)
}

// Lines reads a stream (a child's stderr) line by line as it comes,
// keeping the text, so that a test can wait for a line, e.g. a ready
// line, and print everything on a failure.
type Lines struct {
	mu      sync.Mutex
	text    strings.Builder
	changed chan struct{} // closed and replaced at each line
	done    chan struct{} // closed at the stream's end
}

// WatchLines reads r until its end in a goroutine of its own.
func WatchLines(r io.Reader) *Lines {
	l := &Lines{changed: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			l.mu.Lock()
			l.text.WriteString(sc.Text() + "\n")
			close(l.changed)
			l.changed = make(chan struct{})
			l.mu.Unlock()
		}
	}()
	return l
}

// String is the text read so far.
func (l *Lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.text.String()
}

// Done is closed when the stream has ended and every line is read.
func (l *Lines) Done() <-chan struct{} { return l.done }

// find returns the first line holding substr, and the channel closed at
// the next line.
func (l *Lines) find(substr string) (string, bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for line := range strings.Lines(l.text.String()) {
		if strings.Contains(line, substr) {
			return strings.TrimSuffix(line, "\n"), true, l.changed
		}
	}
	return "", false, l.changed
}

// WaitFor waits until a line holding substr has been read, and returns
// it; false when the stream ended or timeout passed without one.
func (l *Lines) WaitFor(substr string, timeout time.Duration) (string, bool) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		line, ok, changed := l.find(substr)
		if ok {
			return line, true
		}
		select {
		case <-changed:
		case <-l.done:
			line, ok, _ := l.find(substr)
			return line, ok
		case <-timer.C:
			return "", false
		}
	}
}

// Wait is WaitFor that fails t, with the text read, when no line holds
// substr.
func (l *Lines) Wait(t testing.TB, substr string, timeout time.Duration) string {
	t.Helper()
	line, ok := l.WaitFor(substr, timeout)
	if !ok {
		ended := "within " + timeout.String()
		select {
		case <-l.done:
			ended = "before the stream ended"
		default:
		}
		t.Fatalf("no line with %q %s:\n%s", substr, ended, l.String())
	}
	return line
}
