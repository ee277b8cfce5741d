package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/collectors"
	"github.com/bpfbench/bpfbench/internal/privtest"
	"github.com/bpfbench/bpfbench/internal/testproc"
)

func init() { testproc.Register("tcppair", childPair) }

// childPair opens, inside network namespace args[0] ("" for its own), a
// listener on 127.0.0.1, a client connected to it and the accepted side,
// sends 100 bytes each way, prints the listener's port through ready and
// keeps them open. The thread that opened them stays in the namespace, as
// a server's threads stay in theirs.
func childPair(args []string, ready func(...int), wait func()) {
	port := make(chan int)
	go func() {
		runtime.LockOSThread()
		if args[0] != "" {
			ns, err := netns.GetFromName(args[0])
			if err != nil {
				panic(err)
			}
			if err := netns.Set(ns); err != nil {
				panic(err)
			}
		}
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			panic(err)
		}
		c, err := net.Dial("tcp4", l.Addr().String())
		if err != nil {
			panic(err)
		}
		a, err := l.Accept()
		if err != nil {
			panic(err)
		}
		buf := make([]byte, 100)
		for _, p := range [][2]net.Conn{{c, a}, {a, c}} {
			if _, err := p[0].Write(buf); err != nil {
				panic(err)
			}
			if _, err := p[1].Read(buf); err != nil {
				panic(err)
			}
		}
		port <- l.Addr().(*net.TCPAddr).Port
		select {}
	}()
	ready(<-port)
	wait()
}

// pair is a listener and a connection to it in this process.
func pair(t *testing.T) (ln net.Listener, client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	client, err = net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	if _, err := client.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	return ln, client, server
}

// onLockedThread runs fn on one locked OS thread, as refresh does.
func onLockedThread[T any](fn func() T) T {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return fn()
}

func TestSplitNetns(t *testing.T) {
	nss := map[uint32]string{7: "a", 3: "b", 9: "c", 5: "d"}
	for _, tc := range []struct {
		name        string
		self, main  uint32
		own         bool
		wantForeign []uint32
	}{
		{"own namespace among others, main thread in it", 7, 7, true, []uint32{3, 5, 9}},
		{"own namespace, main thread elsewhere", 7, 9, true, []uint32{9, 3, 5}},
		{"only other namespaces", 1, 5, false, []uint32{5, 3, 7, 9}},
		{"reader's namespace unknown", 0, 0, false, []uint32{3, 5, 7, 9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			own, foreign := splitNetns(tc.self, tc.main, nss)
			if own != tc.own || !slices.Equal(foreign, tc.wantForeign) {
				t.Errorf("splitNetns(%d, %d) = %v, %v; want %v, %v", tc.self, tc.main, own, foreign, tc.own, tc.wantForeign)
			}
		})
	}
	if own, foreign := splitNetns(4, 4, map[uint32]string{4: "x"}); !own || len(foreign) != 0 {
		t.Errorf("one namespace, the reader's: %v %v, want own and no other", own, foreign)
	}
}

// TestOwnNamespace: this process's threads are in the reading thread's
// namespace, and its sockets are read there through one socket-diag dump
// without setns (no privilege needed); reading the same sockets through
// their descriptors (pidfd_getfd, allowed on one's own process) gives the
// same cookies, addresses, states and tcp_info.
func TestOwnNamespace(t *testing.T) {
	ln, client, server := pair(t)
	self, err := nsInode("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	r := onLockedThread(newSockReader)
	if r.self != self {
		t.Fatalf("the reading thread's namespace %d, the process's %d", r.self, self)
	}
	own, foreign := splitNetns(r.self, self, netnsOf(os.Getpid()))
	if !own || len(foreign) != 0 {
		t.Fatalf("this process: own %v, others %v; want its own namespace only", own, foreign)
	}
	var socks []diagSocket
	err = onLockedThread(func() (err error) {
		socks, err = r.sockets(os.Getpid())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !r.read || len(r.dumps) != 1 {
		t.Errorf("read %v, %d dumps; want one dump of the own namespace", r.read, len(r.dumps))
	}
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	want := map[string]uint8{
		fmt.Sprintf("%v %v", ln.Addr(), "0.0.0.0:0"):                 tcpListen,
		fmt.Sprintf("%v %v", client.LocalAddr(), ln.Addr()):          1,
		fmt.Sprintf("%v %v", server.LocalAddr(), client.LocalAddr()): 1,
	}
	got := map[string]diagSocket{}
	for _, s := range socks {
		if s.local.Port() != port && s.remote.Port() != port {
			continue
		}
		if s.netns != self {
			t.Errorf("socket %v -> %v in namespace %d, want %d", s.local, s.remote, s.netns, self)
		}
		got[fmt.Sprintf("%v %v", s.local, s.remote)] = s
	}
	for k, st := range want {
		if s, ok := got[k]; !ok || s.state != st || s.info == nil || s.cookie == 0 {
			t.Errorf("socket %s: %+v (found %v), want state %d with tcp_info and a cookie", k, s, ok, st)
		}
	}

	fds, err := socketFDs(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	byFD, err := readFDs(os.Getpid(), fds, self)
	if err != nil {
		t.Fatalf("reading this process's sockets through pidfd_getfd: %v", err)
	}
	for _, s := range byFD {
		d, ok := got[fmt.Sprintf("%v %v", s.local, s.remote)]
		if !ok {
			continue
		}
		// A listener's cookie is not compared: Go listens with MPTCP, whose
		// socket is not the TCP subflow socket diag reports (only its port
		// matters).
		if (s.state != tcpListen && s.cookie != d.cookie) || s.state != d.state || s.netns != d.netns || (s.info == nil) != (d.info == nil) {
			t.Errorf("socket %v -> %v: through its descriptor %+v, through socket diag %+v", s.local, s.remote, s, d)
		}
		if s.info != nil && s.info.bytesSent != d.info.bytesSent {
			t.Errorf("socket %v -> %v: bytes_sent %d through its descriptor, %d through socket diag", s.local, s.remote, s.info.bytesSent, d.info.bytesSent)
		}
		delete(got, fmt.Sprintf("%v %v", s.local, s.remote))
	}
	if len(got) != 0 {
		t.Errorf("sockets socket diag found and pidfd_getfd did not: %v", got)
	}
}

// TestSocketsOfAnotherNamespace: a process whose sockets are in another
// network namespace (its main thread in this one, the thread that opened
// them in the other; and a process entirely in the other) has them read
// through their descriptors, keyed by the other namespace; where
// pidfd_getfd is refused (as a seccomp filter would), through setns into
// the namespace (as root); and where both are refused, the error names the
// namespace and the capabilities.
func TestSocketsOfAnotherNamespace(t *testing.T) {
	privtest.Require(t)
	privtest.RequireTool(t, "ip", "apt-get install iproute2")
	name := fmt.Sprintf("bbtcpns%d", os.Getpid())
	ipCmd(t, "netns", "add", name)
	t.Cleanup(func() { ipCmd(t, "netns", "del", name) })
	ipCmd(t, "-n", name, "link", "set", "lo", "up")
	other, err := nsInode("/run/netns/" + name)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		wrapper []string
		arg     string
	}{
		{"one thread in the other namespace", nil, name},
		{"every thread in the other namespace", []string{"ip", "netns", "exec", name}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			child := testproc.StartWrapped(t, tc.wrapper, "tcppair", tc.arg)
			port := uint16(child.Tids[0])
			find := func(getfd func(int, int, int) (int, error)) ([]diagSocket, *sockReader, error) {
				old := pidfdGetfd
				pidfdGetfd = getfd
				defer func() { pidfdGetfd = old }()
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				r := newSockReader()
				s, err := r.sockets(child.Pid())
				return s, r, err
			}
			check := func(how string, socks []diagSocket) {
				t.Helper()
				n := 0
				for _, s := range socks {
					if s.local.Port() != port && s.remote.Port() != port {
						continue
					}
					n++
					if s.netns != other || s.cookie == 0 || s.info == nil {
						t.Errorf("%s: %+v, want namespace %d, a cookie and tcp_info", how, s, other)
					}
				}
				if n != 3 {
					t.Errorf("%s: %d sockets on port %d (%+v), want the listener and both ends of the connection", how, n, port, socks)
				}
			}
			socks, r, err := find(unix.PidfdGetfd)
			if err != nil {
				t.Fatalf("through pidfd_getfd: %v", err)
			}
			check("through pidfd_getfd", socks)
			if _, ok := r.dumps[other]; ok {
				t.Errorf("the other namespace was dumped (setns) although pidfd_getfd worked")
			}

			refuse := func(int, int, int) (int, error) { return -1, unix.EPERM }
			socks, r, err = find(refuse)
			if err != nil {
				t.Fatalf("with pidfd_getfd refused, through setns as root: %v", err)
			}
			check("through setns", socks)
			if _, ok := r.dumps[other]; !ok {
				t.Errorf("with pidfd_getfd refused, the other namespace was not dumped")
			}

			// Without CAP_SYS_ADMIN (on a thread that dropped it) as well.
			errc := make(chan error, 1)
			go func() {
				runtime.LockOSThread() // the thread ends with the goroutine, its capabilities with it
				if err := dropEffective(unix.CAP_SYS_ADMIN); err != nil {
					errc <- err
					return
				}
				old := pidfdGetfd
				pidfdGetfd = refuse
				defer func() { pidfdGetfd = old }()
				_, err := newSockReader().sockets(child.Pid())
				errc <- err
			}()
			err = <-errc
			var nerr *namespaceError
			if !errors.As(err, &nerr) || nerr.netns != other || !strings.Contains(err.Error(), "CAP_SYS_PTRACE") || !strings.Contains(err.Error(), "CAP_SYS_ADMIN") {
				t.Errorf("both refused: %v, want the namespace %d and both capabilities named", err, other)
			}
			t.Logf("both refused: %v", err)
		})
	}
}

// dropEffective removes capability c from the calling thread's effective set.
func dropEffective(c int) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	data[c/32].Effective &^= 1 << (uint(c) % 32)
	return unix.Capset(&hdr, &data[0])
}

// TestSectionReportsSocketError: a section that cannot read its target's
// sockets says why in its summary, with the fix, and logs it once however
// many refreshes fail.
func TestSectionReportsSocketError(t *testing.T) {
	privtest.Require(t)
	privtest.RequireTool(t, "ip", "apt-get install iproute2")
	name := fmt.Sprintf("bbtcperr%d", os.Getpid())
	ipCmd(t, "netns", "add", name)
	t.Cleanup(func() { ipCmd(t, "netns", "del", name) })
	ipCmd(t, "-n", name, "link", "set", "lo", "up")
	child := testproc.StartWrapped(t, []string{"ip", "netns", "exec", name}, "tcppair", "")

	var logs strings.Builder
	sec, err := NewSection(collectors.Options{Pid: child.Pid(), Logger: newTextLogger(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	old := pidfdGetfd
	pidfdGetfd = func(int, int, int) (int, error) { return -1, unix.EPERM }
	defer func() { pidfdGetfd = old }()
	// And setns, as without CAP_SYS_ADMIN (the refreshes run on any
	// thread: TestSocketsOfAnotherNamespace drops it from one for real).
	admin := haveSysAdmin
	haveSysAdmin = func() bool { return false }
	defer func() { haveSysAdmin = admin }()
	if err := sec.Start(context.Background()); err != nil {
		t.Fatalf("start: %+v", err)
	}
	defer sec.Close()
	for range 3 {
		_ = sec.Refresh()
	}
	sum := sec.Summary().(Summary)
	if sum.Error == "" || !strings.Contains(sum.Error, "CAP_SYS_PTRACE") || len(sum.Connections) != 0 {
		t.Errorf("summary %+v, want an error naming CAP_SYS_PTRACE and no connection", sum)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
		t.Errorf("%d warnings over 5 failed refreshes, want 1:\n%s", n, logs.String())
	}
	var b strings.Builder
	sec.WriteSummary(&b)
	if !strings.Contains(b.String(), "cannot read every socket") {
		t.Errorf("the summary table does not say why it has no connection:\n%s", b.String())
	}

	// Once readable again, the error is gone and the connections are there.
	pidfdGetfd = old
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if sum = sec.Summary().(Summary); sum.Error == "" && len(sum.Connections) == 2 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if sum.Error != "" || len(sum.Connections) != 2 {
		t.Errorf("readable again: %+v, want no error and the two ends of the connection", sum)
	}
	if !strings.Contains(logs.String(), "works again") {
		t.Errorf("no log line says the sockets are readable again:\n%s", logs.String())
	}
}

func newTextLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }
