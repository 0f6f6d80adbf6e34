package node

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/engine"
	"sluice/internal/model"
	"sluice/internal/router"
)

// Issue 30 item 1 through the HTTP stack: one prefill worker whose pool
// holds one context (the tighter pool) and four decode workers, every
// link TCP. Tenant a streams prompts of 1-2 pages from 32 clients; tenant b's
// one long prompt needs the whole prefill pool. On the old prefill
// free-for-all it never fit and failed with 502 handoff_failed after the
// prefill queue timeout; with the prefill queue's discipline (FIFO per
// tenant, DRR across tenants, head of line) it is served, and its text is
// the one the same request gets alone.
func TestPrefillPoolFairThroughHTTPOnePrefillFourDecode(t *testing.T) {
	m := loadStories(t)
	keys, err := router.ParseKeys(strings.NewReader("key-a alice\nkey-b bob\n"))
	if err != nil {
		t.Fatal(err)
	}
	long := job{prompt: strings.Repeat("Once upon a time. ", 48), max: 8}
	cfg := LocalConfig{Transport: TransportTCP, PrefillWorkers: 1, DecodeWorkers: 4,
		Pools: Pools{Context: 256, PoolTokens: 1024},
		Engine: func(role string, c *engine.Config) {
			if role == "prefill" {
				c.PoolPages = 256 / c.PageSize
				c.QueueTimeout = 2 * time.Second
				// A prefill step of about a millisecond, as a real
				// model's: prompts hold prefill pages for a while.
				c.Model = slowSteps{Runtime: c.Model, d: time.Millisecond}
				// Small steps: a's prompts of different lengths end at
				// different steps, so some of its pages are always busy.
				c.ChunkTokens, c.StepTokens = 16, 32
			}
		}}
	s := serve(t, m, cfg, keys)
	want, err := complete(context.Background(), clientFor(s, "key-b"), long)
	if err != nil {
		t.Fatalf("the long prompt alone: %v", err)
	}
	t.Logf("long prompt: %d tokens", want.usage.PromptTokens)
	if want.usage.PromptTokens <= 240 {
		t.Fatalf("the long prompt has %d tokens: it must need the whole prefill pool (16 pages of 16)", want.usage.PromptTokens)
	}

	stop := make(chan struct{})
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clientFor(s, "key-a")
			for {
				select {
				case <-stop:
					return
				default:
				}
				small := job{prompt: strings.Repeat("Once upon a time. ", 1+i%5), max: 1}
				if _, err := complete(context.Background(), c, small); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				ok.Add(1)
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for ok.Load() < 100 {
		if time.Now().After(deadline) {
			t.Fatalf("tenant a's flood never got going: %d succeeded, %d failed (%v)", ok.Load(), failed.Load(), firstErr.Load())
		}
		time.Sleep(time.Millisecond)
	}
	got, err := complete(context.Background(), clientFor(s, "key-b"), long)
	if err != nil {
		t.Fatalf("tenant b's %d-token prompt failed while tenant a streamed short prompts (%d succeeded): %v", want.usage.PromptTokens, ok.Load(), err)
	}
	if got.text != want.text {
		t.Fatalf("b's text under load %q, alone %q", got.text, want.text)
	}
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d of tenant a's prompts failed: %v", n, firstErr.Load())
	}
}

// slowSteps is a model whose every forward step takes at least d longer.
type slowSteps struct {
	engine.Runtime
	d time.Duration
}

func (s slowSteps) Fingerprint() model.Fingerprint { return engine.FingerprintOf(s.Runtime) }

func (s slowSteps) NewForwarder(n int) engine.Forwarder {
	return slowFwd{s.Runtime.NewForwarder(n), s.d}
}

type slowFwd struct {
	f engine.Forwarder
	d time.Duration
}

func (f slowFwd) Forward(steps []engine.Step) []engine.StepResult {
	time.Sleep(f.d)
	return f.f.Forward(steps)
}
