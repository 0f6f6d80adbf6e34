package grammar

import (
	"context"
	"errors"
	"testing"
)

// The lookup counters (Lookups, exported as sluice_grammar_cache_*_total
// and sluice_schema_check_cache_*_total) move exactly as each lookup was
// answered, in the workers' Cache and the router's Checks alike: a
// tenant's first lookup of a schema is a miss (it compiles), its next a
// hit; another tenant's identical schema a miss of its own (I11); a
// lookup that waited for the same tenant's concurrent compile a hit and
// a wait; one given up while it waited nothing at all; a refused schema
// a miss (kept by Checks, so its next lookup is a hit; not by Cache).
func TestLookupsCounted(t *testing.T) {
	type rig struct {
		get     func(ctx context.Context, tenant, schema string) (hit bool, err error)
		lookups func() Lookups
		waiting func() int
		// keepsRefusals: a refused schema's answer is kept (Checks).
		keepsRefusals bool
	}
	rigs := map[string]func(g *compileGate) rig{
		"cache": func(g *compileGate) rig {
			c := NewCache(testVocab(), 0)
			c.compile = g.hook(refusedSchema)
			return rig{
				get: func(ctx context.Context, tenant, schema string) (bool, error) {
					_, hit, err := c.Get(ctx, tenant, false, schema)
					return hit, err
				},
				lookups: c.Lookups,
				waiting: func() int { c.mu.Lock(); defer c.mu.Unlock(); return c.f.waiting },
			}
		},
		"checks": func(g *compileGate) rig {
			c := NewChecks(0, 0)
			c.compile = g.hook(refusedSchema)
			return rig{
				get: func(ctx context.Context, tenant, schema string) (bool, error) {
					_, hit, err := c.Check(ctx, tenant, []byte(schema))
					return hit, err
				},
				lookups:       c.Lookups,
				waiting:       func() int { c.mu.Lock(); defer c.mu.Unlock(); return c.f.waiting },
				keepsRefusals: true,
			}
		},
	}
	for name, mk := range rigs {
		t.Run(name, func(t *testing.T) {
			g := newCompileGate()
			close(g.gate)
			r := mk(g)
			step := func(what string, want Lookups) {
				t.Helper()
				if got := r.lookups(); got != want {
					t.Fatalf("after %s: %+v, want %+v", what, got, want)
				}
			}
			step("nothing", Lookups{})
			s1 := `{"type":"integer"}`
			if hit, err := r.get(t.Context(), "A", s1); err != nil || hit {
				t.Fatalf("A's first lookup: hit %v, %v", hit, err)
			}
			step("A's first lookup", Lookups{Misses: 1})
			if hit, err := r.get(t.Context(), "A", s1); err != nil || !hit {
				t.Fatalf("A's second lookup: hit %v, %v", hit, err)
			}
			step("A's second lookup", Lookups{Hits: 1, Misses: 1})
			if hit, err := r.get(t.Context(), "B", s1); err != nil || hit {
				t.Fatalf("B's lookup of A's schema: hit %v, %v", hit, err)
			}
			step("B's lookup of the same schema", Lookups{Hits: 1, Misses: 2})

			// A compile held open: one lookup waits for it and is answered
			// by it, another waits and is given up.
			drain(g.entered)
			g.reopen()
			s2 := `{"type":"string"}`
			type answer struct {
				hit bool
				err error
			}
			lookup := func(ctx context.Context) chan answer {
				ch := make(chan answer, 1)
				go func() {
					hit, err := r.get(ctx, "A", s2)
					ch <- answer{hit, err}
				}()
				return ch
			}
			leader := lookup(t.Context())
			<-g.entered
			waiter := lookup(t.Context())
			ctx, cancel := context.WithCancel(t.Context())
			gone := lookup(ctx)
			waitFor(t, "two lookups to wait", func() bool { return r.waiting() == 2 })
			cancel()
			if a := <-gone; !errors.Is(a.err, context.Canceled) {
				t.Fatalf("the lookup given up: %+v", a)
			}
			step("a lookup given up while it waited", Lookups{Hits: 1, Misses: 3})
			close(g.gate)
			if a := <-leader; a.err != nil || a.hit {
				t.Fatalf("the compiling lookup: %+v", a)
			}
			if a := <-waiter; a.err != nil || !a.hit {
				t.Fatalf("the waiting lookup: %+v", a)
			}
			step("a lookup answered by the compile it waited for", Lookups{Hits: 2, Waits: 1, Misses: 3})

			// A refused schema compiles (a miss); Checks keeps the refusal.
			for i := range 2 {
				if _, err := r.get(t.Context(), "A", refusedSchema); err == nil {
					t.Fatal("a refused schema was accepted")
				}
				want := Lookups{Hits: 2, Waits: 1, Misses: 4 + int64(i)}
				if i == 1 && r.keepsRefusals {
					want = Lookups{Hits: 3, Waits: 1, Misses: 4}
				}
				step("a refused schema", want)
			}
		})
	}
}

// drain empties ch of what it holds now.
func drain(ch chan string) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// refusedSchema is a schema TestLookupsCounted's compile hook refuses.
const refusedSchema = `{"type":"boolean"}`
