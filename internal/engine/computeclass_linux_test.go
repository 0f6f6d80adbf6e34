package engine

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"sluice/internal/kernels"
)

// policies wraps a Runtime and records the OS scheduling policy of the
// thread each forward pass runs on.
type policies struct {
	Runtime
	mu  sync.Mutex
	got map[int]int // policy -> forward passes
}

func (r *policies) NewForwarder(threads int) Forwarder {
	return hookForwarder(r.Runtime, threads, func(_ int, steps []Step, next func([]Step) []StepResult) []StepResult {
		b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(unix.Gettid()) + "/stat")
		policy := -1
		if err == nil {
			// Field 41 (policy), counted after the parenthesised name.
			if fs := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:])); len(fs) > 41-3 {
				policy, _ = strconv.Atoi(fs[41-3])
			}
		}
		r.mu.Lock()
		r.got[policy]++
		r.mu.Unlock()
		return next(steps)
	})
}

// Every scheduler loop (colocated, prefill, decode) drives its forward
// passes from a thread of the process's compute class: SCHED_IDLE under
// kernels.ClassIdle, normal under the default. The goroutines that wait
// on a pass's results are not the loop's, so they preempt it on waking.
func TestForwardPassesRunInComputeClass(t *testing.T) {
	for _, tc := range []struct {
		class  kernels.ThreadClass
		policy int
	}{{kernels.ClassIdle, unix.SCHED_IDLE}, {kernels.ClassNormal, unix.SCHED_NORMAL}} {
		t.Run(tc.class.String(), func(t *testing.T) {
			if err := kernels.SetComputeClass(tc.class); err != nil {
				t.Skipf("the OS refuses class %v here: %v", tc.class, err)
			}
			defer kernels.SetComputeClass(kernels.ClassNormal)
			rec := &policies{Runtime: newToy(), got: map[int]int{}}
			c, l := colocatedAndLocal(t, toyConfig(rec, 64), toyConfig(rec, 64), toyConfig(rec, 64))
			for _, e := range []Engine{c, l} {
				s, err := e.Submit(context.Background(), &Request{Tenant: "a", Prompt: prompt(1, 12), MaxTokens: 4, IgnoreEOS: true})
				if err != nil {
					t.Fatal(err)
				}
				collect(t, s)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if len(rec.got) != 1 || rec.got[tc.policy] == 0 {
				t.Fatalf("forward passes by thread policy %v, want all %d", rec.got, tc.policy)
			}
		})
	}
}
