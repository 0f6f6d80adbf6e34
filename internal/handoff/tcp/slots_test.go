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
	"sluice/internal/kv"
)

// The fair slot rule under random takes, puts and withdrawals (seeded,
// tenants of random weights 1-3):
//   - the books hold: slots in use = slots held, never above the bound,
//     and a call waits only while every slot is used;
//   - within a tenant, calls get slots in arrival order;
//   - a freed slot goes to a tenant that, granted it, holds no more for
//     its weight than any waiting tenant would ((held+1)/weight), and
//     while a tenant waits, each other tenant gets at most one slot at
//     which it was tied with it (one slot's turn each);
//   - nothing waits forever: once every holder gives its slots back, every
//     waiting call has had one.
func TestSlotsProperty(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 7))
		capN := 1 + rng.IntN(6)
		tenants := []string{"a", "b", "c", "d"}[:1+rng.IntN(4)]
		weight := map[string]int{}
		for _, tn := range tenants {
			weight[tn] = 1 + rng.IntN(3)
		}
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
				x, y := (before[to]+1)*weight[u], (before[u]+1)*weight[to]
				if x > y {
					t.Fatalf("seed %d: a slot went to %s holding %d (weight %d) while %s waited holding %d (weight %d)",
						seed, to, before[to], weight[to], u, before[u], weight[u])
				}
				if x == y {
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
				ticket, ok := s.take(tn, weight[tn])
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
		if len(s.waiting) != 0 || len(s.held) != 0 || len(s.last) != 0 || len(s.weight) != 0 {
			t.Fatalf("seed %d: the books are not empty at the end: waiting %v held %v last %v weight %v", seed, s.waiting, s.held, s.last, s.weight)
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
	s.take("x", 1)
	for range 3 {
		s.take("a", 1)
	}
	for range 3 {
		s.take("b", 1)
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

// Weighted: a (weight 2) and b (weight 1) both keep calls waiting on six
// slots that x held; as x's slots come back and then whoever's call ends,
// a holds 4 and b 2 (equal shares, 3 and 3, before the weights).
func TestSlotsWeighted(t *testing.T) {
	s := newSlots(6)
	for range 6 {
		s.take("x", 1)
	}
	for range 50 {
		s.take("a", 2)
		s.take("b", 1)
	}
	holders := []string{"x", "x", "x", "x", "x", "x"}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 60 {
		j := i // x's six slots first, then whoever's call ends
		if i >= 6 {
			j = rng.IntN(len(holders))
		}
		_, to, ok := s.put(holders[j])
		if !ok {
			t.Fatal("nothing waits")
		}
		holders[j] = to
		if i >= 5 && (s.held["a"] != 4 || s.held["b"] != 2) {
			t.Fatalf("after %d slots came back a holds %d and b %d, want 4 and 2", i+1, s.held["a"], s.held["b"])
		}
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

// The same for the other calls (issue 28): a prefill worker streaming
// handoffs of tenant a holds every call slot of its connection to the
// decode worker with page writes and queues a hundred more; tenant b's
// commit, sent after all of them, gets the next free slot. Before (a FIFO
// channel for every call but Prefill) it waited behind a's hundred
// writes. The tenant is the one the call's context names.
func TestFloodingTenantsWritesLeaveNextSlotToOthersCommit(t *testing.T) {
	const bound, queued = 32, 100
	d := &orderDecode{arrived: make(chan kv.ID, bound+queued+1), release: make(chan struct{}, bound+queued+1)}
	// Encrypted: each write runs on its own goroutine at the server (in
	// clear, the reader applies a write frame as it reads it, one at a
	// time, and a write held here would hold the reader).
	cfg := Config{Secret: secret, MaxInflight: bound, DeadAfter: -1, Encrypt: true}
	addr, _ := serve(t, cfg, d, nil)
	c := dial(t, addr, cfg)
	var wg sync.WaitGroup
	a := handoff.WithCaller(context.Background(), "a", 1)
	write := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Write(a, []handoff.PageWrite{{Handoff: handofftest.ID(i), Slots: 1, Data: []byte{1}, Checksum: handoff.Checksum([]byte{1})}}); err != nil {
				t.Errorf("a's write %d: %v", i, err)
			}
		}()
	}
	for i := range bound {
		write(i)
	}
	for range bound {
		<-d.arrived
	}
	for i := range queued {
		write(bound + i)
	}
	waitFor(t, "a's writes waiting", func() bool { return waitingOn(c.sem) == queued })
	bID := handofftest.ID(1000)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := c.Commit(handoff.WithCaller(context.Background(), "b", 1), &handoff.Commit{Handoff: bID}); err != nil {
			t.Errorf("b's commit: %v", err)
		}
	}()
	waitFor(t, "b's commit waiting", func() bool { return waitingOn(c.sem) == queued+1 })
	d.release <- struct{}{} // one of a's writes ends
	select {
	case got := <-d.arrived:
		if got != bID {
			t.Fatalf("the next free slot went to a's queued write %x, want b's commit", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no call took the freed slot")
	}
	for range queued + bound {
		d.release <- struct{}{}
	}
	wg.Wait() // arrived holds every call's arrival: nothing blocks
}

// A Reserve's call slot is its own tenant's, at the weight it carries,
// whatever its context names: a's hundred queued reservations (contexts
// naming no tenant) leave the next free slot to b's, also sent with a
// bare context. Counted as the context's (no tenant), b's waited behind
// a's hundred.
func TestReserveTakesItsTenantsSlot(t *testing.T) {
	const bound, queued = 8, 100
	d := &orderDecode{arrived: make(chan kv.ID, bound+queued+1), release: make(chan struct{}, bound+queued+1)}
	cfg := Config{Secret: secret, MaxInflight: bound, DeadAfter: -1}
	addr, _ := serve(t, cfg, d, nil)
	c := dial(t, addr, cfg)
	var wg sync.WaitGroup
	reserve := func(tenant string, i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Reserve(context.Background(), &handoff.Reserve{Handoff: handofftest.ID(i), Tenant: tenant, PromptTokens: 1, MaxTokens: 1}); err != nil {
				t.Errorf("%s's reserve %d: %v", tenant, i, err)
			}
		}()
	}
	for i := range bound {
		reserve("a", i)
	}
	for range bound {
		<-d.arrived
	}
	for i := range queued {
		reserve("a", bound+i)
	}
	waitFor(t, "a's reservations waiting", func() bool { return waitingOn(c.sem) == queued })
	reserve("b", 1000)
	waitFor(t, "b's reservation waiting", func() bool { return waitingOn(c.sem) == queued+1 })
	d.release <- struct{}{}
	if got := <-d.arrived; got != handofftest.ID(1000) {
		t.Fatalf("the next free slot went to a's queued reservation %x, want b's", got)
	}
	for range queued + bound {
		d.release <- struct{}{}
	}
	wg.Wait() // arrived holds every call's arrival: nothing blocks
}

// A Prefill call's slot is taken at the weight its context names for its
// tenant (the router's handoff.WithCaller): with six slots a held, b
// (weight 2) and c (weight 1) queue prompts; as a's six end, b's take four
// and c's two (equal weights: three each).
func TestPrefillSlotsByWeight(t *testing.T) {
	const bound = 6
	// a's prompts end on releaseA alone: b's and c's, once in, hold
	// their slots, so each grant is decided by the rule only.
	p := &orderPrefill{arrived: make(chan string, 64), release: make(chan struct{}, 64), releaseA: make(chan struct{}, 64)}
	cfg := Config{Secret: secret, MaxInflight: bound, DeadAfter: -1}
	addr, _ := serve(t, cfg, nil, p)
	c := dial(t, addr, cfg)
	var wg sync.WaitGroup
	ask := func(tenant string, weight, i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := handoff.WithCaller(context.Background(), tenant, weight)
			if _, err := c.Prefill(ctx, &handoff.PrefillRequest{Handoff: handofftest.ID(i), Tenant: tenant, Tokens: []int32{1}}); err != nil {
				t.Errorf("%s's prompt %d: %v", tenant, i, err)
			}
		}()
	}
	for i := range bound {
		ask("a", 1, i)
	}
	for range bound {
		<-p.arrived
	}
	for i := range 10 {
		ask("b", 2, 100+i)
		ask("c", 1, 200+i)
	}
	waitFor(t, "b's and c's prompts waiting", func() bool { return waitingCalls(c) == 20 })
	got := map[string]int{}
	for range bound {
		p.releaseA <- struct{}{} // one of a's ends
		got[<-p.arrived]++
	}
	if got["b"] != 4 || got["c"] != 2 {
		t.Fatalf("as a's six prompts ended, b's took %d slots and c's %d; want 4 and 2", got["b"], got["c"])
	}
	for range 20 {
		p.release <- struct{}{}
	}
	wg.Wait() // arrived holds every prompt's arrival: nothing blocks
}

// orderDecode records each write's and commit's handoff as it reaches the
// worker; a write is held until release.
type orderDecode struct {
	slowDecode
	arrived chan kv.ID
	release chan struct{}
}

func (d *orderDecode) Write(ctx context.Context, ws []handoff.PageWrite) error {
	d.arrived <- ws[0].Handoff
	select {
	case <-d.release:
		return nil
	case <-ctx.Done():
		return handoff.ErrAborted.With("given up")
	}
}

func (d *orderDecode) Reserve(ctx context.Context, r *handoff.Reserve) (*handoff.Reservation, error) {
	d.arrived <- r.Handoff
	select {
	case <-d.release:
		return &handoff.Reservation{Handoff: r.Handoff, PageSize: 16, ExpectTokens: 1, Pages: []kv.PageRef{{Page: 1, Gen: 1}}}, nil
	case <-ctx.Done():
		return nil, handoff.ErrAborted.With("given up")
	}
}

func (d *orderDecode) Commit(ctx context.Context, c *handoff.Commit) error {
	d.arrived <- c.Handoff
	return nil
}

func waitingOn(f *fairSlots) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.ready)
}

// orderPrefill records each prompt's tenant as it reaches the worker and
// holds it until release.
type orderPrefill struct {
	arrived chan string
	release chan struct{}
	// releaseA, when set, ends tenant a's prompts instead of release.
	releaseA chan struct{}
}

func (p *orderPrefill) Prefill(ctx context.Context, r *handoff.PrefillRequest) (*handoff.PrefillResult, error) {
	p.arrived <- r.Tenant
	release := p.release
	if r.Tenant == "a" && p.releaseA != nil {
		release = p.releaseA
	}
	select {
	case <-release:
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
		if err := f.acquire(context.Background(), done, "x", 1, nil); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- f.acquire(ctx, done, "a", 1, nil) }()
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
