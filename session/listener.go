package session

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/vishvananda/netlink"
)

const tcpListen = 10 // TCP_LISTEN

// ListenerPid finds the process listening on a local TCP port through the
// socket diag netlink API, then the owner of the socket's inode in
// /proc/PID/fd.
func ListenerPid(port int) (int, error) {
	if port <= 0 || port > 65535 {
		return 0, fmt.Errorf("--port %d is out of range: use 1-65535", port)
	}
	inodes := map[uint64]bool{}
	for _, fam := range []uint8{syscall.AF_INET, syscall.AF_INET6} {
		socks, err := netlink.SocketDiagTCP(fam)
		if err != nil {
			return 0, fmt.Errorf("listing TCP sockets (socket diag): %w", err)
		}
		for _, s := range socks {
			if s.State == tcpListen && int(s.ID.SourcePort) == port {
				inodes[uint64(s.INode)] = true
			}
		}
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("nobody listens on TCP port %d: start the server first, or give its --pid", port)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		fds, err := os.ReadDir(p + "/fd")
		if err != nil {
			continue
		}
		for _, fd := range fds {
			l, err := os.Readlink(p + "/fd/" + fd.Name())
			if err != nil || !strings.HasPrefix(l, "socket:[") {
				continue
			}
			ino, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]"), 10, 64)
			if err == nil && inodes[ino] {
				return strconv.Atoi(filepath.Base(p))
			}
		}
	}
	return 0, fmt.Errorf("port %d is open but its owner is not visible in /proc (run as root)", port)
}
