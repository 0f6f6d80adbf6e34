package sample

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"

	"sluice/internal/grammar"
)

// Sampler draws tokens for one request. It is not safe for concurrent use;
// each request owns one, so its random stream depends only on its seed and
// the logits it is shown, never on other requests (replay).
//
// Order of operations, as in vLLM's sampler: logit bias is added to the
// raw logits, then the repetition, frequency and presence penalties apply
// (in that order), then temperature scales the logits, min-p, top-k and
// top-p truncate the tempered distribution, and one uniform draw picks from
// what is left. Greedy is the argmax after bias and penalties.
//
// A constrained sampler (Constrain) restricts that last draw to the tokens
// the grammar allows, after the truncation: the mask is the last step, so
// bias, penalties and truncation mean what they mean unconstrained, and
// the common case costs one check of the drawn token (as llama.cpp and
// Ollama do) instead of a mask of the vocabulary. When the drawn token is
// refused, the draw is repeated over the allowed part of the truncated
// set, which gives each allowed token exactly its renormalised
// probability; when no truncated candidate is allowed, over every allowed
// token at the request's temperature. The repeat takes its uniform from a
// stream derived from the seed and the token's index, so every token still
// uses exactly one draw of the main stream (Advance stays exact across the
// handoff). Greedy picks the most likely allowed token.
type Sampler struct {
	p    Params
	rng  *rand.Rand
	src  *rand.PCG // rng's state, saved and restored by SampleWithin
	cand []cand
	// probs is drawAll's scratch, one probability per vocabulary id;
	// total and last are their sum and last finite id. weighed says they
	// are still those of the logits a pending SampleWithin was given, so
	// the call that completes it (with the same logits) skips weighAll,
	// an exp per vocabulary id: a deferred draw costs its mask, not a
	// second pass over a 151k vocabulary.
	probs   []float64
	total   float64
	last    int
	weighed bool

	// work holds the processed logits when a bias or penalty is on.
	work []float32
	// counts is how often each token was generated (Sample, Observe);
	// prompt is the prompt's token set (SetPrompt). Both feed penalties.
	counts map[int32]int32
	prompt map[int32]struct{}

	// m is the grammar state of a constrained request (nil: free);
	// mask is its scratch; n counts the tokens drawn or skipped (Advance);
	// bad is the first token Observe was shown that m refused.
	m    *grammar.Matcher
	mask []uint64
	n    uint64
	bad  error
	// job computes mask for m's current state, maskOK says it is done;
	// both are reset when m accepts a token. budget bounds the grammar
	// work of the SampleWithin call under way (nil: none); free is the
	// token-check work that call may still do without asking it.
	job    *grammar.MaskJob
	maskOK bool
	budget Budget
	free   int
	// maskOver: the mask refused tokens only because they would keep
	// too many parses alive (grammar.MaskJob.Over).
	maskOver bool
	// think follows a thinking model's reasoning (ConstrainThinking):
	// gm is the grammar of its answer, m is gm outside the reasoning and
	// nil inside it (every token free: no check, no mask).
	think *grammar.Think
	gm    *grammar.Matcher
}

// Budget bounds the grammar work a SampleWithin call may do. A worker
// samples every request on one shared step, so a mask that costs a walk
// of a large vocabulary's trie must not run there unbounded.
type Budget interface {
	// Left reports whether more work may be done now.
	Left() bool
	// Spend records units of grammar work done (grammar.MaskJob's units).
	Spend(units int)
}

// sliceUnits is the grammar work done between two checks of a Budget
// (about 25-75 us).
const sliceUnits = 256

// freeCheckUnits is the token-check work a SampleWithin call does without
// asking its Budget: an ordinary schema's check is a few units (one or
// two stacks, a token's bytes), and a budget spent by other sequences'
// masks must not defer a draw that costs nothing (a deferral copies the
// logits). Past it, checks take the budget in slices like a mask: a
// wide schema's check of a long token is up to MaxStacks x its bytes.
const freeCheckUnits = sliceUnits

// errPending stops a draw whose mask the budget did not leave room for.
var errPending = &Error{"pending", "the output format's mask is not computed yet"}

// Constrain restricts s to the tokens m allows; m's state must already
// cover the tokens generated so far (the caller replays them, I14). Each
// token s draws or observes afterwards advances m.
func (s *Sampler) Constrain(m *grammar.Matcher) { s.m = m }

// ConstrainThinking restricts s's answer to the tokens m allows: the
// tokens t finds free (the reasoning, its markers, the answer's leading
// whitespace) are drawn and observed without m, so m sees the answer
// alone. t starts where the prompt left the output (grammar.NewThink).
func (s *Sampler) ConstrainThinking(m *grammar.Matcher, t *grammar.Think) {
	s.gm, s.think = m, t
	s.m = m
	if t.Phase() == grammar.ThinkIn {
		s.m = nil
	}
}

// Constrained reports whether s follows a grammar (or will, after a
// reasoning).
func (s *Sampler) Constrained() bool { return s.m != nil || s.gm != nil }

// outside reports whether token id is outside the grammar now (a
// reasoning's, ConstrainThinking).
func (s *Sampler) outside(id int32) bool {
	return s.think != nil && s.think.Free(id, s.gm.Vocab().Space(id))
}

// freeBits adds to mask the tokens outside the grammar at this position:
// the markers at the start, the whitespace of the answer's lead.
func (s *Sampler) freeBits(mask []uint64) {
	if s.think == nil {
		return
	}
	open, close := s.think.Markers()
	for _, id := range []int32{open, close} {
		if s.outside(id) && int(id>>6) < len(mask) {
			mask[id>>6] |= 1 << (id & 63)
		}
	}
	if s.think.Phase() == grammar.ThinkLead && s.think.Free(-1, true) {
		for _, id := range s.gm.Vocab().Spaces() {
			if int(id>>6) < len(mask) {
				mask[id>>6] |= 1 << (id & 63)
			}
		}
	}
}

// Err is the error of the first observed token the grammar refused (a
// peer's first token or resumed tokens that this grammar cannot have
// produced); nil when all were allowed. Sample returns it too.
func (s *Sampler) Err() error { return s.bad }

type cand struct {
	id    int32
	logit float32
	prob  float64
}

// pcgStream separates sluice's draws from other PCG users seeded with the
// same number; any fixed constant works, changing it changes every replay.
const pcgStream = 0x736c75696365 // "sluice"

// New returns a sampler for p. It does not validate p; call p.Validate at
// the API boundary.
func New(p Params) *Sampler {
	src := rand.NewPCG(p.Seed, pcgStream)
	return &Sampler{p: p, rng: rand.New(src), src: src}
}

// SetPrompt gives the sampler the prompt's token ids, which the repetition
// penalty counts as seen (vLLM's definition). It is a no-op when the
// penalty is off, so callers may always call it.
func (s *Sampler) SetPrompt(ids []int32) {
	if !s.p.repetition() {
		return
	}
	s.prompt = make(map[int32]struct{}, len(ids))
	for _, id := range ids {
		s.prompt[id] = struct{}{}
	}
}

// Observe records a token generated for this request by another sampler
// with the same Params (the prefill worker's first token), so the
// penalties see it as the single sampler running the whole request would.
func (s *Sampler) Observe(id int32) {
	s.weighed = false // a new position: new logits
	free := false
	if s.think != nil {
		space := s.gm.Vocab().Space(id)
		free = s.think.Free(id, space)
		s.think.Step(id, space)
		// The matcher did not move, but the mask held the free tokens
		// of the position just left.
		s.job, s.maskOK = nil, false
		s.m = s.gm
		if s.think.Phase() == grammar.ThinkIn {
			s.m = nil
		}
	}
	if s.m != nil && s.bad == nil && !free {
		s.job, s.maskOK = nil, false
		if err := s.m.Accept(id); err != nil {
			var ge *grammar.Error
			if errors.As(err, &ge) {
				// The schema's own fault (too ambiguous), not the token's.
				s.bad = &Error{ge.Code, ge.Msg}
			} else {
				s.bad = &Error{"grammar_refused", fmt.Sprintf("the output format refuses token %d: %v", id, err)}
			}
		}
	}
	if !s.p.processes() {
		return
	}
	if s.counts == nil {
		s.counts = map[int32]int32{}
	}
	s.counts[id]++
}

// process returns the logits the draw sees: the raw ones, or a copy with
// the bias and penalties applied. Every change is per token, so the result
// does not depend on the order the maps are walked in.
func (s *Sampler) process(logits []float32) []float32 {
	if !s.p.processes() {
		return logits
	}
	w := append(s.work[:0], logits...)
	s.work = w
	for _, b := range s.p.LogitBias {
		if int(b.ID) < len(w) {
			w[b.ID] += b.Bias
		}
	}
	if rp := s.p.RepetitionPenalty; s.p.repetition() {
		pen := func(id int32) {
			if int(id) >= len(w) || id < 0 {
				return
			}
			if w[id] > 0 {
				w[id] /= rp
			} else {
				w[id] *= rp
			}
		}
		for id := range s.prompt {
			pen(id)
		}
		for id := range s.counts {
			if _, seen := s.prompt[id]; !seen {
				pen(id)
			}
		}
	}
	if fp, pp := s.p.FrequencyPenalty, s.p.PresencePenalty; fp != 0 || pp != 0 {
		for id, n := range s.counts {
			if int(id) < len(w) && id >= 0 {
				w[id] -= fp*float32(n) + pp
			}
		}
	}
	return w
}

// Greedy returns the id of the largest logit, ties to the lowest id. NaN
// logits never win. It returns -1 when no logit is a number.
func Greedy(logits []float32) int32 {
	best := int32(-1)
	var bv float32
	for i, v := range logits {
		if v != v { // NaN
			continue
		}
		if best < 0 || v > bv {
			best, bv = int32(i), v
		}
	}
	return best
}

// Sample picks the next token from logits (one float per vocabulary id).
// Only an all-NaN (or empty) vector fails; the error then has code
// "no_candidates" and the caller should end the request, not guess a token.
func (s *Sampler) Sample(logits []float32) (int32, error) {
	if s.bad != nil {
		return -1, s.bad
	}
	s.weighed = false
	id, err := s.draw(s.process(logits))
	if err == nil {
		s.Observe(id)
		if s.bad != nil {
			// The grammar failed on its own token (grammar_ambiguous):
			// the token is not emitted.
			return -1, s.bad
		}
	}
	return id, err
}

// SampleWithin is Sample with the grammar's work bounded by b. When the
// draw needs a mask (or a token check) that b leaves no room to finish,
// it reports pending and leaves the sampler as it was, except that the
// grammar work done so far is kept: call it again with the same logits
// (at a later step, with a new budget) to go on. The token it finally
// draws is the one Sample would have drawn. Checking the drawn token (and
// a handful of candidates) is grammar work too: a few units each for an
// ordinary schema, which the call does without asking b
// (freeCheckUnits), but up to MaxStacks stacks stepped by each of the
// token's bytes for a wide one, which takes b in slices like a mask. The
// returned token was checked, so its Accept (Observe) does no work.
func (s *Sampler) SampleWithin(logits []float32, b Budget) (id int32, pending bool, err error) {
	if s.bad != nil {
		return -1, false, s.bad
	}
	src, n := *s.src, s.n
	s.budget, s.free = b, freeCheckUnits
	id, err = s.draw(s.process(logits))
	s.budget = nil
	if err == errPending {
		*s.src, s.n = src, n
		s.weighed = true
		return -1, true, nil
	}
	s.weighed = false
	if err == nil {
		s.Observe(id)
		if s.bad != nil {
			return -1, false, s.bad
		}
	}
	return id, false, err
}

func (s *Sampler) draw(logits []float32) (int32, error) {
	id, err := s.drawOne(logits)
	if err != nil || s.m == nil || s.budget == nil {
		return id, err
	}
	// A token drawn from the mask was not checked: check it now, within
	// the budget, so that its Accept (Observe) takes the check's result
	// instead of stepping every stack through its bytes on the shared
	// step. (A token checked already costs nothing here.)
	if _, err := s.allowed(id); err != nil {
		return -1, err
	}
	return id, nil
}

// allowed is the grammar's check of the drawn token id: Allowed, with the
// work past s.free taken from s.budget in slices; errPending when the
// budget runs out first (the check resumes at the next call).
func (s *Sampler) allowed(id int32) (bool, error) {
	if s.outside(id) {
		return true, nil
	}
	if s.budget == nil {
		return s.m.Allowed(id), nil
	}
	if s.free > 0 {
		ok, done, used := s.m.CheckWithin(id, s.free)
		s.free -= used
		if done {
			return ok, nil
		}
	}
	for {
		if !s.budget.Left() {
			return false, errPending
		}
		ok, done, used := s.m.CheckWithin(id, sliceUnits)
		s.budget.Spend(used)
		if done {
			return ok, nil
		}
	}
}

func (s *Sampler) drawOne(logits []float32) (int32, error) {
	if s.p.Greedy() {
		id := Greedy(logits)
		if s.m != nil && id >= 0 {
			ok, err := s.allowed(id)
			if err != nil {
				return -1, err
			}
			if !ok {
				id = -1
			}
		}
		if s.m != nil && id < 0 {
			var err error
			if id, err = s.greedyAllowed(logits); err != nil {
				return -1, err
			}
			if id < 0 {
				return -1, s.noneAllowed()
			}
		}
		if id < 0 {
			return -1, &Error{"no_candidates", "every logit is NaN; the model produced no usable distribution"}
		}
		return id, nil
	}
	if !s.truncates(len(logits)) {
		id, ok := s.drawAll(logits)
		if !ok {
			return -1, errNoFinite
		}
		s.n++
		if s.m == nil {
			return id, nil
		}
		if ok, err := s.allowed(id); err != nil || ok {
			return id, err
		}
		// Refused: the redraw is over the allowed finite ids in id order
		// (truncate with no limit, then redraw's filter), drawn from the
		// weights drawAll just left in s.probs.
		return s.redrawAll(logits)
	}
	c := s.truncate(logits)
	if len(c) == 0 {
		return -1, errNoFinite
	}
	var total float64
	for _, x := range c {
		total += x.prob
	}
	id := pick(c, total, s.rng.Float64())
	s.n++
	if s.m == nil {
		return id, nil
	}
	if ok, err := s.allowed(id); err != nil || ok {
		return id, err
	}
	return s.redraw(logits, c)
}

var errNoFinite = &Error{"no_candidates", "no logit is a finite number; the model produced no usable distribution"}

// truncates reports whether min-p, top-k or top-p can drop a candidate
// from a vocabulary of n.
func (s *Sampler) truncates(n int) bool {
	return s.p.MinP > 0 || (s.p.TopK > 0 && s.p.TopK < n) || (s.p.TopP > 0 && s.p.TopP < 1)
}

// drawAll is truncate, the sum and pick for an untruncated draw (the
// default of a request that sets only a temperature), without building
// the candidate list: on a 151k vocabulary the 16-byte candidates, their
// appends and the float64 infinity checks cost as much as the exps. It
// does the same float operations in the same order, so it draws the same
// token with the same uniform (TestDrawAllMatchesTruncate): a non-finite
// logit gets probability 0, and subtracting 0 in the walk, or adding it
// to the total, changes neither. ok is false when no logit is finite.
func (s *Sampler) drawAll(logits []float32) (id int32, ok bool) {
	if !s.weighed {
		s.total, s.last = s.weighAll(logits)
	}
	total, last := s.total, s.last
	if last < 0 {
		return -1, false
	}
	return walkAll(s.probs, total, s.rng.Float64(), last), true
}

// weighAll fills s.probs with exp((logit-max)/T), 0 for a non-finite
// logit, and returns their sum and the last finite id (-1: none).
func (s *Sampler) weighAll(logits []float32) (total float64, last int) {
	maxv := float32(math.Inf(-1))
	for _, v := range logits {
		// v > maxv skips NaN and -Inf, v <= MaxFloat32 skips +Inf.
		if v > maxv && v <= math.MaxFloat32 {
			maxv = v
		}
	}
	if maxv < -math.MaxFloat32 {
		return 0, -1
	}
	if cap(s.probs) < len(logits) {
		s.probs = make([]float64, len(logits))
	}
	probs := s.probs[:len(logits)]
	s.probs = probs
	invT := 1 / float64(s.p.Temperature)
	last = -1
	for i, v := range logits {
		if !(v >= -math.MaxFloat32 && v <= math.MaxFloat32) {
			probs[i] = 0
			continue
		}
		p := math.Exp(float64(v-maxv) * invT)
		probs[i] = p
		total += p
		last = i
	}
	return total, last
}

// walkAll is pick over probs, falling back to the last finite id.
func walkAll(probs []float64, total, u float64, last int) int32 {
	r := u * total
	for i, p := range probs {
		r -= p
		if r < 0 {
			return int32(i)
		}
	}
	// Rounding can leave r at exactly 0 after the last subtraction.
	return int32(last)
}

// pick walks c to the candidate where u (in [0,1)) of the mass falls.
func pick(c []cand, total, u float64) int32 {
	r := u * total
	for _, x := range c {
		r -= x.prob
		if r < 0 {
			return x.id
		}
	}
	// Rounding can leave r at exactly 0 after the last subtraction.
	return c[len(c)-1].id
}

// Work goes on with the token check or the mask a pending SampleWithin
// stopped in, within b, and reports whether it is done (or none was
// pending): only then is
// calling SampleWithin again worth its cost, which repeats the draw
// (bias, penalties, truncation over the vocabulary).
func (s *Sampler) Work(b Budget) bool {
	if s.m == nil {
		return true
	}
	s.budget, s.free = b, 0
	defer func() { s.budget = nil }()
	if id, ok := s.m.CheckPending(); ok {
		if _, err := s.allowed(id); err != nil {
			return false
		}
	}
	if s.job == nil {
		return true
	}
	_, err := s.allowedMask(len(s.mask) * 64)
	return err == nil
}

// allowedMask is the grammar's allowed set, computed into s.mask as far
// as the budget lets it; it fails with errPending when the budget runs
// out first.
func (s *Sampler) allowedMask(vocab int) ([]uint64, error) {
	if s.maskOK {
		return s.mask, nil
	}
	if s.job == nil {
		w := (vocab + 63) / 64
		if cap(s.mask) < w {
			s.mask = make([]uint64, w)
		}
		s.mask = s.mask[:w]
		s.job = s.m.MaskJob(s.mask)
	}
	for {
		if s.budget != nil && !s.budget.Left() {
			return nil, errPending
		}
		used, done := s.job.Run(sliceUnits)
		if s.budget != nil {
			s.budget.Spend(used)
		}
		if done {
			s.maskOver = s.job.Over()
			s.job, s.maskOK = nil, true
			s.freeBits(s.mask)
			return s.mask, nil
		}
	}
}

func has(mask []uint64, id int32) bool { return mask[id>>6]&(1<<(id&63)) != 0 }

// smallCheck is the candidate count below which each is checked alone
// rather than masking the whole vocabulary (unless the matcher is Costly:
// then one check costs as much as a slice of the mask).
const smallCheck = 32

// redraw draws again after the grammar refused the drawn token; see
// Sampler's doc for the distribution.
func (s *Sampler) redraw(logits []float32, c []cand) (int32, error) {
	var mask []uint64
	ok := s.allowed
	if len(c) > smallCheck || s.m.Costly() {
		var err error
		if mask, err = s.allowedMask(len(logits)); err != nil {
			return -1, err
		}
		ok = func(id int32) (bool, error) { return has(mask, id), nil }
	}
	// A check cut short by the budget leaves c half filtered: the
	// repeated draw truncates the logits into it afresh.
	kept := c[:0]
	var total float64
	for _, x := range c {
		in, err := ok(x.id)
		if err != nil {
			return -1, err
		}
		if in {
			kept = append(kept, x)
			total += x.prob
		}
	}
	if len(kept) == 0 {
		if mask == nil {
			var err error
			if mask, err = s.allowedMask(len(logits)); err != nil {
				return -1, err
			}
		}
		maxv := float32(math.Inf(-1))
		for i, v := range logits {
			if has(mask, int32(i)) && v == v && !math.IsInf(float64(v), 0) {
				kept = append(kept, cand{id: int32(i), logit: v})
				maxv = max(maxv, v)
			}
		}
		invT := 1 / float64(s.p.Temperature)
		for i := range kept {
			kept[i].prob = math.Exp(float64(kept[i].logit-maxv) * invT)
			total += kept[i].prob
		}
		s.cand = kept
	}
	if len(kept) == 0 {
		return -1, s.noneAllowed()
	}
	return pick(kept, total, s.redrawUniform()), nil
}

// redrawAll is redraw(logits, truncate(logits)) for an untruncated draw,
// without the candidate list: the allowed finite ids in id order are the
// mask's set bits whose logits are finite, and their weights are the ones
// weighAll computed (truncate's, bit for bit: TestWeighAllMatchesTruncate).
// Summing and walking them in that order is pick over redraw's kept list,
// so it draws the same token (TestRedrawAllMatchesRedraw). On a 151k
// vocabulary this saves building 151k candidates on every refused draw,
// which with a narrow grammar is nearly every draw.
func (s *Sampler) redrawAll(logits []float32) (int32, error) {
	mask, err := s.allowedMask(len(logits))
	if err != nil {
		return -1, err
	}
	probs := s.probs[:len(logits)]
	var total float64
	last := -1
	for w, word := range mask {
		for b := word; b != 0; b &= b - 1 {
			i := w*64 + tz(b)
			if i >= len(logits) {
				break
			}
			if v := logits[i]; v == v && !math.IsInf(float64(v), 0) {
				total += probs[i]
				last = i
			}
		}
	}
	if last < 0 {
		return -1, s.noneAllowed()
	}
	r := s.redrawUniform() * total
	for w, word := range mask {
		for b := word; b != 0; b &= b - 1 {
			i := w*64 + tz(b)
			if i >= len(logits) {
				break
			}
			if v := logits[i]; v == v && !math.IsInf(float64(v), 0) {
				r -= probs[i]
				if r < 0 {
					return int32(i), nil
				}
			}
		}
	}
	// Rounding can leave r at exactly 0 after the last subtraction.
	return int32(last), nil
}

// noneAllowed is the error of a constrained draw that found no token to
// draw: the grammar allows none of the vocabulary here (the schema asks
// for text this model cannot spell: the request's fault), or allows only
// tokens whose logits are unusable (the model's).
func (s *Sampler) noneAllowed() error {
	if s.maskOK {
		empty := true
		for _, w := range s.mask {
			if w != 0 {
				empty = false
				break
			}
		}
		if empty && s.maskOver {
			// Not a dead end of the schema: every way on is more
			// parses than the grammar follows.
			ge := grammar.ErrAmbiguous()
			return &Error{ge.Code, ge.Msg}
		}
		if empty {
			return &Error{"grammar_dead_end", "the output format allows no token of this model's vocabulary here: the schema asks for text the model cannot spell (a pattern, const or enum value); simplify that part of the schema"}
		}
	}
	return &Error{"no_candidates", "the output format allows no token with a usable logit here"}
}

// redrawUniform is a uniform in [0,1) that depends only on the seed and
// the index of the token being drawn (splitmix64 of both), so a redraw
// uses none of the main stream's draws.
func (s *Sampler) redrawUniform() float64 {
	z := s.p.Seed ^ (s.n * 0x9E3779B97F4A7C15) ^ pcgStream
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	z ^= z >> 31
	return float64(z>>11) / (1 << 53)
}

// greedyAllowed is the allowed token with the largest logit (ties to the
// lowest id), or -1.
func (s *Sampler) greedyAllowed(logits []float32) (int32, error) {
	mask, err := s.allowedMask(len(logits))
	if err != nil {
		return -1, err
	}
	best := int32(-1)
	var bv float32
	for w, bitsW := range mask {
		for bitsW != 0 {
			b := bitsW & -bitsW
			bitsW ^= b
			i := int32(w*64) + int32(tz(b))
			if int(i) >= len(logits) {
				break
			}
			v := logits[i]
			if v != v {
				continue
			}
			if best < 0 || v > bv {
				best, bv = i, v
			}
		}
	}
	return best, nil
}

// Candidates returns the tokens s may draw from for logits, with their
// renormalised probabilities, most likely first (ties: lower id first).
// Tests and logprob reporting use it; Sample uses the same code.
func (s *Sampler) Candidates(logits []float32) (ids []int32, probs []float64) {
	logits = s.process(logits)
	if s.p.Greedy() {
		id := Greedy(logits)
		if id < 0 {
			return nil, nil
		}
		return []int32{id}, []float64{1}
	}
	c := s.truncate(logits)
	slices.SortFunc(c, before)
	var total float64
	for _, x := range c {
		total += x.prob
	}
	for _, x := range c {
		ids = append(ids, x.id)
		probs = append(probs, x.prob/total)
	}
	return ids, probs
}

// before orders candidates most likely first, ties to the lower id, so the
// kept set and the draw never depend on sort stability.
func before(a, b cand) int {
	switch {
	case a.logit > b.logit:
		return -1
	case a.logit < b.logit:
		return 1
	}
	return int(a.id - b.id)
}

// truncate returns the kept candidates with unnormalised probabilities
// exp((logit-max)/T), ordered by before when top-k or top-p is active (the
// order of an untruncated set is id order, which is as deterministic).
func (s *Sampler) truncate(logits []float32) []cand {
	c := s.cand[:0]
	maxv := float32(math.Inf(-1))
	for i, v := range logits {
		if v != v || math.IsInf(float64(v), 0) {
			continue // NaN and ±Inf carry no usable probability
		}
		c = append(c, cand{id: int32(i), logit: v})
		if v > maxv {
			maxv = v
		}
	}
	s.cand = c
	if len(c) == 0 {
		return c
	}
	invT := 1 / float64(s.p.Temperature)
	if k := s.p.TopK; k > 0 && k < len(c) && s.p.MinP == 0 {
		// top-k orders by logit, so without min-p (which needs every
		// probability) it can run first and only the k kept need an exp:
		// the same values, since the max is among them.
		c = topK(c, k)
		for i := range c {
			c[i].prob = math.Exp(float64(c[i].logit-maxv) * invT)
		}
		if p := float64(s.p.TopP); p > 0 && p < 1 {
			c = topP(c, p)
		}
		return c
	}
	for i := range c {
		c[i].prob = math.Exp(float64(c[i].logit-maxv) * invT)
	}
	if mp := float64(s.p.MinP); mp > 0 {
		// After the max-shift the most likely token has probability 1, so
		// the threshold min_p * p_max is min_p itself.
		kept := c[:0]
		for _, x := range c {
			if x.prob >= mp {
				kept = append(kept, x)
			}
		}
		c = kept
	}
	if k := s.p.TopK; k > 0 && k < len(c) {
		c = topK(c, k)
	}
	if p := float64(s.p.TopP); p > 0 && p < 1 {
		c = topP(c, p)
	}
	return c
}

// topK keeps the k best by before. Ties at the boundary go to lower ids.
// A full sort costs O(n log n) on 32k-150k vocabularies every step; a
// bounded heap holding the k best so far costs O(n log k), and most
// candidates are rejected by one comparison with the heap's worst.
func topK(c []cand, k int) []cand {
	h := make([]cand, 0, k) // min-heap by before: h[0] is the worst kept
	worse := func(a, b cand) bool { return before(a, b) > 0 }
	down := func(i int) {
		for {
			l := 2*i + 1
			if l >= len(h) {
				return
			}
			m := l
			if r := l + 1; r < len(h) && worse(h[r], h[l]) {
				m = r
			}
			if !worse(h[m], h[i]) {
				return
			}
			h[i], h[m] = h[m], h[i]
			i = m
		}
	}
	for _, x := range c {
		if len(h) < k {
			h = append(h, x)
			for i := len(h) - 1; i > 0; {
				p := (i - 1) / 2
				if !worse(h[i], h[p]) {
					break
				}
				h[i], h[p] = h[p], h[i]
				i = p
			}
			continue
		}
		if before(x, h[0]) < 0 {
			h[0] = x
			down(0)
		}
	}
	slices.SortFunc(h, before)
	return append(c[:0], h...)
}

// topP keeps the shortest prefix (in before order) whose probability mass
// reaches p of the total.
func topP(c []cand, p float64) []cand {
	var total float64
	for _, x := range c {
		total += x.prob
	}
	target := p * total
	// Only candidates whose mass is large enough can be in the prefix: find a
	// probability threshold t such that the mass at or above t already
	// reaches the target, then sort just those. Halving t from the maximum
	// (1 after the max-shift) reaches any target in a few passes.
	t := 1.0
	var sub []cand
	for {
		sub = sub[:0]
		var mass float64
		for _, x := range c {
			if x.prob >= t {
				sub = append(sub, x)
				mass += x.prob
			}
		}
		if mass >= target || t == 0 {
			break
		}
		t /= 2
		if t < 1e-300 {
			t = 0
		}
	}
	slices.SortFunc(sub, before)
	var cum float64
	n := 0
	for n < len(sub) {
		cum += sub[n].prob
		n++
		if cum >= target {
			break
		}
	}
	return append(c[:0], sub[:n]...)
}

func tz(b uint64) int { return bits.TrailingZeros64(b) }
