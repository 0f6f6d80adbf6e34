package kernels

import (
	"errors"

	"golang.org/x/sys/unix"
)

// setThreadClass applies c to the calling thread (its goroutine locked).
// Every class keeps the nice value the thread came with (an operator's
// `nice -n 5 sluice serve`): sched_setattr sets a SCHED_NORMAL thread's
// nice along with its slice, so the thread's own is passed on
// (a zero there raised a niced process's compute threads back to nice 0
// as root, and was refused without privilege, leaving them normal), and
// low lowers from it.
func setThreadClass(c ThreadClass) error {
	tid := unix.Gettid()
	if c == ClassNormal {
		return nil
	}
	cur, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return err
	}
	switch c {
	case ClassYield:
		if err := unix.SchedSetAttr(tid, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_NORMAL, Nice: cur.Nice, Runtime: yieldSlice}, 0); err != nil {
			return err
		}
		// Kernels before 6.12 accept a fair thread's runtime and ignore
		// it; they report 0 back.
		if a, err := unix.SchedGetAttr(tid, 0); err != nil || a.Runtime != yieldSlice {
			return errNoSlice
		}
		return nil
	case ClassLow:
		return unix.Setpriority(unix.PRIO_PROCESS, tid, min(int(cur.Nice)+lowNice, maxNice))
	case ClassIdle:
		return unix.SchedSetAttr(tid, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE}, 0) // SCHED_IDLE leaves the nice value as it is
	}
	return nil
}

// maxNice is the lowest priority a nice value can say.
const maxNice = 19

var errNoSlice = errors.New("this kernel keeps its own time slice for normal threads (sched_attr.sched_runtime needs Linux 6.12 or later)")
