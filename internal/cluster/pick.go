// Package cluster chooses the workers of one request among many prefill
// and decode workers. It is pure: it sees a snapshot of every worker
// (State) and returns a choice with the scores behind it; connections,
// clocks, load reports and logging stay with the caller (internal/router/
// node). The shape follows the inference schedulers Kubernetes users know
// (llm-d's filters, weighted scorers and a picker): filters drop workers
// that must not be used at all, scorers rate the rest in [0, 1], the
// picker takes the best weighted sum.
package cluster

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// State is what the router knows about one worker when it picks.
type State struct {
	// Name identifies the worker (its address as configured or resolved).
	Name string
	// Up is false while the worker does not answer (its last call failed
	// with a transport error and no probe has succeeded since).
	Up bool
	// ModelOK is false when the worker's model fingerprint is not the
	// router's (I13): such a worker is refused, never used.
	ModelOK bool
	// InFlight is the requests this router has on the worker now.
	InFlight int
	// Queue, when above InFlight, is the requests the worker has from
	// every router, as estimated from its last load report (other routers
	// share the worker): ShortestQueue ranks by the larger of the two.
	Queue int
	// FreePages and TotalPages are the worker's KV pool as last known
	// (decode: free pages are what a reservation takes). TotalPages 0
	// means unknown.
	FreePages, TotalPages int
	// PrefixPages is how many leading full pages of THIS request's prompt
	// the router believes the worker holds in its prefix cache (Affinity,
	// for the request's tenant only); PromptPages is the prompt's full
	// pages. Both 0 when affinity is off.
	PrefixPages, PromptPages int
}

// Filter drops workers that must not take the request.
type Filter interface {
	Name() string
	Keep(s State) bool
}

// Scorer rates every candidate in [0, 1], higher is better. It sees all
// candidates at once so that it can normalise (shortest queue is relative).
type Scorer interface {
	Name() string
	Score(cands []State) []float64
}

// Weighted is a scorer and its weight in the sum.
type Weighted struct {
	Scorer Scorer
	Weight float64
}

// Profile is one pool's filters and scorers.
type Profile struct {
	Filters []Filter
	Scorers []Weighted
}

// Choice is the picked worker and the scores that decided it.
type Choice struct {
	// Index is the picked worker's position in the input.
	Index int
	Name  string
	// Total is the picked worker's weighted score.
	Total float64
	// Scores is every candidate's weighted total, by name (for the debug
	// log); Parts the picked worker's score per scorer.
	Scores map[string]float64
	Parts  map[string]float64
	// PrefixPages is the picked worker's believed prefix pages
	// (PickPrompt; 0 otherwise).
	PrefixPages int
}

// ErrNoWorker means every worker was filtered out.
var ErrNoWorker = errors.New("no usable worker")

// Rejection says why a filter dropped a worker.
type Rejection struct {
	Name, Filter string
}

// String is the worker and why it was dropped, for the router's log
// ("10.0.0.7:9002 not answering"): the filter's name alone read as the
// worker's state ("{10.0.0.7:9002 up}" for a dead worker).
func (r Rejection) String() string {
	switch r.Filter {
	case Up{}.Name():
		return r.Name + " not answering"
	case SameModel{}.Name():
		return r.Name + " runs another model"
	}
	return r.Name + " dropped by the " + r.Filter + " filter"
}

// Pick runs the profile over ws. Ties go to the first candidate at or
// after rotate (mod len(ws)) in input order, so equal workers share
// traffic when the caller rotates (round robin) instead of all going to
// the first. It returns the choice and the rejected workers.
func (p Profile) Pick(ws []State, rotate int) (Choice, []Rejection, error) {
	var rej []Rejection
	var idx []int
	var cands []State
	for i, w := range ws {
		kept := true
		for _, f := range p.Filters {
			if !f.Keep(w) {
				rej = append(rej, Rejection{Name: w.Name, Filter: f.Name()})
				kept = false
				break
			}
		}
		if kept {
			idx = append(idx, i)
			cands = append(cands, w)
		}
	}
	if len(cands) == 0 {
		return Choice{}, rej, fmt.Errorf("%w: all %d filtered out", ErrNoWorker, len(ws))
	}
	totals := make([]float64, len(cands))
	parts := make([][]float64, len(p.Scorers))
	for si, ws := range p.Scorers {
		sc := ws.Scorer.Score(cands)
		parts[si] = sc
		for i := range cands {
			v := sc[i]
			if math.IsNaN(v) {
				v = 0
			}
			totals[i] += ws.Weight * min(max(v, 0), 1)
		}
	}
	n := len(ws)
	start := ((rotate % n) + n) % n
	best := -1
	// Order candidates by distance from the rotation point for ties.
	order := make([]int, len(cands))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		return (idx[order[a]]-start+n)%n < (idx[order[b]]-start+n)%n
	})
	for _, i := range order {
		if best < 0 || totals[i] > totals[best]+1e-12 {
			best = i
		}
	}
	c := Choice{Index: idx[best], Name: cands[best].Name, Total: totals[best],
		Scores: map[string]float64{}, Parts: map[string]float64{}}
	for i, w := range cands {
		c.Scores[w.Name] = totals[i]
	}
	for si, ws := range p.Scorers {
		c.Parts[ws.Scorer.Name()] = parts[si][best]
	}
	return c, rej, nil
}

// Up drops workers that do not answer.
type Up struct{}

func (Up) Name() string      { return "up" }
func (Up) Keep(s State) bool { return s.Up }

// SameModel drops workers of another model (I13).
type SameModel struct{}

func (SameModel) Name() string      { return "same-model" }
func (SameModel) Keep(s State) bool { return s.ModelOK }

// FreePages prefers the decode worker with the most free KV pages (least
// KV pressure): its score is the candidate's free pages over the most any
// candidate has. Workers whose pool is unknown score 0.
type FreePages struct{}

func (FreePages) Name() string { return "free-pages" }
func (FreePages) Score(cands []State) []float64 {
	most := 0
	for _, c := range cands {
		most = max(most, c.FreePages)
	}
	out := make([]float64, len(cands))
	for i, c := range cands {
		if most > 0 && c.FreePages > 0 {
			out[i] = float64(c.FreePages) / float64(most)
		}
	}
	return out
}

// ShortestQueue prefers the worker with the fewest requests in flight
// (this router's, or every router's by the load report when more): 1 for
// the least loaded, falling linearly to 0 for the most.
type ShortestQueue struct{}

func (ShortestQueue) Name() string { return "queue" }
func (ShortestQueue) Score(cands []State) []float64 {
	lo, hi := math.MaxInt, 0
	for _, c := range cands {
		q := max(c.InFlight, c.Queue)
		lo, hi = min(lo, q), max(hi, q)
	}
	out := make([]float64, len(cands))
	for i, c := range cands {
		if hi == lo {
			out[i] = 1
		} else {
			out[i] = float64(hi-max(c.InFlight, c.Queue)) / float64(hi-lo)
		}
	}
	return out
}

// DefaultFilters are the filters every pool runs.
func DefaultFilters() []Filter { return []Filter{Up{}, SameModel{}} }
