package collectors

import "strconv"

// UserHZ is the unit of the CPU times /proc/PID/stat gives: Linux's ABI
// fixes USER_HZ at 100 on every architecture it runs servers on.
const UserHZ = 100

// TreeCPU is the CPU time the kernel charged the processes pids (a
// target's Tree): each one's user and system time, and that of the
// children it reaped (so a worker that ended since an earlier reading
// keeps its time in the difference), in ns, from proc ("/proc"), and how
// many it read. Each of the four figures is cut to a tick (1/UserHZ s):
// a difference of two readings is off by less than four ticks a process.
func TreeCPU(proc string, pids []int) (ns int64, n int) {
	for _, pid := range pids {
		// After the comm: state is field 3, utime 14, stime 15, cutime
		// 16, cstime 17.
		f := statFields(proc, pid)
		if len(f) < 15 {
			continue
		}
		var ticks int64
		for _, v := range f[11:15] {
			t, err := strconv.ParseInt(v, 10, 64)
			if err != nil || t < 0 {
				t = 0
			}
			ticks += t
		}
		ns += ticks * (1e9 / UserHZ)
		n++
	}
	return ns, n
}
