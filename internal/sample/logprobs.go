package sample

import "math"

// TokenLogprob is one token and its log-probability.
type TokenLogprob struct {
	ID      int32
	Logprob float32
}

// Logprobs is what a sampled token reports when the client asked for
// logprobs: its own log-probability and the TopLogprobs most likely tokens,
// most likely first (ties: lower id first).
//
// They are the model's raw log-probabilities, log_softmax of the logits
// before bias, penalties and temperature (vLLM's default logprobs mode,
// "raw_logprobs"), computed in float64 and rounded once to float32.
type Logprobs struct {
	Logprob float32
	Top     []TokenLogprob
}

// Logprobs returns the report for token id drawn from logits, or nil when
// the request did not ask for logprobs.
func (s *Sampler) Logprobs(logits []float32, id int32) *Logprobs {
	if !s.p.Logprobs {
		return nil
	}
	return ComputeLogprobs(logits, id, s.p.TopLogprobs)
}

// ComputeLogprobs is log_softmax(logits) at id plus the top most likely
// tokens. Every value is in [LogprobFloor, 0], so it always encodes as
// JSON: NaN logits carry no probability and -Inf (anything below the
// floor) is LogprobFloor; a +Inf logit (a broken model) reports 0.
func ComputeLogprobs(logits []float32, id int32, top int) *Logprobs {
	maxv := math.Inf(-1)
	for _, v := range logits {
		if f := float64(v); f > maxv && !math.IsInf(f, 1) {
			maxv = f
		}
	}
	var z float64
	for _, v := range logits {
		if f := float64(v); !math.IsNaN(f) && !math.IsInf(f, 0) {
			z += math.Exp(f - maxv)
		}
	}
	lse := maxv + math.Log(z)
	lp := func(v float32) float32 {
		r := float64(v) - lse
		switch {
		case math.IsNaN(r) || r < LogprobFloor:
			return LogprobFloor
		case r > 0:
			return 0
		}
		return float32(r)
	}
	out := &Logprobs{Logprob: LogprobFloor}
	if id >= 0 && int(id) < len(logits) {
		out.Logprob = lp(logits[id])
	}
	if top <= 0 {
		return out
	}
	// The top few of a large vocabulary: a sorted list of at most top
	// entries; most candidates fail the comparison with its last.
	// Ids are visited in increasing order, so "strictly larger" keeps ties
	// with the lower id. Raw logits are compared: log_softmax is monotone,
	// and rounded values could tie where the logits do not.
	best := make([]TokenLogprob, 0, min(top, len(logits)))
	for i, v := range logits {
		if v != v { // NaN
			continue
		}
		if len(best) == top && !(v > logits[best[top-1].ID]) {
			continue
		}
		j := len(best)
		if j < top {
			best = append(best, TokenLogprob{})
		} else {
			j = top - 1
		}
		for j > 0 && v > logits[best[j-1].ID] {
			best[j] = best[j-1]
			j--
		}
		best[j] = TokenLogprob{ID: int32(i)}
	}
	for i := range best {
		best[i].Logprob = lp(logits[best[i].ID])
	}
	out.Top = best
	return out
}
