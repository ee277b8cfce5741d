package owner

import (
	"errors"

	"golang.org/x/sys/unix"
)

func pidfdOpen(pid int) (int, error) { return unix.PidfdOpen(pid, 0) }

// waitReadable blocks until fd (a pidfd) is readable: its process exited.
func waitReadable(fd int) error {
	for {
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		_, err := unix.Poll(p, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err
	}
}
