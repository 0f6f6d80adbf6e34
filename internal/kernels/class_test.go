package kernels

import (
	"errors"
	"testing"
)

// A compute thread the OS refuses its class (after SetComputeClass's own
// try succeeded) stays normal, unlocked, and is counted: ClassFailures is
// what sluice_compute_class_failures_total exports.
func TestLockComputeThreadCountsRefusal(t *testing.T) {
	defer func(c uint32, set func(ThreadClass) error) {
		computeClass.Store(c)
		lockedThreadClass = set
	}(computeClass.Load(), lockedThreadClass)
	computeClass.Store(uint32(ClassLow))
	lockedThreadClass = func(ThreadClass) error { return errors.New("refused") }
	before := ClassFailures()
	got := make(chan ThreadClass)
	go func() { got <- LockComputeThread() }()
	if c := <-got; c != ClassNormal {
		t.Errorf("refused thread: class %v, want normal", c)
	}
	if n := ClassFailures() - before; n != 1 {
		t.Errorf("ClassFailures grew by %d, want 1", n)
	}
}
