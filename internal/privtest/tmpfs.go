package privtest

import (
	"testing"

	"golang.org/x/sys/unix"
)

// Tmpfs mounts a tmpfs of size (e.g. "1m") on a directory of the test's
// own, unmounted at its end, and returns the directory: a small file system
// to fill. It skips (Require) when not root.
func Tmpfs(t testing.TB, size string) string {
	t.Helper()
	Require(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		SkipPrivileged(t, "mounting a tmpfs of %s on %s: %v", size, dir, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}
