package engine

import (
	"context"
	"sync"
	"testing"
	"time"
)

// cancelOnMove hands out pair a, then, to the request's next pairing (its
// migration), pair b after the client cancelled: the cancel lands between
// the engine's check that the client is still there and its use of the
// new pair. It counts the pairs handed out and the Done calls they got.
type cancelOnMove struct {
	a, b   Pair
	st     chan Stream
	mu     sync.Mutex
	out    int
	doneBy map[int]int
}

func (p *cancelOnMove) Pair(_ *Request, avoid []*Pair) (*Pair, error) {
	c := p.a
	if len(avoid) > 0 {
		(<-p.st).Cancel()
		c = p.b
	}
	p.mu.Lock()
	n := p.out
	p.out++
	p.mu.Unlock()
	c.Done = func(error, error) {
		p.mu.Lock()
		p.doneBy[n]++
		p.mu.Unlock()
	}
	return &c, nil
}

// Every pair a Pairer hands out is told its outcome (Done) exactly once,
// also the one paired for a migration the client's cancel made moot: a
// cluster counts a pair's workers busy until Done (its load scores, and a
// removed worker closes only when idle), so a pair never told leaks that
// count for good.
func TestMigrationCancelledTellsNewPair(t *testing.T) {
	m := newToy()
	mk := func() *Local {
		l, err := NewLocal(toyConfig(m, 40), toyConfig(m, 40))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeWithin(t, l) })
		return l
	}
	la, lb := mk(), mk()
	cp := &cancelOnMove{a: Pair{Prefill: la.Prefill, Decode: breakAfterFirst{la.Decode}}, b: Pair{Prefill: lb.Prefill, Decode: lb.Decode},
		st: make(chan Stream, 1), doneBy: map[int]int{}}
	d, err := NewDisaggregatedPairs(DisaggConfig{Model: "toy", Vocab: m.Vocab(), Fingerprint: FingerprintOf(m), Context: 160}, cp)
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, d)
	st, err := d.Submit(context.Background(), &Request{Tenant: "t", Prompt: prompt(3, 9), MaxTokens: 12})
	if err != nil {
		t.Fatal(err)
	}
	cp.st <- st
	got := collect(t, st)
	if len(got.tokens) != 1 {
		t.Fatalf("got %d tokens (%v); want the first, then the cancel", len(got.tokens), got.final.Err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		cp.mu.Lock()
		out, by := cp.out, map[int]int{}
		for k, v := range cp.doneBy {
			by[k] = v
		}
		cp.mu.Unlock()
		ok := out == 2
		for i := 0; i < out; i++ {
			if by[i] != 1 {
				ok = false
			}
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d pairs handed out, Done calls per pair %v; want each told once", out, by)
		}
		time.Sleep(5 * time.Millisecond)
	}
	waitFreePool(t, la.Decode.Pool())
	waitFreePool(t, lb.Decode.Pool())
}
