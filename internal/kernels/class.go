package kernels

import (
	"fmt"
	"runtime"
	"sync/atomic"
)

// ThreadClass is the OS scheduling class of the threads that run kernels:
// a Parallel's workers and the goroutine that calls its For (an engine's
// scheduler loop, which locks itself with LockComputeThread). The point:
// the process's other threads (the goroutines that push a handoff's
// pages, read a connection or stream a token) wake while compute holds
// every core, and between two normal threads Linux's scheduler (EEVDF)
// lets the running one finish its slice (1.5-3 ms on 2 CPUs) first. It
// runs a woken thread at once in place of one with a longer slice
// (ClassYield) or of a lower class (ClassIdle).
//
// The price of the lower classes: a lowered thread also yields to every
// thread of other processes on the host (a sidecar, a build), so compute
// can starve on a shared machine (idle most: ~0.3% of a core against one
// normal CPU hog). ClassYield keeps compute's share. Threads of a class
// other than normal are locked to their goroutine for life and end with
// it.
type ThreadClass uint8

const (
	// ClassNormal leaves compute goroutines unlocked on normal threads
	// (the default, and what a Parallel made before this existed did).
	ClassNormal ThreadClass = iota
	// ClassLow runs compute threads at nice +lowNice.
	ClassLow
	// ClassIdle runs compute threads in SCHED_IDLE (Linux).
	ClassIdle
	// ClassYield keeps compute threads normal (their full share of the
	// cores) with a long time slice (yieldSlice, Linux >= 6.12's
	// sched_attr.sched_runtime for SCHED_OTHER): EEVDF lets a woken
	// thread with a shorter slice, every other normal thread, preempt
	// one with a longer slice at once instead of after the slice.
	ClassYield
)

// yieldSlice is ClassYield's time slice (the kernel clamps it to
// 0.1-100 ms; the default is 0.75 ms times 1 + log2(CPUs)).
const yieldSlice = 20_000_000 // ns

// lowNice is what ClassLow adds to a thread's nice value (at most 19):
// a nice +10 thread weighs 110 to a nice 0 thread's 1024 in the
// kernel's fair share.
const lowNice = 10

var classNames = [...]string{ClassNormal: "normal", ClassLow: "low", ClassIdle: "idle", ClassYield: "yield"}

func (c ThreadClass) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return fmt.Sprintf("ThreadClass(%d)", c)
}

// ParseThreadClass reads normal, yield, low or idle.
func ParseThreadClass(s string) (ThreadClass, error) {
	for i, n := range classNames {
		if s == n {
			return ThreadClass(i), nil
		}
	}
	return ClassNormal, fmt.Errorf("compute thread class %q: use normal, yield, low or idle", s)
}

// computeClass is the process's class for compute threads
// (SetComputeClass); failed counts threads the OS refused to lower.
var (
	computeClass atomic.Uint32
	failed       atomic.Int64
)

// SetComputeClass sets the class of the compute threads started from now
// on: Parallels made after it and LockComputeThread calls. It first tries
// the class on a thread of its own; when the OS refuses (not Linux, a
// seccomp filter), it returns why and leaves the class normal. A binary
// calls it once at start; a test that sets it restores ClassNormal.
func SetComputeClass(c ThreadClass) error {
	if c == ClassNormal {
		computeClass.Store(uint32(ClassNormal))
		return nil
	}
	if int(c) >= len(classNames) {
		return fmt.Errorf("compute thread class %v: use normal, yield, low or idle", c)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the lowered thread ends with this goroutine
		errc <- setThreadClass(c)
	}()
	if err := <-errc; err != nil {
		computeClass.Store(uint32(ClassNormal))
		return fmt.Errorf("compute threads stay normal: setting class %v: %w", c, err)
	}
	computeClass.Store(uint32(c))
	return nil
}

// ComputeClass is the class SetComputeClass put in effect.
func ComputeClass() ThreadClass { return ThreadClass(computeClass.Load()) }

// lockedThreadClass is how LockComputeThread applies the class
// (setThreadClass; a test makes it fail).
var lockedThreadClass = setThreadClass

// ClassFailures counts compute threads that stayed normal because the OS
// refused their class after SetComputeClass's own try succeeded.
func ClassFailures() int64 { return failed.Load() }

// LockComputeThread puts the calling goroutine's thread in the compute
// class when it is not normal: the goroutine is locked to its thread for
// the rest of its life (the thread ends with it, never serving another
// goroutine lowered), and the goroutine must be one that drives forward
// passes, nothing latency-critical. It returns the class in effect.
func LockComputeThread() ThreadClass {
	c := ComputeClass()
	if c == ClassNormal {
		return ClassNormal
	}
	runtime.LockOSThread()
	if err := lockedThreadClass(c); err != nil {
		runtime.UnlockOSThread() // nothing changed: the thread may serve others
		failed.Add(1)
		return ClassNormal
	}
	return c
}
