package cluster

import (
	"errors"
	"fmt"
	"testing"
)

// Workers that are down or run another model are never picked, whatever
// their score, and each rejection names its filter.
func TestFiltersDropDownAndForeignModel(t *testing.T) {
	p := Profile{Filters: DefaultFilters(), Scorers: []Weighted{{FreePages{}, 1}}}
	ws := []State{
		{Name: "down", Up: false, ModelOK: true, FreePages: 1000},
		{Name: "foreign", Up: true, ModelOK: false, FreePages: 1000},
		{Name: "ok", Up: true, ModelOK: true, FreePages: 1},
	}
	for rot := 0; rot < 3; rot++ {
		c, rej, err := p.Pick(ws, rot)
		if err != nil || c.Name != "ok" || c.Index != 2 {
			t.Fatalf("rotate %d: picked %+v, %v", rot, c, err)
		}
		if len(rej) != 2 || rej[0] != (Rejection{"down", "up"}) || rej[1] != (Rejection{"foreign", "same-model"}) {
			t.Fatalf("rejections %+v", rej)
		}
	}
	_, rej, err := p.Pick(ws[:2], 0)
	if !errors.Is(err, ErrNoWorker) {
		t.Fatalf("all filtered: %v", err)
	}
	// As the router logs them: why each was dropped, never a dead worker
	// printed beside the word "up".
	if got := fmt.Sprint(rej); got != "[down not answering foreign runs another model]" {
		t.Errorf("rejections print as %q", got)
	}
}

// Equal workers share traffic through the rotation; the shortest queue
// wins when queues differ.
func TestShortestQueueAndTies(t *testing.T) {
	p := Profile{Filters: DefaultFilters(), Scorers: []Weighted{{ShortestQueue{}, 1}}}
	ws := []State{{Name: "a", Up: true, ModelOK: true}, {Name: "b", Up: true, ModelOK: true}, {Name: "c", Up: true, ModelOK: true}}
	seen := map[string]int{}
	for rot := 0; rot < 6; rot++ {
		c, _, _ := p.Pick(ws, rot)
		seen[c.Name]++
	}
	if seen["a"] != 2 || seen["b"] != 2 || seen["c"] != 2 {
		t.Fatalf("ties not shared: %v", seen)
	}
	ws[0].InFlight, ws[1].InFlight, ws[2].InFlight = 3, 1, 2
	for rot := 0; rot < 3; rot++ {
		if c, _, _ := p.Pick(ws, rot); c.Name != "b" || c.Parts["queue"] != 1 {
			t.Fatalf("rotate %d: picked %+v, want b", rot, c)
		}
	}
	// Other routers' requests on b (its load report) make it the longest
	// queue: 3, 6, 2 -> c; a Queue below InFlight does not count.
	ws[1].Queue, ws[0].Queue = 6, 1
	for rot := 0; rot < 3; rot++ {
		if c, _, _ := p.Pick(ws, rot); c.Name != "c" || c.Scores["b"] != 0 || c.Scores["a"] != 0.75 {
			t.Fatalf("rotate %d: picked %+v, want c (scores a 0.75, b 0)", rot, c)
		}
	}
}

// Decode workers with different pools, under a steady load where every
// request holds k pages for hold steps: picking by free pages fills the
// pools until their free pages are level, so each worker's share of the
// traffic is its pool minus the common free level (water filling, worked
// out by hand below, not by the code under test).
func TestFreePagesTrafficProportion(t *testing.T) {
	total := []int{40, 80, 120}
	const k, hold, steps = 2, 60, 6000
	// Occupied pages in the steady state: hold requests of k pages = 120.
	// Level F with sum(total_i - F) = 120: F = (240-120)/3 = 40, so the
	// occupied pages, and the traffic, are 0 : 40 : 80 = 0 : 1/3 : 2/3.
	want := []float64{0, 1.0 / 3, 2.0 / 3}

	p := Profile{Filters: DefaultFilters(), Scorers: []Weighted{{FreePages{}, 1}}}
	free := append([]int(nil), total...)
	type held struct{ w, until int }
	var live []held
	count := make([]int, len(total))
	for step := 0; step < steps; step++ {
		kept := live[:0]
		for _, h := range live {
			if h.until == step {
				free[h.w] += k
			} else {
				kept = append(kept, h)
			}
		}
		live = kept
		ws := make([]State, len(total))
		for i := range ws {
			ws[i] = State{Name: fmt.Sprint("d", i), Up: true, ModelOK: true, FreePages: free[i], TotalPages: total[i]}
		}
		c, _, err := p.Pick(ws, step)
		if err != nil {
			t.Fatal(err)
		}
		if free[c.Index] < k {
			t.Fatalf("step %d: picked %s with %d free pages", step, c.Name, free[c.Index])
		}
		free[c.Index] -= k
		live = append(live, held{c.Index, step + hold})
		if step >= steps/2 {
			count[c.Index]++
		}
	}
	n := steps - steps/2
	for i, c := range count {
		got := float64(c) / float64(n)
		if d := got - want[i]; d > 0.02 || d < -0.02 {
			t.Fatalf("worker %d: share %.3f, want %.3f (counts %v)", i, got, want[i], count)
		}
	}
}
