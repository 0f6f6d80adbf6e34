package grammar

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The router's cache of schema checks answers a tenant's schema from
// memory the second time, refusals included, and never from another
// tenant's check; it reports $ref use as the compiler found it; and it is
// bounded like the workers' grammar cache: a tenant past its bytes drops
// its own oldest checks, and past the total the heaviest tenant gives up
// room, never the light tenant holding less than the others.
func TestChecksCachedPerTenant(t *testing.T) {
	c := NewChecks(0, 0)
	ref := []byte(`{"$defs":{"s":{"type":"string"}},"$ref":"#/$defs/s"}`)
	named := []byte(`{"type":"object","properties":{"$ref":{"type":"string"}}}`)
	bad := []byte(`{"type":"string","pattern":"^(a?)*$"}`)
	for i, s := range []struct {
		tenant         string
		schema         []byte
		usesRef, hit   bool
		code           string
		hitsN, missesN int64
	}{
		{"A", ref, true, false, "", 0, 1},
		{"A", ref, true, true, "", 1, 1},
		{"B", ref, true, false, "", 1, 2},
		{"A", named, false, false, "", 1, 3},
		{"A", bad, false, false, "unsupported_schema", 1, 4},
		{"A", bad, false, true, "unsupported_schema", 2, 4},
		{"B", bad, false, false, "unsupported_schema", 2, 5},
	} {
		usesRef, hit, err := c.Check(t.Context(), s.tenant, s.schema)
		var ge *Error
		if usesRef != s.usesRef || hit != s.hit || (s.code == "") != (err == nil) || (err != nil && (!errors.As(err, &ge) || ge.Code != s.code)) {
			t.Fatalf("step %d: usesRef %v hit %v err %v, want %v %v %q", i, usesRef, hit, err, s.usesRef, s.hit, s.code)
		}
		if h, m := c.Stats(); h != s.hitsN || m != s.missesN {
			t.Fatalf("step %d: %d hits %d misses, want %d %d", i, h, m, s.hitsN, s.missesN)
		}
	}

	c = NewChecks(10*checkEntryBytes+checkEntryBytes/2, 30*checkEntryBytes+checkEntryBytes/2)
	light := []byte(`{"const":"light"}`)
	if _, _, err := c.Check(t.Context(), "a-light", light); err != nil {
		t.Fatal(err)
	}
	for i := range 25 {
		for _, h := range []string{"h1", "h2", "h3", "h4"} {
			if _, _, err := c.Check(t.Context(), h, fmt.Appendf(nil, `{"const":%d}`, i)); err != nil {
				t.Fatal(err)
			}
			c.mu.Lock()
			over := c.l.held[h] > c.l.tenantBytes || c.l.bytes > c.l.maxBytes
			lightHeld := c.l.count("a-light")
			c.mu.Unlock()
			if over {
				t.Fatalf("%s's check %d: past a bound (%d bytes held, %d in all)", h, i, c.l.held[h], c.l.bytes)
			}
			if lightHeld != 1 {
				t.Fatalf("%s's check %d evicted the light tenant's", h, i)
			}
		}
	}
	if _, hit, _ := c.Check(t.Context(), "a-light", light); !hit {
		t.Fatal("the light tenant's check was not kept")
	}
	if _, hit, _ := c.Check(t.Context(), "h1", []byte(`{"const":0}`)); hit {
		t.Fatal("h1's oldest check was kept past its own bound")
	}
}

// BenchmarkSchemaCheck compares the router's check of a 60 KB schema
// compiled every time (what it did per request) with the same check
// answered by Checks (what a tenant's repeated schema now costs).
func BenchmarkSchemaCheck(b *testing.B) {
	var props []string
	for i := 0; len(strings.Join(props, ",")) < 60<<10; i++ {
		props = append(props, fmt.Sprintf(`"p%d":{"type":"string","pattern":"^[a-z]{1,%d}(-[a-z0-9]+)*$"}`, i, 2+i%16))
	}
	schema := []byte(`{"type":"object","properties":{` + strings.Join(props, ",") + `},"additionalProperties":false}`)
	if _, err := CompileSchema(schema); err != nil {
		b.Fatal(err)
	}
	b.Logf("schema of %d bytes", len(schema))
	b.Run("compile", func(b *testing.B) {
		for b.Loop() {
			if _, err := CompileSchema(schema); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		c := NewChecks(0, 0)
		c.Check(b.Context(), "A", schema)
		for b.Loop() {
			if _, hit, err := c.Check(b.Context(), "A", schema); err != nil || !hit {
				b.Fatal(err, hit)
			}
		}
	})
}

// Concurrent checks of one tenant's schema that miss while its compile
// runs wait for that compile: N of them compile once, and all get its
// answer. Another tenant's check of the same schema compiles on its own
// (I11: no tenant waits on, or learns from, another's compile), a waiter
// whose request ends stops waiting, and a compile that panics leaves its
// waiters to compile themselves rather than hang.
func TestChecksConcurrentMissesCompileOnce(t *testing.T) {
	c := NewChecks(0, 0)
	g := newCompileGate()
	c.compile = g.hook("")
	entered := g.entered
	count := func(schema []byte) int { return g.count(string(schema)) }
	waiting := func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.f.waiting
	}
	type answer struct {
		usesRef, hit bool
		err          error
	}
	check := func(ctx context.Context, tenant string, schema []byte) chan answer {
		ch := make(chan answer, 1)
		go func() {
			defer func() {
				if p := recover(); p != nil {
					ch <- answer{err: fmt.Errorf("panic: %v", p)}
				}
			}()
			u, h, err := c.Check(ctx, tenant, schema)
			ch <- answer{u, h, err}
		}()
		return ch
	}

	schema := []byte(`{"$defs":{"s":{"type":"string"}},"$ref":"#/$defs/s"}`)
	const n = 8
	first := check(t.Context(), "A", schema)
	<-entered
	var rest []chan answer
	for range n - 1 {
		rest = append(rest, check(t.Context(), "A", schema))
	}
	waitFor(t, "A's checks to wait", func() bool { return waiting() == n-1 || count(schema) > 1 })
	if got := count(schema); got != 1 {
		t.Fatalf("%d concurrent checks of one schema compiled it %d times, want once", n, got)
	}
	// B's check of the same text compiles while A's compile still runs.
	other := check(t.Context(), "B", schema)
	<-entered
	if got := count(schema); got != 2 {
		t.Fatalf("another tenant's check compiled %d times in all, want 2 (its own)", got)
	}
	// A waiter whose request ends returns its context's error, not the
	// answer it no longer needs.
	ctx, cancel := context.WithCancel(t.Context())
	gone := check(ctx, "A", schema)
	waitFor(t, "the cancelled check to wait", func() bool { return waiting() == n })
	cancel()
	select {
	case a := <-gone:
		if !errors.Is(a.err, context.Canceled) {
			t.Fatalf("cancelled waiter: %+v, want context.Canceled", a)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiter whose context ended kept waiting for the compile")
	}
	close(g.gate)
	for i, ch := range append([]chan answer{first, other}, rest...) {
		a := <-ch
		if a.err != nil || !a.usesRef || a.hit != (i >= 2) {
			t.Fatalf("check %d: %+v", i, a)
		}
	}
	if h, m := c.Stats(); h != n-1 || m != 2 {
		t.Fatalf("%d hits %d misses, want %d and 2", h, m, n-1)
	}

	// A compile that panics: its waiter compiles the schema itself.
	c.compile = g.panicFirst(func() { waitFor(t, "the check to wait", func() bool { return waiting() == 1 }) })
	boom := []byte(`{"const":"boom"}`)
	leader := check(t.Context(), "A", boom)
	waitFor(t, "the compile", func() bool { return count(boom) == 1 })
	waiter := check(t.Context(), "A", boom)
	if a := <-leader; a.err == nil || !strings.Contains(a.err.Error(), "panic") {
		t.Fatalf("leader: %+v, want its panic", a)
	}
	select {
	case a := <-waiter:
		if a.err != nil || a.hit || count(boom) != 2 {
			t.Fatalf("waiter of a panicked compile: %+v after %d compiles, want its own compile's answer", a, count(boom))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiter of a panicked compile kept waiting")
	}
}
