package cluster

import (
	"fmt"
	"testing"
)

const affPage = 16

func toks(seed, pages int) []int32 {
	out := make([]int32, pages*affPage+3) // full pages and a partial one
	for i := range out {
		out[i] = int32(seed*100000 + i)
	}
	return out
}

func promptOf(tenant string, tokens []int32) Prompt {
	return Prompt{Tenant: tenant, Keys: PageKeys(affPage, tokens)}
}

// Three decode workers, d2 with twice the free pages of d0 and d1. The
// router's memory says tenant a's prompt P1 (4 full pages) is on d0 and
// P2 on d1. Weights: free pages 2, queue 1, affinity 3. By hand:
//
//	a/P1 on d0: 2*0.5 + 1 + 3*1   = 5   > d2: 2*1 + 1 + 0 = 3  -> d0
//	a/P1' (P1's first 2 pages, then new ones): d0 2*0.5+1+3*(2/4) = 3.5 > 3 -> d0
//	a/P2 on d1: 5 > 3                                               -> d1
//	a/fresh prompt: no belief; d2 3 > d0, d1 2                      -> d2
//
// so 10 requests of 4 P1, 1 P1', 3 P2 and 2 fresh split 5/3/2. With the
// affinity weight 0 every request goes to d2 (free pages).
func TestPrefixAffinityTrafficProportion(t *testing.T) {
	ws := []State{
		{Name: "d0", Up: true, ModelOK: true, FreePages: 50, TotalPages: 100},
		{Name: "d1", Up: true, ModelOK: true, FreePages: 50, TotalPages: 100},
		{Name: "d2", Up: true, ModelOK: true, FreePages: 100, TotalPages: 100},
	}
	p1, p2 := toks(1, 4), toks(2, 4)
	p1half := append(append([]int32(nil), p1[:2*affPage]...), toks(3, 2)...)
	for _, aw := range []float64{3, 0} {
		prof := Profile{Filters: DefaultFilters(), Scorers: []Weighted{{FreePages{}, 2}, {ShortestQueue{}, 1}, {PrefixAffinity{}, aw}}}
		aff := NewAffinity(1 << 10)
		aff.Record("a", "", PageKeys(affPage, p1), "d0")
		aff.Record("a", "", PageKeys(affPage, p2), "d1")
		got := map[string]int{}
		for round := range 6 {
			reqs := [][]int32{p1, p1, p1, p1, p1half, p2, p2, p2, toks(100+2*round, 3), toks(101+2*round, 3)}
			for i, r := range reqs {
				c, _, err := pickRecord(prof, ws, round*10+i, aff, promptOf("a", r))
				if err != nil {
					t.Fatal(err)
				}
				got[c.Name]++
			}
		}
		want := map[string]int{"d0": 30, "d1": 18, "d2": 12}
		if aw == 0 {
			want = map[string]int{"d2": 60}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("affinity weight %v: traffic %v, want %v", aw, got, want)
		}
	}
}

// Tenant b sends exactly tenant a's prompt: the router's memory of a's
// pages plays no part in b's pick (affinity score 0 everywhere, so the
// free pages decide), and b's own record afterwards moves only b's
// traffic; a keeps going to its worker. A narrower cache scope of a is
// another cache and misses as well.
func TestPrefixAffinityNeverCrossesTenants(t *testing.T) {
	ws := []State{
		{Name: "d0", Up: true, ModelOK: true, FreePages: 10, TotalPages: 100},
		{Name: "d1", Up: true, ModelOK: true, FreePages: 100, TotalPages: 100},
	}
	prof := Profile{Filters: DefaultFilters(), Scorers: []Weighted{{FreePages{}, 1}, {PrefixAffinity{}, 10}}}
	aff := NewAffinity(1 << 10)
	p := toks(7, 5)
	aff.Record("a", "", PageKeys(affPage, p), "d0")
	if m := aff.Match("b", "", PageKeys(affPage, p)); len(m) != 0 {
		t.Fatalf("tenant b's lookup of a's prompt found %v", m)
	}
	c, _, _ := pickRecord(prof, ws, 0, aff, promptOf("b", p))
	if c.Name != "d1" || c.Parts["prefix-affinity"] != 0 || c.PrefixPages != 0 || c.Scores["d0"] > 0.2 {
		t.Fatalf("tenant b routed by tenant a's prefix: %+v", c)
	}
	scoped := Prompt{Tenant: "a", Scope: "conversation-2", Keys: PageKeys(affPage, p)}
	if c, _, _ := pickRecord(prof, ws, 0, aff, scoped); c.Name != "d1" || c.PrefixPages != 0 {
		t.Fatalf("a narrower scope used the wider scope's memory: %+v", c)
	}
	for i := range 4 {
		if c, _, _ := pickRecord(prof, ws, i, aff, promptOf("a", p)); c.Name != "d0" || c.PrefixPages != 5 {
			t.Fatalf("tenant a after b's request: %+v", c)
		}
		if c, _, _ := pickRecord(prof, ws, i, aff, promptOf("b", p)); c.Name != "d1" || c.PrefixPages != 5 {
			t.Fatalf("tenant b's own memory: %+v", c)
		}
	}
}

// The memory is bounded (LRU, oldest pages forgotten first; a match makes
// pages recent), a page remembers its most recent holders, and Forget
// removes a worker.
func TestAffinityBoundedLRU(t *testing.T) {
	aff := NewAffinity(8)
	a, b := PageKeys(affPage, toks(1, 4)), PageKeys(affPage, toks(2, 4))
	aff.Record("t", "", a, "w0")
	aff.Record("t", "", b, "w1")
	if aff.Len() != 8 {
		t.Fatalf("%d pages remembered", aff.Len())
	}
	aff.Match("t", "", a) // a is recent now
	aff.Record("t", "", PageKeys(affPage, toks(3, 2)), "w2")
	if m := aff.Match("t", "", a); m["w0"] != 4 {
		t.Fatalf("a recent chain was evicted: %v", m)
	}
	if m := aff.Match("t", "", b); m["w1"] != 0 || aff.Len() != 8 {
		t.Fatalf("the oldest pages were kept: %v, %d pages", m, aff.Len())
	}
	aff.Record("t", "", a[:2], "w3") // a second holder of a's first two pages
	if m := aff.Match("t", "", a); m["w3"] != 2 || m["w0"] != 4 {
		t.Fatalf("two holders: %v", m)
	}
	aff.Forget("w0")
	if m := aff.Match("t", "", a); m["w0"] != 0 || m["w3"] != 2 {
		t.Fatalf("after Forget: %v", m)
	}
}

// pickRecord picks for r and records the pick, as a caller that sends r
// to the worker does.
func pickRecord(prof Profile, ws []State, rotate int, aff *Affinity, r Prompt) (Choice, []Rejection, error) {
	c, rej, err := prof.PickPrompt(ws, rotate, aff, r)
	if err == nil {
		aff.Record(r.Tenant, r.Scope, r.Keys, c.Name)
	}
	return c, rej, err
}
