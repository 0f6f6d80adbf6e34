package kernels

import (
	"errors"

	"golang.org/x/sys/unix"
)

// setThreadClass applies c to the calling thread (its goroutine locked).
func setThreadClass(c ThreadClass) error {
	tid := unix.Gettid()
	switch c {
	case ClassYield:
		if err := unix.SchedSetAttr(tid, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_NORMAL, Runtime: yieldSlice}, 0); err != nil {
			return err
		}
		// Kernels before 6.12 accept a fair thread's runtime and ignore
		// it; they report 0 back.
		if a, err := unix.SchedGetAttr(tid, 0); err != nil || a.Runtime != yieldSlice {
			return errNoSlice
		}
		return nil
	case ClassLow:
		return unix.Setpriority(unix.PRIO_PROCESS, tid, lowNice)
	case ClassIdle:
		return unix.SchedSetAttr(tid, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE}, 0)
	}
	return nil
}

var errNoSlice = errors.New("this kernel keeps its own time slice for normal threads (sched_attr.sched_runtime needs Linux 6.12 or later)")
