package grammar

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The workers' grammar cache, as the router's checks (Checks): concurrent
// Gets of one tenant's schema that miss while its compile runs wait for
// that compile, so N identical first requests compile it once and share
// the grammar. Another tenant's identical schema compiles on its own
// (I11), a waiter whose request ends stops waiting, a compile error
// reaches its waiters (and is not kept), and a compile that panics leaves
// its waiters to compile themselves.
func TestCacheConcurrentMissesCompileOnce(t *testing.T) {
	c := NewCache(testVocab(), 0)
	g := newCompileGate()
	c.compile = g.hook("")
	count, entered := g.count, g.entered
	waiting := func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.f.waiting
	}
	type answer struct {
		comp *Compiled
		hit  bool
		err  error
	}
	get := func(ctx context.Context, tenant, schema string) chan answer {
		ch := make(chan answer, 1)
		go func() {
			defer func() {
				if p := recover(); p != nil {
					ch <- answer{err: fmt.Errorf("panic: %v", p)}
				}
			}()
			comp, hit, err := c.Get(ctx, tenant, false, schema)
			ch <- answer{comp, hit, err}
		}()
		return ch
	}

	schema := `{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false}`
	const n = 8
	first := get(t.Context(), "A", schema)
	<-entered
	var rest []chan answer
	for range n - 1 {
		rest = append(rest, get(t.Context(), "A", schema))
	}
	waitFor(t, "A's Gets to wait", func() bool { return waiting() == n-1 || count(schema) > 1 })
	if got := count(schema); got != 1 {
		t.Fatalf("%d concurrent Gets of one schema compiled it %d times, want once", n, got)
	}
	// B's Get of the same text compiles while A's compile still runs.
	other := get(t.Context(), "B", schema)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("tenant B's Get did not compile on its own: it waits for tenant A's compile (I11)")
	}
	if got := count(schema); got != 2 {
		t.Fatalf("another tenant's Get compiled %d times in all, want 2 (its own)", got)
	}
	// A waiter whose request ends returns its context's error.
	ctx, cancel := context.WithCancel(t.Context())
	gone := get(ctx, "A", schema)
	waitFor(t, "the cancelled Get to wait", func() bool { return waiting() == n })
	cancel()
	select {
	case a := <-gone:
		if !errors.Is(a.err, context.Canceled) || a.comp != nil {
			t.Fatalf("cancelled waiter: %+v, want context.Canceled", a)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiter whose context ended kept waiting for the compile")
	}
	close(g.gate)
	a0, b := <-first, <-other
	if a0.err != nil || a0.hit || a0.comp == nil || b.err != nil || b.hit || b.comp == nil {
		t.Fatalf("the compiles: A %+v, B %+v", a0, b)
	}
	if a0.comp == b.comp || b.comp.tenant != "B" {
		t.Fatal("tenant B got tenant A's compiled grammar")
	}
	for i, ch := range rest {
		if a := <-ch; a.err != nil || !a.hit || a.comp != a0.comp {
			t.Fatalf("waiter %d: %+v, want the compile's grammar", i, a)
		}
	}
	if h, m := c.Stats(); h != n-1 || m != 2 {
		t.Fatalf("%d hits %d misses, want %d and 2", h, m, n-1)
	}
	if comp, hit, err := c.Get(t.Context(), "A", false, schema); err != nil || !hit || comp != a0.comp {
		t.Fatalf("A's grammar was not kept: hit %v err %v", hit, err)
	}

	// A refused schema: the waiters get the compile's error, which is not
	// kept (the next Get compiles again).
	bad := `{"type":"object","minProperties":1,"patternProperties":{"a":{}}}`
	g.reopen()
	c.compile = g.hook(bad)
	leader := get(t.Context(), "A", bad)
	<-entered
	waiter := get(t.Context(), "A", bad)
	waitFor(t, "the Get of a refused schema to wait", func() bool { return waiting() == 1 })
	close(g.gate)
	for _, ch := range []chan answer{leader, waiter} {
		var ge *Error
		if a := <-ch; !errors.As(a.err, &ge) || ge.Code != "unsupported_schema" || a.comp != nil {
			t.Fatalf("refused schema: %+v", a)
		}
	}
	if a := <-get(t.Context(), "A", bad); a.err == nil || a.hit {
		t.Fatalf("a refused schema again: %+v, want its own compile's error", a)
	}
	if got := count(bad); got != 2 {
		t.Fatalf("a refused schema compiled %d times, want 2 (errors are not kept)", got)
	}

	// A compile that panics: its waiter compiles the schema itself.
	c.compile = g.panicFirst(func() { waitFor(t, "the Get to wait", func() bool { return waiting() == 1 }) })
	boom := `{"const":"boom"}`
	first = get(t.Context(), "A", boom)
	waitFor(t, "the compile", func() bool { return count(boom) == 1 })
	second := get(t.Context(), "A", boom)
	if a := <-first; a.err == nil || !strings.Contains(a.err.Error(), "panic") {
		t.Fatalf("leader: %+v, want its panic", a)
	}
	select {
	case a := <-second:
		if a.err != nil || a.hit || a.comp == nil || count(boom) != 2 {
			t.Fatalf("waiter of a panicked compile: %+v after %d compiles, want its own compile's grammar", a, count(boom))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiter of a panicked compile kept waiting")
	}
}
