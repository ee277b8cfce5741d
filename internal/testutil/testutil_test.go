package testutil

import (
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	var n atomic.Int32
	if !Until(5*time.Second, func() bool { return n.Add(1) == 3 }) {
		t.Fatal("a condition true at the third check was not seen")
	}
	start := time.Now()
	if Until(50*time.Millisecond, func() bool { return false }) {
		t.Fatal("a false condition held")
	}
	if el := time.Since(start); el < 50*time.Millisecond || el > 2*time.Second {
		t.Errorf("a 50 ms deadline took %v", el)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}} {
		in := append([]float64(nil), c.xs...)
		if got := Median(c.xs); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.xs, got, c.want)
		}
		for i := range in {
			if in[i] != c.xs[i] {
				t.Errorf("Median reordered its input: %v", c.xs)
			}
		}
	}
}

func TestLines(t *testing.T) {
	r, w := io.Pipe()
	l := WatchLines(r)
	go func() {
		_, _ = io.WriteString(w, "starting\n")
		time.Sleep(20 * time.Millisecond) // the line after the wait began
		_, _ = io.WriteString(w, "level=INFO msg=attached pid=7\n")
		w.Close()
	}()
	if got := l.Wait(t, "msg=attached", 5*time.Second); got != "level=INFO msg=attached pid=7" {
		t.Errorf("line %q", got)
	}
	<-l.Done()
	if _, ok := l.WaitFor("never", time.Second); ok {
		t.Error("a line never written was found")
	}
	if !strings.HasPrefix(l.String(), "starting\n") {
		t.Errorf("text %q", l.String())
	}
}

func TestSamples(t *testing.T) {
	body := "# HELP x\nx_total 3\ny{a=\"1\",b=\"2\"} 4.5\ny{a=\"2\"} 1\nbad line\n"
	m := Samples(body)
	if m["x_total"] != 3 || m[`y{a="1",b="2"}`] != 4.5 || len(m) != 3 {
		t.Errorf("samples %v", m)
	}
	if v, ok := Sum(body, "y", ""); !ok || v != 5.5 {
		t.Errorf("sum of y %v %v", v, ok)
	}
	if v, ok := Sum(body, "y", `a="2"`); !ok || v != 1 {
		t.Errorf("y{a=2} %v %v", v, ok)
	}
	if v, ok := SeriesValue("x_total 3", "x_total", ""); !ok || v != 3 {
		t.Errorf("x_total %v %v", v, ok)
	}
	if _, ok := SeriesValue("x_total 3", "x", ""); ok {
		t.Error("x matched x_total")
	}
}

func TestWaits(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	WaitTCP(t, l.Addr().String(), 5*time.Second)
	addr := FreeAddr(t, l.Addr().String())
	if addr == l.Addr().String() {
		t.Errorf("FreeAddr gave the avoided %s", addr)
	}
	p := filepath.Join(t.TempDir(), "f")
	go func() { time.Sleep(20 * time.Millisecond); _ = os.WriteFile(p, nil, 0o644) }()
	WaitFile(t, p, 5*time.Second)
	if progs, links := BPFFiles(os.Getpid()); progs != 0 || links != 0 {
		t.Errorf("the test holds %d BPF programs, %d links", progs, links)
	}
}

func TestDescendants(t *testing.T) {
	c := exec.Command("sh", "-c", "sleep 30 & wait")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	var got []int
	if !Until(5*time.Second, func() bool { got = Descendants(os.Getpid()); return len(got) >= 2 }) {
		t.Fatalf("descendants of %d: %v, want sh and its sleep", os.Getpid(), got)
	}
	if got[0] != c.Process.Pid || cmdline(got[1])[0] != "sleep" {
		t.Errorf("descendants %v: want sh (%d) first, then its sleep (%q)", got, c.Process.Pid, cmdline(got[1]))
	}
}
