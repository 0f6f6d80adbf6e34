package sample

// Advance consumes the random draws of n tokens that were sampled by
// another Sampler with the same Params: the decode worker takes a request
// over after the prefill worker drew its first token, and must continue
// the same random stream that one sampler running the whole request would
// (so a seeded request replays identically, disaggregated or colocated).
// Each successful Sample of a non-greedy sampler makes exactly one draw.
func (s *Sampler) Advance(n int) {
	s.weighed = false
	if s.p.Greedy() {
		return
	}
	s.n += uint64(n)
	for range n {
		s.rng.Float64()
	}
}
