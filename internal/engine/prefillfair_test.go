package engine

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// sleepy is the toy model with a forward step of about d: a prompt then
// holds prefill pages for a while, as a real model's does.
type sleepy struct {
	*toy
	d time.Duration
}

func (s *sleepy) NewForwarder(n int) Forwarder { return &sleepyFwd{s.d, s.toy.NewForwarder(n)} }

type sleepyFwd struct {
	d time.Duration
	f Forwarder
}

func (f *sleepyFwd) Forward(s []Step) []StepResult {
	time.Sleep(f.d)
	return f.f.Forward(s)
}

// Issue 30 item 1: the prefill pool is the tighter one (8 pages of 4
// tokens against decode's 256). Tenant a streams 3-token prompts from
// several loops, so a few prefill pages are busy at every moment; tenant
// b's one 30-token prompt needs the whole prefill pool. On the old
// free-for-all (every waiter woken on each release, whoever fits first
// wins) b never fit and failed after the prefill queue timeout with
// handoff_failed (502). The prefill side now waits as admission does:
// FIFO per tenant, DRR across tenants, head of line; so b's prompt, once
// at the head, holds back a's later prompts until the pool has room.
func TestPrefillPoolServesALargePromptUnderSmallPromptFlood(t *testing.T) {
	m := &sleepy{toy: newToy(), d: time.Millisecond}
	pcfg := toyConfig(m, 8)
	pcfg.QueueTimeout = 2 * time.Second
	dcfg := toyConfig(m, 256)
	loc, err := NewLocal(pcfg, dcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, loc)

	stop := make(chan struct{})
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				s, err := loc.Submit(context.Background(), &Request{Tenant: "a", Prompt: prompt(i*1000+n, 3), MaxTokens: 1})
				if err == nil {
					err = collect(t, s).final.Err
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				ok.Add(1)
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	// b arrives once a's flood is under way.
	deadline := time.Now().Add(30 * time.Second)
	for ok.Load() < 50 {
		if time.Now().After(deadline) {
			t.Fatalf("tenant a's flood never got going: %d succeeded, %d failed (%v)", ok.Load(), failed.Load(), firstErr.Load())
		}
		time.Sleep(time.Millisecond)
	}
	p := prompt(7, 30)
	s, err := loc.Submit(context.Background(), &Request{Tenant: "b", Prompt: p, MaxTokens: 2})
	if err == nil {
		r := collect(t, s)
		err = r.final.Err
		if err == nil && !slices.Equal(r.tokens, toyReference(m.toy, p, 2, false)) {
			t.Fatalf("b's tokens %v, want %v", r.tokens, toyReference(m.toy, p, 2, false))
		}
	}
	if err != nil {
		t.Fatalf("tenant b's 30-token prompt failed while tenant a streamed small prompts (%d succeeded): %v", ok.Load(), err)
	}
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d of tenant a's prompts failed: %v", n, firstErr.Load())
	}
}
