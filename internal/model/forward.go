package model

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sluice/internal/kernels"

	"sluice/internal/quant"
)

// Model is a loaded decoder-only transformer. Weight matrices alias the
// file's mapping; a Model is immutable and shared by every Runner.
//
// The parts every architecture shares live here (token embedding, final
// norm, output projection, RoPE tables); the layer stack is the
// architecture's own blocks (see arch.go and the arch_*.go files).
type Model struct {
	cfg     Config
	tokEmbd kernels.Matrix // Vocab rows of Embd
	// embdScale multiplies every embedding row (gemma: sqrt(n_embd)); 0
	// leaves the rows as decoded.
	embdScale float32
	blocks    []block // one per layer, run in order
	outNorm   []float32
	output    kernels.Matrix // Vocab rows of Embd; token_embd itself when tied
	// ropes are the RoPE variants the layers use (one for most
	// architectures; gemma3's sliding and global layers turn by different
	// bases). An attention block names its variant by index.
	ropes []ropeParams
	// attnScale multiplies the attention scores before the softmax:
	// 1/sqrt(head_dim), or 1 where the architecture scales the queries
	// instead (gemma3).
	attnScale float32
}

// ropeParams are one RoPE variant's constants.
type ropeParams struct {
	// scale = base^(-2/RopeDim), ggml's theta_scale.
	scale float32
	// freqScale is 1/factor of linear RoPE scaling (1 without).
	freqScale float32
	// freqs are per-pair frequency divisors (rope_freqs.weight), or nil.
	freqs []float32
}

// Config returns the model's shape.
func (m *Model) Config() Config { return m.cfg }

// Seq is one sequence's share of a forward step: Tokens at positions Pos,
// Pos+1, ...; their K/V are written through KV, which also serves every
// earlier position's K/V.
type Seq struct {
	Tokens []int32
	Pos    int // position of Tokens[0]
	KV     KV
	// AllLogits asks for the logits of every token, not just the last
	// (teacher forcing, prompt logprobs).
	AllLogits bool
	// NoLogits asks for no logits (a prompt chunk before the prompt's
	// last, whose logits nobody reads): the sequence's rows stop after
	// the last layer's attention, which writes their K/V, so the last
	// layer's FFN and the output projection (a 1-row pass over the
	// vocabulary's weights, ~0.9 ms of a 64-token chunk's step on
	// bench-15M-q8_0) are not run for it, and its Result has no Logits.
	// Ignored with AllLogits. Other sequences' bits do not change: every
	// row is computed alone.
	NoLogits bool
}

// Result is one sequence's outcome of a step.
type Result struct {
	// Logits holds Vocab floats per returned position: one position (the
	// last token) or, with AllLogits, one per token in order. The slice is
	// the caller's.
	Logits []float32
	// Err stops this sequence only; it is an *Error whose cause may be the
	// KV view's error. Logits is nil when Err is set.
	Err error
}

// Runner is one worker's scratch space for forward steps. It is not safe for
// concurrent use; each worker goroutine owns one.
type Runner struct {
	m   *Model
	par *kernels.Parallel

	// n is the number of token rows in the current step; every
	// activation below holds n rows. In the last layer it may shrink to
	// the rows whose logits the step returns (keepOutputRows; compacted).
	n         int
	compacted bool
	// res is the current step's results: a block that fails a sequence
	// (its KV view refused a read) records the error there.
	res []Result
	// Per-token activations, grown to the largest step seen. x is the
	// residual stream, xn a normed copy (a block's input), o a block's
	// output; q, k, v, att the attention's; g, u the dense FFN's.
	x, xn, q, k, v, att, o, g, u []float32
	logits                       []float32
	rcos, rsin                   [][]float32 // per RoPE variant: the table, RopeDim/2 per token
	tokID, tokPos                []int32     // the step's tokens and positions, in row order
	acts                         []active
	units                        []unit
	spans                        []span
	scores                       [][]float32 // one per attention slot
	wide                         [][]float32 // one per attention slot: a block's queries, outputs and tile partials, packed
	sums                         [][]float64 // one per attention slot: the block's rows' softmax sums
	deq                          [][]float32 // one per attention slot: a Q8_0 page piece's rows dequantized (attn_q8.go)
	q8s                          []span      // one per attention slot: the F32 span over deq
	splitToks                    []splitTok  // decode tokens whose tiles are split across units
	partO, partM                 []float32   // their per-tile partials: outputs, maxes
	partL                        []float64   // and sums
	// splitMin is the fewest tiles a decode token has for its attention
	// to be split across units (flash-decoding); 0: flashSplitTiles+1.
	// Tests lower it to split short contexts (the bits do not change).
	splitMin int
	// pauseMACs is attnPauseMACs unless set (tests lower it to pause
	// inside short attentions; the bits do not change).
	pauseMACs int
	slots     chan int // free attention slots (indices into scores, wide)
	rows      []int
	// window is the current attention layer's sliding window in
	// positions (0: the whole context).
	window int
	// moe is the mixture-of-experts blocks' scratch (moe.go).
	moe moeScratch
	// inStep: a step is under way on this runner (ForwardBetween);
	// between is its hook at the pause points, or nil.
	inStep  bool
	between func(layer int)
}

// pause is a pause point of the step in layer l (ForwardBetween).
func (r *Runner) pause(l int) {
	if r.between != nil {
		r.between(l)
	}
}

// NewRunner returns a runner whose matmuls and attention run on par (nil:
// the caller's goroutine alone).
func (m *Model) NewRunner(par *kernels.Parallel) *Runner {
	return &Runner{m: m, par: par, scores: make([][]float32, par.Threads())}
}

func grow(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n, n+n/4)
	}
	return b[:n]
}

// active is a sequence in the batch: its token rows are [off, off+n).
type active struct {
	idx  int // index into seqs / results
	off  int
	n    int
	pos  int
	kv   KV
	ps   int // the view's page size
	f16  bool
	q8   bool
	span int // first of its blocks in Runner.spans
	blk0 int // the block index of Runner.spans[span]: blocks before it are outside the layer's window, never read
	dead bool
	all  bool // the sequence asked for every token's logits (Seq.AllLogits)
	none bool // the sequence asked for no logits (Seq.NoLogits, not AllLogits)
}

// span is one block of a sequence's past K/V as its view served it: float32
// rows, binary16 rows (k16, v16) from an F16 view, or Q8_0 rows (k8, v8)
// from a Q8_0 view.
type span struct {
	k, v     []float32
	k16, v16 []uint16
	k8, v8   []byte
}

// elementwise runs fn over [0, n) split across the pool when n is large
// enough to pay for waking it. Each element is computed alone, so the
// split cannot change a result.
func (r *Runner) elementwise(n int, fn func(lo, hi int)) {
	const minParallel = 1 << 15
	if n < minParallel || r.par.Threads() < 2 {
		fn(0, n)
		return
	}
	// Several pieces per thread, claimed dynamically: the faster core
	// takes more of them.
	chunks := 4 * r.par.Threads()
	r.par.For(chunks, func(lo, hi int) {
		for c := lo; c < hi; c++ {
			fn(c*n/chunks, (c+1)*n/chunks)
		}
	})
}

// perToken runs fn over token rows [0, n) split across the pool when the
// step has enough work (a prefill chunk); rowCost is the work of one row in
// elements. Each row is computed alone, so the split cannot change a
// result (batch invariance). In a 128-token prefill, norms and RoPE left
// on the caller were ~15% of its time with the other core idle.
func (r *Runner) perToken(n, rowCost int, fn func(lo, hi int)) {
	const minParallel = 1 << 13 // a few µs of work; a wake costs < 1 µs
	if n < 2 || n*rowCost < minParallel || r.par.Threads() < 2 {
		fn(0, n)
		return
	}
	r.par.For(n, fn)
}

// minParallelMACs is the least attention work spread over the pool. A
// split costs about a microsecond with the workers polling, but a decode
// step's units are few and small (one per KV head), and per position
// each costs more than its multiply-adds at small head dimensions: at
// 1<<14, stories260K (head dim 8) decoded at 2 threads at 9.5-10.2k tok/s
// from position 16 to 272, against 16k at 1 thread; at 1<<16, 14.3k
// (bench-15M-q8_0 884 -> 901, interleaved, loaded machine).
const minParallelMACs = 1 << 16

// attnSlots is how many chunks per thread a decode step's attention units
// are grouped into (prefill units are claimed one at a time).
const attnSlots = 4

// unit is one (token, KV head) of attention, or nt > 1 consecutive
// tokens of a prefill (attendTokens), or with split the tiles [tl0, tl1)
// of one decode token (flash-decoding; partials at part+k).
type unit struct {
	a        int32 // index into acts
	t        int32 // token index within the sequence
	kh       int32
	nt       int32 // tokens from t
	nh       int32 // KV heads from kh (0: one)
	split    bool
	tl0, tl1 int32
	part     int32
}

// Forward runs one step over seqs: every token of every sequence goes
// through each layer's matmuls together; attention is per sequence and
// reads past K/V only through that sequence's view. A sequence whose input
// is invalid or whose KV view fails gets an error in its Result; the others
// are unaffected, bit for bit (batch invariance, see DESIGN.md).
//
// The Logits slices point into the runner's scratch and are valid until its
// next Forward; callers that keep them must copy.
func (r *Runner) Forward(seqs []Seq) []Result { return r.ForwardBetween(seqs, nil) }

// ForwardBetween is Forward that calls between(l) at the step's pause
// points: after layer l's attention, and after layer l for every layer
// but the last (two a layer: a step carrying a long chunk spends about
// as long in its attention as in its FFN), and inside layer l's
// attention when it is long (attendPieces: a chunk deep into a long
// prompt). At each the step can pause while
// the caller runs a nested step of other sequences on ANOTHER runner (its
// own scratch; the same thread pool is fine, no kernel of this step is
// running then). The paused step resumes at layer l+1 with its rows as
// they were; the nested step must not carry a sequence of this step (this
// step's rows of layers <= l are written to its views, the rest not yet).
// Every row is computed alone and reads only its own sequence's K/V, so
// both steps' outputs are bitwise what they would be unpaused
// (TestForwardBetweenIsBitwise). A runner refuses to be re-entered from
// its own between: that would overwrite the paused step's rows.
func (r *Runner) ForwardBetween(seqs []Seq, between func(layer int)) []Result {
	if r.inStep {
		panic("model: a Runner's step was re-entered (a nested step needs a runner of its own)")
	}
	r.inStep, r.between = true, between
	defer func() { r.inStep, r.between = false, nil }()
	m, c := r.m, r.m.cfg
	res := make([]Result, len(seqs))
	r.acts = r.acts[:0]
	total := 0
	for i, s := range seqs {
		if err := m.checkSeq(s); err != nil {
			res[i].Err = err
			continue
		}
		r.acts = append(r.acts, active{idx: i, off: total, n: len(s.Tokens), pos: s.Pos, kv: s.KV, ps: s.KV.PageSize(), f16: isF16(s.KV), q8: isQ8(s.KV), all: s.AllLogits, none: s.NoLogits && !s.AllLogits})
		total += len(s.Tokens)
	}
	if total == 0 {
		return res
	}
	acts := r.acts
	E, Q, KD := c.Embd, c.QDim(), c.KVDim()
	r.n, r.res, r.compacted = total, res, false
	r.x, r.xn = grow(r.x, total*E), grow(r.xn, total*E)
	r.q, r.att = grow(r.q, total*Q), grow(r.att, total*Q)
	r.k, r.v = grow(r.k, total*KD), grow(r.v, total*KD)
	r.o = grow(r.o, total*E)

	half := c.RopeDim / 2
	for len(r.rcos) < len(m.ropes) {
		r.rcos, r.rsin = append(r.rcos, nil), append(r.rsin, nil)
	}
	for i := range m.ropes {
		r.rcos[i], r.rsin[i] = grow(r.rcos[i], total*half), grow(r.rsin[i], total*half)
	}
	r.tokID, r.tokPos = r.tokID[:0], r.tokPos[:0]
	for _, a := range acts {
		for j, tok := range seqs[a.idx].Tokens {
			r.tokID, r.tokPos = append(r.tokID, tok), append(r.tokPos, int32(a.pos+j))
		}
	}
	// Each token's embedding row and RoPE angles depend on it alone
	// (~1 µs of cosines and sines per token at head dim 48).
	r.perToken(total, E+8*half*len(m.ropes), func(lo, hi int) {
		for t := lo; t < hi; t++ {
			m.embed(r.tokID[t], r.x[t*E:(t+1)*E])
			for i := range m.ropes {
				m.ropes[i].angles(int(r.tokPos[t]), r.rcos[i][t*half:(t+1)*half], r.rsin[i][t*half:(t+1)*half])
			}
		}
	})
	for l, b := range m.blocks {
		b.forward(r, l)
		if l < len(m.blocks)-1 {
			r.pause(l)
		}
	}

	// Only the rows whose logits are wanted go through the output matmul:
	// for decode and prefill that is one row per sequence. The last block
	// may have kept only those rows already (keepOutputRows).
	var rows []int
	if r.compacted {
		rows = r.rows[:0]
		for i := 0; i < r.n; i++ {
			rows = append(rows, i)
		}
		r.rows = rows
	} else {
		rows = r.outputRows()
	}
	if len(rows) == 0 {
		return res
	}
	for i, t := range rows {
		copy(r.o[i*E:(i+1)*E], r.x[t*E:(t+1)*E])
	}
	rmsNorm(r.xn, r.o, m.outNorm, len(rows), c.RMSEps)
	r.logits = grow(r.logits, len(rows)*c.Vocab)
	logits := r.logits
	kernels.MatMul(r.par, logits, &m.output, r.xn, len(rows))
	i := 0
	for _, a := range acts {
		if a.dead || a.none {
			continue
		}
		n := 1
		if a.all {
			n = a.n
		}
		res[a.idx].Logits = logits[i*c.Vocab : (i+n)*c.Vocab : (i+n)*c.Vocab]
		i += n
	}
	return res
}

// outputRows lists the step's rows whose logits it returns, in order:
// each live sequence's last token, or all its tokens with AllLogits, or
// none with NoLogits.
func (r *Runner) outputRows() []int {
	rows := r.rows[:0]
	for _, a := range r.acts {
		if a.dead || a.none {
			continue
		}
		if a.all {
			for j := 0; j < a.n; j++ {
				rows = append(rows, a.off+j)
			}
		} else {
			rows = append(rows, a.off+a.n-1)
		}
	}
	r.rows = rows
	return rows
}

// keepOutputRows is called by every block right after its attention.
// In the last layer the rest of the block feeds only the logits, so only
// the rows whose logits the step returns go on (llama.cpp's graphs do the
// same with inp_out_ids): the residual stream r.x and the attention
// output r.o are compacted to those rows and r.n shrinks. A prefill of N
// tokens then runs the last layer's FFN on one row instead of N. Every
// block computes each row alone, so the rows kept get the same bits
// either way; the layer's K/V were written by the attention before.
//
// It is also the step's pause point inside layer l (ForwardBetween): the
// attention's K/V are written and the rest of the block is to come.
func (r *Runner) keepOutputRows(l int) {
	r.pause(l)
	if l != len(r.m.blocks)-1 {
		return
	}
	rows := r.outputRows()
	if len(rows) == r.n {
		return // every row (rows ascend, so this is the identity)
	}
	E := r.m.cfg.Embd
	for i, t := range rows { // i <= t: copying forward in place is safe
		if i != t {
			copy(r.x[i*E:(i+1)*E], r.x[t*E:(t+1)*E])
			copy(r.o[i*E:(i+1)*E], r.o[t*E:(t+1)*E])
		}
	}
	r.n, r.compacted = len(rows), true
}

func (m *Model) checkSeq(s Seq) error {
	c := m.cfg
	if len(s.Tokens) == 0 {
		return errf(CodeBadToken, "a sequence in the step has no tokens")
	}
	if s.KV == nil {
		return errf(CodeKV, "a sequence in the step has no KV view")
	}
	if ps := s.KV.PageSize(); ps <= 0 {
		return errf(CodeKV, "the KV view reports a page size of %d", ps)
	}
	if s.Pos < 0 || s.Pos+len(s.Tokens) > c.Context {
		return errf(CodeBadPosition, "positions %d..%d are outside the model's context of %d", s.Pos, s.Pos+len(s.Tokens)-1, c.Context)
	}
	for _, t := range s.Tokens {
		if t < 0 || int(t) >= c.Vocab {
			return errf(CodeBadToken, "token id %d is outside the vocabulary of %d", t, c.Vocab)
		}
	}
	return nil
}

// embed writes token tok's embedding row into dst, decoding just that row.
func (m *Model) embed(tok int32, dst []float32) {
	w := &m.tokEmbd
	rb, _ := w.Type.RowBytes(w.Cols)
	if err := quant.Dequantize(w.Type, w.Data[int(tok)*rb:(int(tok)+1)*rb], dst); err != nil {
		panic(err) // Load checked the type and the size
	}
	if m.embdScale != 0 {
		kernels.Scale(dst, m.embdScale)
	}
}

// errBlockShort is the cause when a view serves fewer positions than the
// step needs: attention would otherwise run on a shorter context silently.
var errBlockShort = errors.New("the KV view holds fewer written positions than the sequence's context")

// attention computes r.att for every live sequence's tokens of layer l.
// Past K/V come only from the view's Block (after this step's Put), never
// from r.k/r.v. With a sliding window (r.window > 0) a token at position p
// attends over positions (p-window, p] and the blocks wholly before the
// step's first token's window are never asked for: a sliding layer cannot
// read outside its window, even through the checked view.
func (r *Runner) attention(l int) {
	c := r.m.cfg
	KD := c.KVDim()
	res := r.res
	// Gather each sequence's blocks serially: views need not be safe for
	// concurrent use, and a failed read must fail the sequence before any
	// arithmetic uses it.
	r.spans = r.spans[:0]
	r.units = r.units[:0]
	r.splitToks = r.splitToks[:0]
	nPart := 0
	splitMin := r.splitMin
	if splitMin == 0 {
		splitMin = flashSplitTiles + 1
	}
	for ai := range r.acts {
		a := &r.acts[ai]
		if a.dead {
			continue
		}
		last := a.pos + a.n - 1
		nb := last/a.ps + 1
		a.span = len(r.spans)
		a.blk0 = 0
		if r.window > 0 {
			a.blk0 = max(0, a.pos+1-r.window) / a.ps
		}
		for b := a.blk0; b < nb && !a.dead; b++ {
			var k, v []float32
			var k16, v16 []uint16
			var k8, v8 []byte
			var n, nk, nv int
			var err error
			switch {
			case a.f16:
				k16, v16, n, err = a.kv.(KV16).Block16(l, b)
				nk, nv = len(k16), len(v16)
			case a.q8:
				// Rows of KD/32 blocks: counted in elements for the
				// length check below.
				k8, v8, n, err = a.kv.(KVQ8).BlockQ8(l, b)
				nk, nv = len(k8)/q8Row(KD)*KD, len(v8)/q8Row(KD)*KD
			default:
				k, v, n, err = a.kv.Block(l, b)
				nk, nv = len(k), len(v)
			}
			need := min(a.ps, last+1-b*a.ps)
			switch {
			case err != nil:
				a.dead = true
				res[a.idx].Err = &Error{Code: CodeKV, Msg: fmt.Sprintf("reading K/V block %d of layer %d", b, l), Err: err}
			case n < need || nk < need*KD || nv < need*KD:
				a.dead = true
				res[a.idx].Err = &Error{Code: CodeKV, Msg: fmt.Sprintf("block %d of layer %d has %d positions, the step needs %d", b, l, n, need), Err: errBlockShort}
			case a.f16:
				r.spans = append(r.spans, span{k16: k16[:need*KD], v16: v16[:need*KD]})
			case a.q8:
				r.spans = append(r.spans, span{k8: k8[:need*q8Row(KD)], v8: v8[:need*q8Row(KD)]})
			default:
				r.spans = append(r.spans, span{k: k[:need*KD], v: v[:need*KD]})
			}
		}
		if a.dead {
			r.spans = r.spans[:a.span]
			continue
		}
		if a.n == 1 {
			lo, hi := r.tileRange(a.pos+1, a.pos+1)
			if tiles := hi - lo; tiles >= splitMin {
				// One token over a long context: its tiles are spread
				// over units (flash-decoding), folded after they ran.
				// Each unit takes every KV head, so a page's K and V
				// rows are read whole, not one head's slice at a time.
				part := int32(nPart)
				r.splitToks = append(r.splitToks, splitTok{a: int32(ai), nh: int32(c.KVHeads), part: part, tiles: int32(tiles)})
				for k := lo; k < hi; k += flashSplitTiles {
					r.units = append(r.units, unit{a: int32(ai), nt: 1, nh: int32(c.KVHeads), split: true, tl0: int32(k), tl1: int32(min(hi, k+flashSplitTiles)), part: part})
				}
				nPart += tiles
				continue
			}
		}
		// A sliding layer's tokens see different first positions, so
		// each token is its own unit; the block grouping of attendTokens
		// assumes one shared start.
		qb := queryBlock(c.Heads / c.KVHeads)
		if r.window > 0 {
			qb = 1
		}
		for t := 0; t < a.n; t += qb {
			for kh := 0; kh < c.KVHeads; kh++ {
				r.units = append(r.units, unit{a: int32(ai), t: int32(t), kh: int32(kh), nt: int32(min(qb, a.n-t))})
			}
		}
	}
	if nPart > 0 {
		r.partO = grow(r.partO, nPart*c.Heads*c.HeadDim)
		r.partM = grow(r.partM, nPart*c.Heads)
		r.partL = growF64(r.partL, nPart*c.Heads)
	}
	// A unit's result depends only on its queries and the K/V rows of
	// positions <= its own, summed in position order, so neither the split
	// across threads, nor the order units run in, nor the batch changes a
	// bit. Costliest first (later prefill tokens attend over more
	// positions), claimed in small chunks: the faster core (our two vCPUs
	// differ by up to 1.7x) takes more, and the loop ends on the cheapest
	// units, so the cores finish within a chunk of cheap units of each
	// other.
	cost := func(un unit) int {
		if un.split {
			return int(un.tl1-un.tl0) * flashTile * int(un.nh)
		}
		return int(un.nt) * (r.acts[un.a].pos + int(un.t) + int(un.nt))
	}
	macs := 0
	for _, un := range r.units {
		macs += cost(un)
	}
	perCost := 2 * c.HeadDim * (c.Heads / c.KVHeads) // multiply-adds per unit of cost
	macs *= perCost
	// Waking workers costs microseconds: below about that much arithmetic
	// (multiply-adds over every unit's context) the caller runs it alone.
	if macs < minParallelMACs || r.par.Threads() < 2 {
		r.ensureSlots(1)
		r.attendPieces(l, macs, perCost, 1, cost, func(units []unit) {
			for _, un := range units {
				r.attendTokens(un, 0)
			}
		})
		for _, sp := range r.splitToks {
			r.foldSplit(sp)
		}
		return
	}
	slices.SortStableFunc(r.units, func(x, y unit) int { return cost(y) - cost(x) })
	// A chunk's goroutine takes a free scratch slot for the chunk; at most
	// Threads() chunks run at once. Decode-sized units (one token over a
	// short context) go a few to a chunk, so a claim stays small against
	// the work.
	T := r.par.Threads()
	r.ensureSlots(T)
	r.attendPieces(l, macs, perCost, T, cost, func(units []unit) {
		// The last chunks hold the cheapest units, so chunks of several
		// units still end the loop evenly: 16 chunks per thread keep the
		// claims (atomics on lines both cores write, and a slot each)
		// well under 1% of the work.
		grain := max(1, len(units)/(prefillChunks*T))
		if macs/len(r.units) < minUnitClaim {
			grain = max(1, len(units)/(attnSlots*T))
		}
		r.par.ForGrain(len(units), grain, func(lo, hi int) {
			w := <-r.slots
			for _, un := range units[lo:hi] {
				r.attendTokens(un, w)
			}
			r.slots <- w
		})
	})
	// The folds, once every tile's partial is in: each token's alone, in
	// tile order, wherever its tiles ran.
	if len(r.splitToks) > 0 {
		r.par.For(len(r.splitToks), func(lo, hi int) {
			for _, sp := range r.splitToks[lo:hi] {
				r.foldSplit(sp)
			}
		})
	}
}

// attendPieces runs attend over r.units in one call, or, in a step that
// can pause (ForwardBetween with a hook) whose attention is longer than
// r.pauseMACs multiply-adds, over consecutive pieces of about equal
// work with a pause point of layer l between two pieces. The attention
// of a chunk deep into a long prompt was the longest stretch of a step
// without a pause point (bench-15M-q8_0, one 64-token chunk at depth 960,
// one thread: ~3 ms, against 0.8 for the layer's FFN;
// BenchmarkPauseGaps), so a co-tenant's prompt arriving during it waited
// for most of it. Every unit is computed alone whatever runs between
// two pieces, and the split decode tokens' tiles are folded after the
// last piece, so the bits cannot change (TestForwardBetweenIsBitwise);
// a nested step at the pause runs on another runner, never on this
// one's scratch.
func (r *Runner) attendPieces(l, macs, perCost, threads int, cost func(unit) int, attend func(units []unit)) {
	limit := r.pauseMACs
	if limit == 0 {
		limit = attnPauseMACs
	}
	// The bound is on a piece's time: threads share its units.
	limit = min(limit, math.MaxInt/threads) * threads
	if r.between == nil || macs <= limit || len(r.units) < 2 {
		attend(r.units)
		return
	}
	// A piece ends before the unit that would take it past the limit,
	// once it has a unit for each thread (so a unit alone may be longer;
	// fewer units than threads would leave a core idle): pieces of equal
	// shares of the work cut six equal units (bench-15M-q8_0's 64-token
	// chunk: one per head) into 2+1+1+1+1, the first twice as long as
	// the rest.
	lo, done := 0, 0
	for i, un := range r.units {
		c := cost(un) * perCost
		if i-lo >= threads && done+c > limit {
			attend(r.units[lo:i])
			r.pause(l)
			lo, done = i, 0
		}
		done += c
	}
	attend(r.units[lo:])
}

// attnPauseMACs bounds the attention work (multiply-adds) per thread
// between two pause points of a step that can pause: ~0.6 ms on one core
// of the Intel Xeon (family 6 model 167) with F16 pages, about what a
// 64-row FFN of bench-15M-q8_0 takes (BenchmarkPauseGaps). Decode steps
// and steps with no hook never split.
const attnPauseMACs = 1 << 23

// minUnitClaim is the least attention work (multiply-adds) of a unit worth
// claiming in a chunk of its own; prefillChunks is how many chunks per
// thread larger units are grouped into.
const (
	minUnitClaim  = 1 << 14
	prefillChunks = 16
)

// ensureSlots makes n scratch slots (scores, widened rows) and the free
// list of their indices.
func (r *Runner) ensureSlots(n int) {
	for len(r.scores) < n {
		r.scores = append(r.scores, nil)
	}
	for len(r.wide) < n {
		r.wide = append(r.wide, nil)
	}
	for len(r.sums) < n {
		r.sums = append(r.sums, nil)
	}
	for len(r.deq) < n {
		r.deq = append(r.deq, nil)
		r.q8s = append(r.q8s, span{})
	}
	if cap(r.slots) < n {
		r.slots = make(chan int, n)
		for w := 0; w < n; w++ {
			r.slots <- w
		}
	}
}

// pageDot is kernels.MQADot over the first p positions of page s's K rows
// of the KV head at column koff (row stride kd).
func pageDot(out []float32, os int, q []float32, m, hd int, s *span, koff, kd, p int, f16 bool) {
	if f16 {
		kernels.MQADot(out, os, q, m, hd, s.k16[koff:], kd, p)
	} else {
		kernels.MQADot(out, os, q, m, hd, s.k[koff:], kd, p)
	}
}

// pageAxpy is kernels.MQAAxpy over the first p positions of page s's V
// rows of the KV head at column koff.
func pageAxpy(y, w []float32, ws, m, hd int, s *span, koff, kd, p int, f16 bool) {
	if f16 {
		kernels.MQAAxpy(y, w, ws, m, hd, s.v16[koff:], kd, p)
	} else {
		kernels.MQAAxpy(y, w, ws, m, hd, s.v[koff:], kd, p)
	}
}

// rmsNorm: dst = src / sqrt(mean(src^2) + eps) * w, per row of len(w). The
// sum of squares is accumulated in float64, as ggml's rms_norm does, in
// kernels.SumSquares' fixed lane order, the same for every row whatever
// the batch and on every kernel path.
func rmsNorm(dst, src, w []float32, rows int, eps float32) {
	n := len(w)
	for r := 0; r < rows; r++ {
		x := src[r*n : (r+1)*n]
		mean := float32(kernels.SumSquares(x) / float64(n))
		scale := 1 / float32(math.Sqrt(float64(mean+eps)))
		kernels.ScaleMul(dst[r*n:(r+1)*n], x, scale, w)
	}
}

// addBias and addInto add through kernels.Axpy with a = 1: the product is
// exact, so each element is the one rounded sum x + y on every path.
func addBias(x, b []float32, rows int) {
	n := len(b)
	for r := 0; r < rows; r++ {
		kernels.Axpy(x[r*n:(r+1)*n], 1, b)
	}
}

func addInto(x, y []float32) {
	kernels.Axpy(x, 1, y)
}

// angles fills cs/sn (RopeDim/2 each) with the cosines and sines of
// position pos. Pair i turns by pos * base^(-2i/RopeDim), times the linear
// scaling factor, divided by the file's per-pair frequency factor if it has
// one (rope_freqs.weight, Llama 3.1 style). The angle follows ggml's
// recurrence (theta starts at pos and is multiplied by base^(-2/RopeDim) in
// float32 per pair) so it stays within an ulp of llama.cpp's. The angles
// depend only on the position, so every layer of a variant shares one
// table per token.
func (p *ropeParams) angles(pos int, cs, sn []float32) {
	theta := float32(pos)
	for i := range cs {
		t := p.freqScale * theta
		if p.freqs != nil {
			t /= p.freqs[i]
		}
		cs[i], sn[i] = float32(math.Cos(float64(t))), float32(math.Sin(float64(t)))
		theta *= p.scale
	}
}

// rope rotates the first RopeDim dimensions of each of nh heads in x by the
// angles of cs/sn: NORM pairs (2i, 2i+1), NEOX pairs (i, i+RopeDim/2).
// NORM heads go through kernels.RotatePairs on the tables expanded per
// element (the same rounded products and sums as the formulas below).
func (m *Model) rope(x []float32, nh int, cs, sn []float32) {
	hd, half := m.cfg.HeadDim, len(cs)
	if m.cfg.Rope != RopeNeox && half <= maxRopeHalf {
		var c2, s2 [2 * maxRopeHalf]float32
		for i := range cs {
			c2[2*i], c2[2*i+1] = cs[i], cs[i]
			s2[2*i], s2[2*i+1] = -sn[i], sn[i]
		}
		for h := 0; h < nh; h++ {
			kernels.RotatePairs(x[h*hd:h*hd+2*half], c2[:2*half], s2[:2*half])
		}
		return
	}
	neox := m.cfg.Rope == RopeNeox
	for h := 0; h < nh; h++ {
		for i := 0; i < half; i++ {
			a, b := h*hd+2*i, h*hd+2*i+1
			if neox {
				a, b = h*hd+i, h*hd+i+half
			}
			x0, x1 := x[a], x[b]
			x[a] = x0*cs[i] - x1*sn[i]
			x[b] = x0*sn[i] + x1*cs[i]
		}
	}
}

// maxRopeHalf bounds the rotated pairs per head that rope expands on the
// stack (head dimensions up to 256).
const maxRopeHalf = 128
