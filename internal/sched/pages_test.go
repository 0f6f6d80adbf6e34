package sched

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestPagesShareAndWorkConserving(t *testing.T) {
	p := Pages{Pool: 100, Holders: []Holder{{Tenant: "a", Weight: 1, Held: 90}, {Tenant: "b", Weight: 3}}}
	// Nobody else waits: a may take the whole pool.
	if !p.MayTake("a", 10) {
		t.Fatal("a alone may not take the free pages")
	}
	// b waits: a is capped at 100*1/4.
	p.Holders[1].Wants = 8
	if got := p.Share("a"); got != 25 {
		t.Fatalf("a's share %d, want 25", got)
	}
	if got := p.Share("b"); got != 75 {
		t.Fatalf("b's share %d, want 75", got)
	}
	if p.MayTake("a", 1) {
		t.Fatal("a over its share may grow while b waits")
	}
	// Nobody waits behind b: it may take anything.
	if !p.MayTake("b", 100) {
		t.Fatal("b may not take free pages nobody else waits for")
	}
	// a, holding 90 of its share of 25, waits for 1 more: the cap would
	// never give it room, so it caps nobody.
	p.Holders[0].Wants = 1
	if !p.MayTake("b", 100) {
		t.Fatal("a's request larger than its share caps b")
	}
	// Within its share, a's wait caps b at b's share.
	p.Holders[0].Held = 20
	if !p.MayTake("b", 75) || p.MayTake("b", 76) {
		t.Fatal("b's cap is not its share while a waits")
	}
	// A tenant holding and wanting nothing yet is counted as a contender
	// for its own share.
	if got := p.Share("c"); got != 100*1/5 {
		t.Fatalf("c's share %d, want 20", got)
	}
}

func TestPagesVictimIsFurthestOverShare(t *testing.T) {
	all := func(string) bool { return true }
	p := Pages{Pool: 64, Holders: []Holder{
		{Tenant: "a", Weight: 1, Held: 20}, // 20 per unit of weight
		{Tenant: "b", Weight: 4, Held: 40}, // 10
		{Tenant: "c", Weight: 1, Held: 4, Wants: 4},
	}}
	if v := p.Victim(all); v != "a" {
		t.Fatalf("victim %q, want a (20 pages on weight 1)", v)
	}
	// a has nothing to preempt: the next furthest over.
	if v := p.Victim(func(t string) bool { return t != "a" }); v != "b" {
		t.Fatalf("victim %q, want b", v)
	}
	if v := p.Victim(func(string) bool { return false }); v != "" {
		t.Fatalf("victim %q with nothing preemptible", v)
	}
	// c is owed 4 pages within its share (64*1/6 = 10), none are free:
	// the tenant furthest over its share gives them back.
	if v := p.Reclaim(0, all); v != "a" {
		t.Fatalf("reclaim %q, want a", v)
	}
	if v := p.Reclaim(4, all); v != "" {
		t.Fatalf("reclaim %q with c's pages free", v)
	}
	// What a waiter could have is its own: 4 pages count as room for
	// another tenant (idle cache entries it may evict), not for c (they
	// are within their owner's cache share): c is still owed.
	free := func(h Holder) int {
		if h.Tenant == "c" {
			return 0
		}
		return 4
	}
	if v := p.ReclaimBy(free, all); v != "a" {
		t.Fatalf("reclaim %q, want a: c's request finds no room it may take", v)
	}
	if v := p.ReclaimBy(func(Holder) int { return 4 }, all); v != "" {
		t.Fatalf("reclaim %q with room for c", v)
	}
}

// holdings draws a pool and tenants' claims on it: sequences of pages per
// tenant (a sequence is what one preemption gives back).
func holdings(t *rapid.T) (pool int, names []string, weights []int, seqs [][]int) {
	n := rapid.IntRange(1, 5).Draw(t, "tenants")
	pool = rapid.IntRange(1, 200).Draw(t, "pool")
	used := 0
	for i := range n {
		names = append(names, fmt.Sprintf("t%d", i))
		weights = append(weights, rapid.IntRange(1, 4).Draw(t, "weight"))
		var s []int
		for range rapid.IntRange(0, 6).Draw(t, "seqs") {
			if used >= pool {
				break
			}
			k := rapid.IntRange(1, pool-used).Draw(t, "pages")
			s = append(s, k)
			used += k
		}
		seqs = append(seqs, s)
	}
	return pool, names, weights, seqs
}

func snapshot(pool int, names []string, weights []int, seqs [][]int, wants []int) (Pages, int) {
	p := Pages{Pool: pool}
	free := pool
	for i, name := range names {
		h := Holder{Tenant: name, Weight: weights[i], Wants: wants[i]}
		for _, k := range seqs[i] {
			h.Held += k
		}
		free -= h.Held
		p.Holders = append(p.Holders, h)
	}
	return p, free
}

// TestPagesProperties: the quota's rules over random pools.
//   - The shares of the contenders sum to at most the pool.
//   - Work-conserving: a tenant no other tenant waits behind may take
//     anything; under contention it may take only up to its share.
//   - The victim is furthest over its share: when any preemptible tenant
//     is over its share, so is the victim.
//   - The bound: a waiting tenant owed r pages within its share gets them
//     after reclaim preempted at most the over-share tenants' sequences
//     (one Reclaim answer each), and then r pages are free.
func TestPagesProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		pool, names, weights, seqs := holdings(t)
		wants := make([]int, len(names))
		for i := range wants {
			if rapid.Bool().Draw(t, "waits") {
				wants[i] = rapid.IntRange(1, pool).Draw(t, "wants")
			}
		}
		p, free := snapshot(pool, names, weights, seqs, wants)

		sum := 0
		for _, h := range p.Holders {
			if h.Held > 0 || h.Wants > 0 {
				sum += p.Share(h.Tenant)
			}
		}
		if sum > pool {
			t.Fatalf("shares sum to %d > pool %d", sum, pool)
		}
		for _, h := range p.Holders {
			// Contended: another tenant waits for pages within its share
			// (a request larger than that would never be given room by
			// capping the others, so it caps nobody).
			owed := false
			for _, o := range p.Holders {
				owed = owed || (o.Tenant != h.Tenant && o.Wants > 0 && o.Held+o.Wants <= p.Share(o.Tenant))
			}
			if p.Contended(h.Tenant) != owed {
				t.Fatalf("%s: Contended = %v, but another tenant owed pages within its share: %v", h.Tenant, p.Contended(h.Tenant), owed)
			}
			n := rapid.IntRange(0, pool).Draw(t, "take")
			ok := p.MayTake(h.Tenant, n)
			switch {
			case !p.Contended(h.Tenant) && !ok:
				t.Fatalf("%s may not take %d with nobody else waiting", h.Tenant, n)
			case p.Contended(h.Tenant) && ok != (h.Held+n <= p.Share(h.Tenant)):
				t.Fatalf("%s holding %d, share %d: MayTake(%d) = %v", h.Tenant, h.Held, p.Share(h.Tenant), n, ok)
			}
		}
		preemptible := func(t string) bool { return len(seqs[p.find(t)]) > 0 }
		if v := p.Victim(preemptible); v != "" {
			vh := p.Holders[p.find(v)]
			for _, h := range p.Holders {
				if preemptible(h.Tenant) && h.Held > p.Share(h.Tenant) && vh.Held <= p.Share(v) {
					t.Fatalf("victim %s is within its share (%d of %d) while %s is over (%d of %d)",
						v, vh.Held, p.Share(v), h.Tenant, h.Held, p.Share(h.Tenant))
				}
			}
		}

		// The bound. Reclaim preempts one sequence per answer (the newest,
		// the last), as the engine does.
		maxSteps := 0
		for _, s := range seqs {
			maxSteps += len(s)
		}
		steps := 0
		for {
			v := p.Reclaim(free, preemptible)
			if v == "" {
				break
			}
			i := p.find(v)
			if p.Holders[i].Held <= p.Share(v) {
				t.Fatalf("reclaim took from %s within its share", v)
			}
			k := seqs[i][len(seqs[i])-1]
			seqs[i] = seqs[i][:len(seqs[i])-1]
			p.Holders[i].Held -= k
			free += k
			steps++
			if steps > maxSteps {
				t.Fatalf("reclaim did not stop after %d preemptions", steps)
			}
		}
		for _, h := range p.Holders {
			if h.Wants > 0 && h.Held+h.Wants <= p.Share(h.Tenant) && h.Wants > free {
				t.Fatalf("%s is owed %d pages within its share %d (holding %d) but only %d are free after reclaim",
					h.Tenant, h.Wants, p.Share(h.Tenant), h.Held, free)
			}
		}
	})
}

// A request refused for its tenant's page share (EvOverShare) blocks only
// its tenant: the other tenant's requests are admitted meanwhile; the
// refused one is tried again, first of its tenant, when pages come back
// (Done) or RetryInterval passes.
func TestOverShareBlocksOnlyItsTenant(t *testing.T) {
	c := New(Config{Quantum: 100, RetryInterval: 20 * time.Millisecond})
	want(t, c.Step(arrive(1, "a", 10, at(0))), Action{Kind: ActAdmit, ID: 1})
	c.Step(arrive(2, "a", 10, at(0)))
	c.Step(arrive(3, "b", 10, at(0)))
	c.Step(arrive(4, "b", 10, at(0)))
	// 1 is over a's share: b's requests go, a's wait.
	want(t, c.Step(Event{Kind: EvOverShare, ID: 1, Now: at(1)}), Action{Kind: ActAdmit, ID: 3})
	want(t, c.Step(Event{Kind: EvReserved, ID: 3, Now: at(2)}), Action{Kind: ActAdmit, ID: 4})
	want(t, c.Step(Event{Kind: EvReserved, ID: 4, Now: at(3)}))
	// Pages come back: a's refused request first, then its next.
	want(t, c.Step(Event{Kind: EvDone, ID: 3, Now: at(4)}), Action{Kind: ActAdmit, ID: 1})
	want(t, c.Step(Event{Kind: EvOverShare, ID: 1, Now: at(5)}))
	if d, ok := c.Deadline(); !ok || !d.Equal(at(25)) {
		t.Fatalf("deadline %v %v, want the retry at 25ms", d, ok)
	}
	want(t, c.Step(Event{Kind: EvTick, Now: at(25)}), Action{Kind: ActAdmit, ID: 1})
	want(t, c.Step(Event{Kind: EvReserved, ID: 1, Now: at(26)}), Action{Kind: ActAdmit, ID: 2})
	if s := c.Stats(); s.Waiting != 1 || s.Running != 2 { // 2 admitting; 1 and 4 running
		t.Fatalf("stats %+v", s)
	}
}
