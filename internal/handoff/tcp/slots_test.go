package tcp

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
)

// The fair slot rule under random takes, puts and withdrawals (seeded):
//   - the books hold: slots in use = slots held, never above the bound,
//     and a call waits only while every slot is used;
//   - within a tenant, calls get slots in arrival order;
//   - a freed slot goes to a tenant holding no more than any waiting
//     tenant, and while a tenant waits, each other tenant gets at most one
//     slot at which it held exactly as many (one slot's turn each);
//   - nothing waits forever: once every holder gives its slots back, every
//     waiting call has had one.
func TestSlotsProperty(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 7))
		capN := 1 + rng.IntN(6)
		tenants := []string{"a", "b", "c", "d"}[:1+rng.IntN(4)]
		s := newSlots(capN)
		type held struct {
			tenant string
		}
		var holding []held
		waiting := map[string][]uint64{} // the test's own books
		// ties[u][t]: slots t got while u waited, holding as many as u.
		ties := map[string]map[string]int{}
		check := func(where string) {
			used := 0
			for _, n := range s.held {
				used += n
			}
			if used != s.used || used != len(holding) || used > capN {
				t.Fatalf("seed %d %s: used %d, held %v (%d calls hold), bound %d", seed, where, s.used, s.held, len(holding), capN)
			}
			n := 0
			for _, q := range waiting {
				n += len(q)
			}
			if n > 0 && s.used != capN {
				t.Fatalf("seed %d %s: %d calls wait with %d of %d slots used", seed, where, n, s.used, capN)
			}
		}
		granted := func(ticket uint64, to string, before map[string]int) {
			q := waiting[to]
			if len(q) == 0 || q[0] != ticket {
				t.Fatalf("seed %d: ticket %d of %s granted, its oldest waiting is %v", seed, ticket, to, q)
			}
			waiting[to] = q[1:]
			holding = append(holding, held{to})
			for u, uq := range waiting {
				if u == to || len(uq) == 0 {
					continue
				}
				if before[to] > before[u] {
					t.Fatalf("seed %d: a slot went to %s holding %d while %s waited holding %d", seed, to, before[to], u, before[u])
				}
				if before[to] == before[u] {
					if ties[u] == nil {
						ties[u] = map[string]int{}
					}
					if ties[u][to]++; ties[u][to] > 1 {
						t.Fatalf("seed %d: %s got a second slot at a tie while %s waited", seed, to, u)
					}
				}
			}
			delete(ties, to)
		}
		for range 400 {
			switch op := rng.IntN(10); {
			case op < 5: // a call arrives
				tn := tenants[rng.IntN(len(tenants))]
				ticket, ok := s.take(tn)
				if ok {
					holding = append(holding, held{tn})
				} else {
					waiting[tn] = append(waiting[tn], ticket)
				}
			case op < 9 && len(holding) > 0: // a call ends
				i := rng.IntN(len(holding))
				h := holding[i]
				holding = slices.Delete(holding, i, i+1)
				before := maps(s.held)
				before[h.tenant]--
				if ticket, to, ok := s.put(h.tenant); ok {
					granted(ticket, to, before)
				}
			default: // a waiting call is given up
				tn := tenants[rng.IntN(len(tenants))]
				if q := waiting[tn]; len(q) > 0 {
					i := rng.IntN(len(q))
					if !s.cancel(tn, q[i]) {
						t.Fatalf("seed %d: waiting ticket %d of %s could not be withdrawn", seed, q[i], tn)
					}
					waiting[tn] = slices.Delete(q, i, i+1)
					if len(waiting[tn]) == 0 {
						delete(ties, tn)
					}
				}
				if s.cancel(tn, 1<<60) {
					t.Fatalf("seed %d: a ticket never issued was withdrawn", seed)
				}
			}
			check("after a step")
		}
		// Everyone gives back: every waiting call gets a slot on the way.
		for len(holding) > 0 {
			h := holding[0]
			holding = holding[1:]
			before := maps(s.held)
			before[h.tenant]--
			if ticket, to, ok := s.put(h.tenant); ok {
				granted(ticket, to, before)
			}
			check("draining")
		}
		for tn, q := range waiting {
			if len(q) > 0 {
				t.Fatalf("seed %d: %s still waits (%v) with every slot free", seed, tn, q)
			}
		}
		if len(s.waiting) != 0 || len(s.held) != 0 || len(s.last) != 0 {
			t.Fatalf("seed %d: the books are not empty at the end: waiting %v held %v last %v", seed, s.waiting, s.held, s.last)
		}
	}
}

func maps(m map[string]int) map[string]int {
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// Two tenants holding equally few take turns: with one slot, a's three
// queued calls and b's three (queued after a's) get it a, b, a, b, a, b,
// not a's three first (arrival order would).
func TestSlotsTiesAlternate(t *testing.T) {
	s := newSlots(1)
	s.take("x")
	for range 3 {
		s.take("a")
	}
	for range 3 {
		s.take("b")
	}
	var got []string
	from := "x"
	for {
		_, to, ok := s.put(from)
		if !ok {
			break
		}
		got = append(got, to)
		from = to
	}
	if want := []string{"a", "b", "a", "b", "a", "b"}; !slices.Equal(got, want) {
		t.Fatalf("slots went to %v, want %v", got, want)
	}
}

// The brief's case, through a real connection: tenant a holds every
// Prefill slot of the connection and queues a hundred more prompts;
// tenant b's prompt, sent after all of them, gets the next free slot
// instead of waiting behind a's hundred. Before the fair slots (a FIFO
// channel) it reached the worker after a's queued prompts.
func TestFloodingTenantLeavesNextSlotToOther(t *testing.T) {
	const bound, queued = 64, 100
	p := &orderPrefill{arrived: make(chan string, bound+queued+1), release: make(chan struct{}, bound+queued+1)}
	cfg := Config{Secret: secret, MaxInflight: bound, DeadAfter: -1}
	addr, _ := serve(t, cfg, nil, p)
	c := dial(t, addr, cfg)
	var wg sync.WaitGroup
	ask := func(tenant string, i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Prefill(context.Background(), &handoff.PrefillRequest{Handoff: handofftest.ID(i), Tenant: tenant, Tokens: []int32{1}})
			if err != nil {
				t.Errorf("%s's prompt %d: %v", tenant, i, err)
			}
		}()
	}
	for i := range bound {
		ask("a", i)
	}
	for range bound {
		if got := <-p.arrived; got != "a" {
			t.Fatalf("arrival %q", got)
		}
	}
	for i := range queued {
		ask("a", bound+i)
	}
	// Every one of a's queued prompts waits for a slot before b asks.
	waitFor(t, "a's prompts waiting", func() bool { return waitingCalls(c) == queued })
	ask("b", 1000)
	waitFor(t, "b's prompt waiting", func() bool { return waitingCalls(c) == queued+1 })
	p.release <- struct{}{} // one of a's prompts ends
	select {
	case got := <-p.arrived:
		if got != "b" {
			t.Fatalf("the next free slot went to %s's queued prompt, want b's", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no prompt took the freed slot")
	}
	for range queued + bound {
		p.release <- struct{}{}
	}
	wg.Wait()
}

// orderPrefill records each prompt's tenant as it reaches the worker and
// holds it until release.
type orderPrefill struct {
	arrived chan string
	release chan struct{}
}

func (p *orderPrefill) Prefill(ctx context.Context, r *handoff.PrefillRequest) (*handoff.PrefillResult, error) {
	p.arrived <- r.Tenant
	select {
	case <-p.release:
		return &handoff.PrefillResult{FirstToken: 1, Tokens: len(r.Tokens)}, nil
	case <-ctx.Done():
		return nil, handoff.ErrAborted.With("given up")
	}
}

func waitingCalls(c *Client) int {
	c.psem.mu.Lock()
	defer c.psem.mu.Unlock()
	return len(c.psem.ready)
}

// A waiting call whose caller gives up just as the slot is granted to it
// passes the slot on: it is never held by a call that was not sent.
func TestSlotGrantedAsCallerLeaves(t *testing.T) {
	for range 20 {
		f := newFairSlots(1)
		done := make(chan struct{})
		if err := f.acquire(context.Background(), done, "x", nil); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- f.acquire(ctx, done, "a", nil) }()
		waitFor(t, "a waiting", func() bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			return len(f.ready) == 1
		})
		// The caller leaves, and (while it waits for the lock) x's slot is
		// granted to it.
		f.mu.Lock()
		cancel()
		time.Sleep(2 * time.Millisecond)
		ticket, to, ok := f.s.put("x")
		if !ok || to != "a" {
			t.Fatalf("x's slot went to %q", to)
		}
		close(f.ready[ticket])
		delete(f.ready, ticket)
		f.mu.Unlock()
		err := <-errc
		want := 1
		if err != nil {
			want = 0 // it left: the slot it was granted is free again
		}
		if n := f.inUse(); n != want {
			t.Fatalf("acquire returned %v and %d slots are held, want %d", err, n, want)
		}
	}
}
