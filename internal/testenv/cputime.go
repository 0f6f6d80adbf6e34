package testenv

import (
	"syscall"
	"time"
)

// CPUTime is the process's user+system CPU time so far. A test that bounds
// how long some work may take (a refusal that must not build what a hostile
// input describes, a load that must stay linear) bounds the CPU time the
// work used, not the wall time: on a loaded machine the wall time measures
// the neighbours (a CI box at load average 15 runs a thread a fraction of
// the time), the CPU time the code. It counts every goroutine of the test
// binary, the garbage collector's too, so bound only work done with nothing
// else running.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
