package grammar

import (
	"context"
	"sync"
)

// flights are the compiles a cache runs now, by key, so that lookups of
// one key that miss while its compile runs wait for it instead of starting
// their own: a tenant sending the same large schema in many concurrent
// requests compiles it once. Checks (the router's) and Cache (the
// workers') both answer through it. Their keys hold the tenant (cacheKey),
// so only a tenant's own requests ever wait on each other (I11). The
// cache's mutex guards every field.
type flights[V any] struct {
	calls map[[32]byte]*flight[V]
	// waiting is how many lookups wait for another's compile now.
	waiting int
	// hits counts the lookups answered without a compile of their own
	// (kept, or waited for another lookup's compile), waits those of
	// them answered by the compile they waited for; misses the compiles.
	hits, waits, misses int64
}

// Lookups counts a cache's lookups (Cache.Get, Checks.Check) by how each
// was answered. A lookup given up while it waited for a compile (its
// context ended) is in none of them.
type Lookups struct {
	// Hits were answered without a compile of their own: an entry the
	// cache kept, or, Waits of them, the compile of a concurrent lookup
	// of the same key (the same tenant and schema, I11) that they waited
	// for.
	Hits, Waits int64
	// Misses compiled the schema themselves (a refused schema too).
	Misses int64
}

func (f *flights[V]) lookups() Lookups {
	return Lookups{Hits: f.hits, Waits: f.waits, Misses: f.misses}
}

// flight is one compile running for a key. done is closed when it ends;
// ok then says it returned (v is its answer) rather than panicked.
type flight[V any] struct {
	done chan struct{}
	ok   bool
	v    V
}

// do answers key k, taking mu itself: kept (called with mu held) returns
// an answer the cache keeps; failing that, a compile of k running now is
// waited for until it ends or ctx does (then do returns ctx's error);
// failing that, do runs compile itself, without mu, and keep (mu held)
// stores its answer before the waiters are released. hit reports that the
// answer came without a compile of this call's own. A compile that panics
// releases its waiters to look again (and compile, as a lookup with no
// cache would); the panic goes on up its own call.
func (f *flights[V]) do(ctx context.Context, mu *sync.Mutex, k [32]byte, kept func() (V, bool), compile func() V, keep func(V)) (v V, hit bool, err error) {
	for {
		mu.Lock()
		if v, ok := kept(); ok {
			f.hits++
			mu.Unlock()
			return v, true, nil
		}
		call, ok := f.calls[k]
		if !ok {
			break // mu still held: this lookup compiles
		}
		f.waiting++
		mu.Unlock()
		var done bool
		select {
		case <-call.done:
			done = true
		case <-ctx.Done():
		}
		mu.Lock()
		f.waiting--
		if done && call.ok {
			f.hits++
			f.waits++
			mu.Unlock()
			return call.v, true, nil
		}
		mu.Unlock()
		if !done {
			return v, false, ctx.Err()
		}
		// The compile panicked: look again.
	}
	call := &flight[V]{done: make(chan struct{})}
	if f.calls == nil {
		f.calls = map[[32]byte]*flight[V]{}
	}
	f.calls[k] = call
	f.misses++
	mu.Unlock()
	// The waiters are released however the compile ends (a panic leaves
	// call.ok false).
	defer func() {
		mu.Lock()
		delete(f.calls, k)
		if call.ok {
			keep(call.v)
		}
		mu.Unlock()
		close(call.done)
	}()
	call.v = compile()
	call.ok = true
	return call.v, false, nil
}
