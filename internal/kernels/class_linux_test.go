package kernels

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// threadSched reads a thread's scheduling policy (SCHED_* number), nice
// value and custom time slice (sched_getattr's runtime, 0 when default).
func threadSched(t testing.TB, tid int) (policy, nice int, slice uint64) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name, which is in parentheses and may
	// hold spaces: state is field 3, nice 19, policy 41.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	nice, _ = strconv.Atoi(f[19-3])
	policy, _ = strconv.Atoi(f[41-3])
	a, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		t.Fatal(err)
	}
	if a.Runtime != yieldSlice {
		// Threads without a custom slice report the default one (0.75
		// ms times 1 + log2(CPUs)): 0 here.
		a.Runtime = 0
	}
	return policy, nice, a.Runtime
}

// baseNice is the nice value the test process runs at (`nice go test`):
// every class keeps it, low adds to it. It is read from the caller's
// thread, not the process's main one: a goroutine that lowered its
// thread and ended locked may have been on the main thread, which Go
// then parks for good rather than end.
func baseNice(t testing.TB) int {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_, nice, _ := threadSched(t, unix.Gettid())
	return nice
}

// wantNice is the nice value class tc gives a thread of a process at base.
func wantNice(base, add int) int { return min(base+add, maxNice) }

// withClass runs the test with compute class c, normal again after.
func withClass(t *testing.T, c ThreadClass) {
	t.Helper()
	if err := SetComputeClass(c); err != nil {
		if c == ClassYield && kernelBefore(6, 12) {
			t.Skipf("class yield needs Linux 6.12: %v", err)
		}
		t.Fatal(err) // lowering one's own thread needs no privilege
	}
	t.Cleanup(func() { SetComputeClass(ClassNormal) })
}

// classCases are what each class sets on a thread: its policy, what it
// adds to the thread's nice value and its EEVDF slice
// (sched_attr.sched_runtime).
var classCases = []struct {
	class        ThreadClass
	policy, nice int
	slice        uint64
}{
	{ClassIdle, unix.SCHED_IDLE, 0, 0},
	{ClassLow, unix.SCHED_NORMAL, lowNice, 0},
	{ClassYield, unix.SCHED_NORMAL, 0, yieldSlice},
	{ClassNormal, unix.SCHED_NORMAL, 0, 0},
}

// A Parallel made under a compute class runs its workers' chunks on
// threads of that class (SCHED_IDLE, nice +10, a 20 ms slice), and one made under the
// normal class on normal threads; the caller's thread keeps its own.
func TestParallelWorkersRunInComputeClass(t *testing.T) {
	for _, tc := range classCases {
		t.Run(tc.class.String(), func(t *testing.T) {
			base := baseNice(t)
			withClass(t, tc.class)
			p := NewParallel(3)
			defer p.Close()
			runtime.LockOSThread() // the caller's chunks run on this thread
			defer runtime.UnlockOSThread()
			caller := unix.Gettid()
			var mu sync.Mutex
			seen := map[int]bool{} // tid -> ran a chunk
			// Workers started with the pool may join only a later loop:
			// loop until one has run a chunk. Each chunk waits a little
			// for a worker to take one, so a loop does not end on the
			// caller alone.
			others := func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(seen) > 1 || len(seen) == 1 && !seen[caller]
			}
			for deadline := time.Now().Add(20 * time.Second); !others() && time.Now().Before(deadline); {
				p.For(12, func(lo, hi int) {
					mu.Lock()
					seen[unix.Gettid()] = true
					mu.Unlock()
					for wait := time.Now().Add(time.Millisecond); !others() && time.Now().Before(wait); {
						time.Sleep(50 * time.Microsecond)
					}
				})
			}
			workers := 0
			for tid := range seen {
				policy, nice, slice := threadSched(t, tid)
				if tid == caller {
					if policy != unix.SCHED_NORMAL || nice != base || slice != 0 {
						t.Errorf("caller's thread: policy %d nice %d slice %d, want its own (0, %d, 0)", policy, nice, slice, base)
					}
					continue
				}
				workers++
				if want := wantNice(base, tc.nice); policy != tc.policy || nice != want || slice != tc.slice {
					t.Errorf("worker thread %d: policy %d nice %d slice %d, want %d, %d, %d", tid, policy, nice, slice, tc.policy, want, tc.slice)
				}
			}
			if workers == 0 {
				t.Fatal("no worker ran a chunk")
			}
		})
	}
}

// LockComputeThread lowers the calling goroutine's thread to the class in
// effect, and does nothing (no lock, normal thread) under the normal one.
func TestLockComputeThread(t *testing.T) {
	for _, tc := range classCases {
		t.Run(tc.class.String(), func(t *testing.T) {
			base := baseNice(t)
			withClass(t, tc.class)
			type got struct {
				class, policy, nice int
				slice               uint64
			}
			ch := make(chan got)
			go func() {
				c := LockComputeThread()
				policy, nice, slice := threadSched(t, unix.Gettid())
				ch <- got{int(c), policy, nice, slice}
			}()
			g := <-ch
			if want := wantNice(base, tc.nice); g.class != int(tc.class) || g.policy != tc.policy || g.nice != want || g.slice != tc.slice {
				t.Errorf("LockComputeThread under %v: class %d, thread policy %d nice %d slice %d; want %d, %d, %d, %d",
					tc.class, g.class, g.policy, g.nice, g.slice, tc.class, tc.policy, want, tc.slice)
			}
		})
	}
}

// A class keeps the nice value the thread came with (an operator's
// `nice sluice serve`) and low lowers from it: the thread here is niced
// three more than the test process before it takes its class, so this
// holds whatever nice the suite runs at.
func TestComputeClassKeepsThreadNice(t *testing.T) {
	for _, tc := range classCases {
		if tc.class == ClassNormal {
			continue
		}
		t.Run(tc.class.String(), func(t *testing.T) {
			from := min(baseNice(t)+3, maxNice)
			withClass(t, tc.class)
			type got struct{ class, nice int }
			ch := make(chan got)
			go func() {
				runtime.LockOSThread() // never unlocked: the niced thread ends with this goroutine
				tid := unix.Gettid()
				if err := unix.Setpriority(unix.PRIO_PROCESS, tid, from); err != nil {
					t.Error(err)
				}
				c := LockComputeThread()
				_, nice, _ := threadSched(t, tid)
				ch <- got{int(c), nice}
			}()
			g := <-ch
			if want := wantNice(from, tc.nice); g.class != int(tc.class) || g.nice != want {
				t.Errorf("a thread at nice %d taking class %v: class %d, nice %d; want nice %d", from, tc.class, g.class, g.nice, want)
			}
		})
	}
}

func TestParseThreadClass(t *testing.T) {
	for _, c := range []ThreadClass{ClassNormal, ClassYield, ClassLow, ClassIdle} {
		if got, err := ParseThreadClass(c.String()); err != nil || got != c {
			t.Errorf("ParseThreadClass(%q) = %v, %v", c.String(), got, err)
		}
	}
	if _, err := ParseThreadClass("realtime"); err == nil {
		t.Error("ParseThreadClass(realtime): no error")
	}
}

// kernelBefore reports whether the running Linux kernel is older than
// major.minor.
func kernelBefore(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return true
	}
	var ma, mi int
	fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi)
	return ma < major || ma == major && mi < minor
}
