package sched

import (
	"bufio"
	"compress/gzip"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// kernelConfig is the value of a kernel build option (CONFIG_X) from
// /proc/config.gz or /boot/config-RELEASE: "y", "m", a value, or "" when
// it is not set or neither file can be read.
func kernelConfig(name string) string {
	var r io.Reader
	if f, err := os.Open("/proc/config.gz"); err == nil {
		defer f.Close()
		if z, err := gzip.NewReader(f); err == nil {
			r = z
		}
	}
	if r == nil {
		var u unix.Utsname
		if err := unix.Uname(&u); err != nil {
			return ""
		}
		f, err := os.Open("/boot/config-" + unix.ByteSliceToString(u.Release[:]))
		if err != nil {
			return ""
		}
		defer f.Close()
		r = f
	}
	return configValue(r, name)
}

// configValue finds name=value in a kernel config.
func configValue(r io.Reader, name string) string {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+"="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}
