package tcp

// How a refresh reads a target's TCP sockets, and with which privileges
// (measured on Linux 6.18 as user nobody with CAP_BPF, CAP_PERFMON,
// CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH, the systemd unit's and the Helm
// chart's set):
//
//   - The target's socket inodes come from /proc/PID/fd (CAP_SYS_PTRACE for
//     another user's process).
//   - In the refreshing thread's own network namespace: one socket-diag
//     dump (NETLINK_SOCK_DIAG with tcp_info), which needs no capability at
//     all, as `ss -tni` needs none. The collector used to enter even its own
//     namespace with setns (netlink.NewHandleAt), which needs CAP_SYS_ADMIN.
//   - In another network namespace (a server in a container, a daemon in a
//     pod): each socket of the target is duplicated with pidfd_getfd (ptrace
//     attach rights: CAP_SYS_PTRACE) and read with getsockopt (SO_COOKIE,
//     TCP_INFO), getsockname and getpeername: the same tcp_info as socket
//     diag's. Where pidfd_getfd is refused (a seccomp filter without it,
//     Yama ptrace_scope 3), a socket-diag dump inside the namespace through
//     setns, which needs CAP_SYS_ADMIN.
//   - Not used: a BPF iterator over TCP sockets (iter/tcp) loads and attaches
//     with CAP_BPF and CAP_PERFMON, but walks the network namespace of the
//     process that reads it (4 sockets read from the host's namespace, 3
//     from the target's with the same link), so it needs setns as well.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/bpfbench/bpfbench/internal/caps"
)

const tcpListen = 10 // TCP_LISTEN

// diagSocket is one TCP socket of a target.
type diagSocket struct {
	cookie        uint64
	netns         uint32
	state         uint8
	local, remote netip.AddrPort
	info          *sockInfo
}

// sockInfo is what the collector uses of a socket's tcp_info.
type sockInfo struct {
	rtt, sndCwnd, sndSsthresh, totalRetrans, sndWnd, notsentBytes  uint32
	rwndLimited, sndbufLimited, busyTime, bytesSent, bytesReceived uint64
}

func infoOfDiag(ti *netlink.TCPInfo) *sockInfo {
	if ti == nil {
		return nil
	}
	return &sockInfo{
		rtt: ti.Rtt, sndCwnd: ti.Snd_cwnd, sndSsthresh: ti.Snd_ssthresh, totalRetrans: ti.Total_retrans,
		sndWnd: ti.Snd_wnd, notsentBytes: ti.Notsent_bytes,
		rwndLimited: ti.Rwnd_limited, sndbufLimited: ti.Sndbuf_limited, busyTime: ti.Busy_time,
		bytesSent: ti.Bytes_sent, bytesReceived: ti.Bytes_received,
	}
}

func infoOfSockopt(ti *unix.TCPInfo) *sockInfo {
	return &sockInfo{
		rtt: ti.Rtt, sndCwnd: ti.Snd_cwnd, sndSsthresh: ti.Snd_ssthresh, totalRetrans: ti.Total_retrans,
		sndWnd: ti.Snd_wnd, notsentBytes: ti.Notsent_bytes,
		rwndLimited: ti.Rwnd_limited, sndbufLimited: ti.Sndbuf_limited, busyTime: ti.Busy_time,
		bytesSent: ti.Bytes_sent, bytesReceived: ti.Bytes_received,
	}
}

// SocketAccessHint is the fix when the sockets of a target in another
// network namespace cannot be read.
const SocketAccessHint = "grant CAP_SYS_PTRACE (for pidfd_getfd; under systemd, SystemCallFilter= must also allow pidfd_getfd, which @debug holds) or CAP_SYS_ADMIN (for setns), or run as root"

// socketFDs lists the sockets pid holds open: inode -> an fd number that
// holds it.
func socketFDs(pid int) (map[uint32]int, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
		return nil, nil // the process exited: no sockets
	}
	if err != nil {
		if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("listing the sockets of pid %d: %w: grant CAP_SYS_PTRACE or run as root", pid, err)
		}
		return nil, fmt.Errorf("listing the sockets of pid %d: %w", pid, err)
	}
	out := map[uint32]int{}
	var refused error
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			// With CAP_DAC_READ_SEARCH the directory lists, but each link
			// needs ptrace read rights.
			if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
				refused = err
			}
			continue
		}
		s, ok := strings.CutPrefix(l, "socket:[")
		if !ok {
			continue
		}
		ino, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 32)
		if err != nil {
			continue
		}
		if fd, err := strconv.Atoi(e.Name()); err == nil {
			if _, seen := out[uint32(ino)]; !seen {
				out[uint32(ino)] = fd
			}
		}
	}
	if refused != nil {
		return out, fmt.Errorf("reading the descriptors of pid %d: %w: grant CAP_SYS_PTRACE or run as root", pid, unwrapPath(refused))
	}
	return out, nil
}

// unwrapPath drops the path of a *os.PathError (the message names it
// otherwise: one message for every descriptor of a process).
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// netnsOf lists the network namespaces of pid's threads: inode -> a path to it.
func netnsOf(pid int) map[uint32]string {
	out := map[uint32]string{}
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, t := range tasks {
		p := fmt.Sprintf("/proc/%d/task/%s/ns/net", pid, t.Name())
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil {
			if _, ok := out[uint32(st.Ino)]; !ok {
				out[uint32(st.Ino)] = p
			}
		}
	}
	return out
}

// nsInode is the inode of the namespace file path (/proc/PID/ns/net).
func nsInode(path string) (uint32, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, err
	}
	return uint32(st.Ino), nil
}

// threadNetns is the network namespace of the calling thread, which a
// netlink socket it opens belongs to.
func threadNetns() (uint32, error) { return nsInode("/proc/thread-self/ns/net") }

// splitNetns sorts the network namespaces of a process's threads (nss)
// for a reader in namespace self: own reports whether self is one of them
// (its sockets there come from one socket-diag dump, without setns);
// foreign are the others (main, the namespace of the process's main
// thread, first if it is one of them; then by inode).
func splitNetns(self, main uint32, nss map[uint32]string) (own bool, foreign []uint32) {
	for ino := range nss {
		if ino == self {
			own = true
			continue
		}
		foreign = append(foreign, ino)
	}
	slices.SortFunc(foreign, func(a, b uint32) int {
		switch {
		case a == main:
			return -1
		case b == main:
			return 1
		case a < b:
			return -1
		case a > b:
			return 1
		}
		return 0
	})
	return own, foreign
}

func addrOf(ip []byte, port uint16) netip.AddrPort {
	a, _ := netip.AddrFromSlice(ip)
	return netip.AddrPortFrom(a.Unmap(), port)
}

// sockReader reads the targets' sockets for one refresh, from one thread
// (the caller locks it): the socket-diag dump of its own network
// namespace once for every target there, the others' sockets one by one.
type sockReader struct {
	self uint32 // the reading thread's network namespace; 0 if unknown
	// dumps are the socket-diag dumps of this refresh, by namespace.
	dumps map[uint32][]*netlink.InetDiagTCPInfoResp
	// read: a dump or a read of sockets one by one ran.
	read bool
	// setns is why entering a namespace was refused, once it was.
	setns error
}

func newSockReader() *sockReader {
	self, _ := threadNetns()
	return &sockReader{self: self, dumps: map[uint32][]*netlink.InetDiagTCPInfoResp{}}
}

// dumpWith dumps the TCP sockets of h's namespace.
func dumpWith(h *netlink.Handle) ([]*netlink.InetDiagTCPInfoResp, error) {
	var all []*netlink.InetDiagTCPInfoResp
	for _, fam := range []uint8{unix.AF_INET, unix.AF_INET6} {
		resp, err := h.SocketDiagTCPInfo(fam)
		if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
			return nil, fmt.Errorf("reading TCP sockets through socket diag: %w", err)
		}
		all = append(all, resp...)
	}
	return all, nil
}

// dumpOwn returns the TCP sockets of the reader's own namespace: a netlink
// socket opened here belongs to it, no setns and no capability needed.
func (r *sockReader) dumpOwn() ([]*netlink.InetDiagTCPInfoResp, error) {
	if d, ok := r.dumps[r.self]; ok {
		return d, nil
	}
	h, err := netlink.NewHandle(unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("opening socket diag: %w", err)
	}
	defer h.Close()
	r.read = true
	d, err := dumpWith(h)
	if err != nil {
		return nil, err
	}
	r.dumps[r.self] = d
	return d, nil
}

// dumpAt returns the TCP sockets of network namespace ino (reached through
// path) from a socket-diag socket opened inside it (setns: CAP_SYS_ADMIN);
// ok is false when the namespace is gone (its thread exited).
func (r *sockReader) dumpAt(ino uint32, path string) (_ []*netlink.InetDiagTCPInfoResp, ok bool, _ error) {
	if d, ok := r.dumps[ino]; ok {
		return d, true, nil
	}
	if r.setns != nil {
		return nil, false, r.setns
	}
	if !haveSysAdmin() {
		r.setns = errors.New("CAP_SYS_ADMIN is not effective")
		return nil, false, r.setns
	}
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, false, nil // the thread exited
	}
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_SOCK_DIAG)
	ns.Close()
	if err != nil {
		r.setns = err
		return nil, false, err
	}
	defer h.Close()
	r.read = true
	d, err := dumpWith(h)
	if err != nil {
		return nil, false, err
	}
	r.dumps[ino] = d
	return d, true, nil
}

// fromDump appends the sockets of resp that pid holds (fds, by inode) to
// out, and deletes them from fds.
func fromDump(out []diagSocket, resp []*netlink.InetDiagTCPInfoResp, fds map[uint32]int, ino uint32) []diagSocket {
	for _, r := range resp {
		m := r.InetDiagMsg
		if m == nil {
			continue
		}
		if _, ok := fds[m.INode]; !ok {
			continue
		}
		delete(fds, m.INode)
		out = append(out, diagSocket{
			cookie: cookieOf(m.ID.Cookie),
			netns:  ino,
			state:  m.State,
			local:  addrOf(m.ID.Source, m.ID.SourcePort),
			remote: addrOf(m.ID.Destination, m.ID.DestinationPort),
			info:   infoOfDiag(r.TCPInfo),
		})
	}
	return out
}

// errNotTCP: the socket is not a TCP socket.
var errNotTCP = errors.New("not a TCP socket")

// readSocket reads the TCP socket fd (a duplicate of one of the target's)
// if it still is inode ino.
func readSocket(fd int, ino, netns uint32) (diagSocket, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || uint32(st.Ino) != ino {
		return diagSocket{}, errNotTCP // the fd number now holds another file
	}
	dom, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err != nil || (dom != unix.AF_INET && dom != unix.AF_INET6) {
		return diagSocket{}, errNotTCP
	}
	proto, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL)
	if err != nil || (proto != unix.IPPROTO_TCP && proto != unix.IPPROTO_MPTCP) {
		return diagSocket{}, errNotTCP
	}
	cookie, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_COOKIE)
	if err != nil {
		return diagSocket{}, fmt.Errorf("reading SO_COOKIE: %w", err)
	}
	ti, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil {
		return diagSocket{}, fmt.Errorf("reading TCP_INFO: %w", err)
	}
	// Go listens with MPTCP by default (1.24+): an MPTCP listener counts
	// for its port; a connection that fell back to TCP is a TCP socket.
	// An MPTCP connection's cookie is not its subflows', which the kernel
	// side follows: skipped.
	if proto == unix.IPPROTO_MPTCP && ti.State != tcpListen {
		return diagSocket{}, errNotTCP
	}
	s := diagSocket{cookie: cookie, netns: netns, state: ti.State, info: infoOfSockopt(ti)}
	if sa, err := unix.Getsockname(fd); err == nil {
		s.local = addrOfSockaddr(sa)
	}
	if sa, err := unix.Getpeername(fd); err == nil {
		s.remote = addrOfSockaddr(sa)
	} else {
		s.remote = netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
	}
	return s, nil
}

func addrOfSockaddr(sa unix.Sockaddr) netip.AddrPort {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port))
	}
	return netip.AddrPort{}
}

// haveSysAdmin reports whether CAP_SYS_ADMIN, which setns needs, is
// effective on the calling thread; tests replace it.
var haveSysAdmin = func() bool {
	ok, _ := caps.Effective(caps.CapSysAdmin)
	return ok
}

// pidfdGetfd is unix.PidfdGetfd; tests refuse it, as a seccomp filter would.
var pidfdGetfd = unix.PidfdGetfd

// readFDs reads pid's TCP sockets among fds one by one, through duplicates
// of its descriptors (pidfd_getfd: ptrace attach rights, CAP_SYS_PTRACE
// for another user's process), as sockets of namespace ino. A socket closed
// since it was listed is skipped.
func readFDs(pid int, fds map[uint32]int, ino uint32) ([]diagSocket, error) {
	pfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil, nil // exited
		}
		return nil, fmt.Errorf("pidfd_open: %w", err)
	}
	defer unix.Close(pfd)
	var out []diagSocket
	for sino, n := range fds {
		fd, err := pidfdGetfd(pfd, n, 0)
		if err != nil {
			if errors.Is(err, unix.EBADF) || errors.Is(err, unix.ESRCH) {
				continue // closed since listed, or the process exited
			}
			return nil, fmt.Errorf("pidfd_getfd: %w", err)
		}
		s, err := readSocket(fd, sino, ino)
		unix.Close(fd)
		if errors.Is(err, errNotTCP) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("socket fd %d: %w", n, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// refusedErr reports whether err is the kernel (or a seccomp filter)
// refusing the call.
func refusedErr(err error) bool {
	return errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.ENOSYS)
}

// namespaceError: the sockets of a target in another network namespace
// could not be read, by either way.
type namespaceError struct {
	pid          int
	netns        uint32
	getfd, setns error
}

func (e *namespaceError) Error() string {
	return fmt.Sprintf("pid %d is in network namespace %d, not bpfbench's, and its sockets there cannot be read (%v; setns: %v): %s",
		e.pid, e.netns, e.getfd, e.setns, SocketAccessHint)
}

func (e *namespaceError) Unwrap() []error { return []error{e.getfd, e.setns} }

// sockets lists pid's TCP sockets with their tcp_info, in every network
// namespace its threads are in.
func (r *sockReader) sockets(pid int) ([]diagSocket, error) {
	fds, err := socketFDs(pid)
	if err != nil {
		return nil, err
	}
	if len(fds) == 0 {
		return nil, nil
	}
	nss := netnsOf(pid)
	main, _ := nsInode(fmt.Sprintf("/proc/%d/ns/net", pid))
	own, foreign := splitNetns(r.self, main, nss)
	var out []diagSocket
	if own {
		resp, err := r.dumpOwn()
		if err != nil {
			return nil, fmt.Errorf("pid %d: %w", pid, err)
		}
		out = fromDump(out, resp, fds, r.self)
	}
	if len(foreign) == 0 || len(fds) == 0 {
		return out, nil
	}
	// The rest are in other namespaces (or are no TCP sockets). A socket
	// read through its descriptor counts as one of the main thread's
	// namespace, or of the first other one: what keys its listening port
	// in the kernel (a process whose threads are in several namespaces
	// other than bpfbench's is rare).
	socks, gerr := readFDs(pid, fds, foreign[0])
	r.read = true
	if gerr == nil {
		return append(out, socks...), nil
	}
	if !refusedErr(gerr) {
		return nil, fmt.Errorf("pid %d: reading its sockets through pidfd_getfd: %w", pid, gerr)
	}
	for _, ino := range foreign {
		resp, ok, serr := r.dumpAt(ino, nss[ino])
		if serr != nil {
			return out, &namespaceError{pid: pid, netns: ino, getfd: gerr, setns: serr}
		}
		if ok {
			out = fromDump(out, resp, fds, ino)
		}
	}
	return out, nil
}

// Access is what reading TCP sockets can do with the current privileges
// (`bpfbench check`), tried on a connection of the caller's own.
type Access struct {
	// Own is why a socket-diag dump of the caller's network namespace did
	// not show the connection with its tcp_info (nil: it did). Targets in
	// that namespace need nothing more, but CAP_SYS_PTRACE for another
	// user's process (its /proc/PID/fd).
	Own error
	// Descriptors is why pidfd_getfd and TCP_INFO on the connection failed
	// (nil: they worked): the kernel's and a seccomp filter's answer.
	// Another user's process also needs Ptrace.
	Descriptors error
	// Ptrace: CAP_SYS_PTRACE is effective.
	Ptrace bool
	// Setns: CAP_SYS_ADMIN is effective (the fallback into another
	// namespace).
	Setns bool
}

// CheckAccess opens a connection on the loopback and reads it both ways.
func CheckAccess() Access {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var a Access
	a.Ptrace, _ = caps.Effective(caps.CapSysPtrace)
	a.Setns = haveSysAdmin()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		a.Own, a.Descriptors = err, err
		return a
	}
	defer ln.Close()
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		a.Own, a.Descriptors = err, err
		return a
	}
	defer c.Close()
	fd, ino := -1, uint32(0)
	if rc, err := c.(*net.TCPConn).SyscallConn(); err == nil {
		_ = rc.Control(func(f uintptr) {
			var st unix.Stat_t
			if unix.Fstat(int(f), &st) == nil {
				fd, ino = int(f), uint32(st.Ino)
			}
		})
	}
	if fd < 0 {
		a.Own = errors.New("finding the test connection's descriptor")
		a.Descriptors = a.Own
		return a
	}
	want := map[uint32]int{ino: fd}
	r := newSockReader()
	if resp, err := r.dumpOwn(); err != nil {
		a.Own = err
	} else if s := fromDump(nil, resp, want, r.self); len(s) != 1 || s[0].info == nil {
		a.Own = errors.New("the dump lacks the test connection or its tcp_info")
	}
	if s, err := readFDs(os.Getpid(), map[uint32]int{ino: fd}, r.self); err != nil {
		a.Descriptors = err
	} else if len(s) != 1 || s[0].info == nil {
		a.Descriptors = errors.New("the test connection was not read through its descriptor")
	}
	return a
}
