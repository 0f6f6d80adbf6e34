package engine

import (
	"runtime"
	"testing"
	"time"

	"sluice/internal/kv"
	"sluice/internal/sample"
)

// spinToy is the toy whose steps compute without blocking for a while,
// as a model's forward pass does.
type spinToy struct{ *toy }

func (m spinToy) NewForwarder(n int) Forwarder { return spinFwd{m.toy.NewForwarder(n)} }

type spinFwd struct{ Forwarder }

func (f spinFwd) Forward(steps []Step) []StepResult {
	for t0 := time.Now(); time.Since(t0) < time.Millisecond; {
	}
	return f.Forwarder.Forward(steps)
}

// A decode worker's token reader runs before the step after the one
// that emitted the token: the scheduler goroutine yields its thread
// after a turn that emitted, so the goroutine the token woke (the
// handoff server's stream writer, readied on that thread) is not left
// waiting for another thread while the next step computes. Counted on one P, where nothing else can run
// the reader: without the yield it runs only when the Go scheduler
// preempts the stepping goroutine (every 10 ms: ~1 token of 10) or the
// batch empties. The Go scheduler takes the global queue first on one
// schedule in 61, which may put the stepping goroutine ahead of the
// reader, so the test asks for most tokens, not all.
func TestSchedulerYieldsToReadersAfterEmitting(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	w, err := NewDecodeWorker(toyConfig(spinToy{newToy()}, 64))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// The sequence joins the worker's batch directly: what is counted is
	// the scheduler's loop, not the protocol before it.
	cfg, pool, s := w.cfg, w.pool, w.sched
	const n = 40
	owner := kv.Owner{Tenant: "b", ID: newID()}
	p := prompt(1, 3)
	table, err := pool.Reserve(owner, kv.PagesFor(len(p)+n, cfg.PageSize))
	if err != nil {
		t.Fatal(err)
	}
	samp, err := cfg.formats.sampler("b", sample.Params{}, p)
	if err != nil {
		t.Fatal(err)
	}
	q := colocatedSeq(owner, table, p, 0, n, true, samp)
	type item struct {
		step int64 // the scheduler's step count when the item was emitted
		done bool
	}
	ch := make(chan item, n+2)
	q.emit = func(o outcome) { ch <- item{s.steps.Load(), o.done || o.err != nil} } // on the scheduler goroutine
	type seen struct{ emitted, read int64 }
	got := make(chan []seen, 1)
	go func() {
		var r []seen
		for it := range ch {
			if it.done {
				break
			}
			r = append(r, seen{it.step, s.steps.Load()})
		}
		got <- r
	}()
	s.add(q)
	var r []seen
	select {
	case r = <-got:
	case <-time.After(time.Minute):
		t.Fatal("the sequence did not end")
	}
	if len(r) != n {
		t.Fatalf("%d tokens, want %d", len(r), n)
	}
	inStep := 0
	for _, x := range r {
		if x.read == x.emitted {
			inStep++
		}
	}
	if inStep < 3*n/4 {
		t.Fatalf("%d of %d tokens read before the next step started, want at least %d: %v", inStep, n, 3*n/4, r)
	}
	t.Logf("%d of %d tokens read before the next step", inStep, n)
}
