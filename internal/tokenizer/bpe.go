package tokenizer

import "unicode/utf8"

// Byte-level BPE as llama.cpp's llm_tokenizer_bpe (and Hugging Face's BPE
// model): each pre-tokenized word becomes one symbol per byte (its GPT-2
// byte-level character), then the adjacent pair with the lowest merge rank
// is merged until no pair has a rank (ties: the leftmost pair).
//
// Symbols carry token ids, not text: every merge's parts and result are
// tokens (New drops merges that are not), so a merge is one map lookup on a
// pair of ids and no strings are built.

type bpeScratch struct {
	words  [][2]int
	ids    []int32
	pr     []uint64
	mapped []byte
	syms   []bpeSym
	q      bpeQueue
}

// Both structs are kept small: a long word (a run of letters has no upper
// bound) holds a few of each per input byte.
type bpeSym struct {
	id         int32
	prev, next int32
	dead       bool
}

type bpeBigram struct {
	left, right int32
	rank        uint32
	lid, rid    int32
}

// before orders the work queue: lowest rank first, then leftmost.
func (a bpeBigram) before(b bpeBigram) bool {
	return a.rank < b.rank || a.rank == b.rank && a.left < b.left
}

// smallWord is the length up to which the quadratic scan beats the heap.
const smallWord = 48

func (t *Tokenizer) rank(l, r int32) (rank uint32, merged int32, ok bool) {
	v, ok := t.ranks[uint64(uint32(l))<<32|uint64(uint32(r))]
	return uint32(v >> 32), int32(uint32(v)), ok
}

func (t *Tokenizer) encodeBPE(text string, lo, hi int, out []int32, sc *bpeScratch) []int32 {
	sc.words = t.pre.split(text, lo, hi, sc.words[:0])
	for _, w := range sc.words {
		word := text[w[0]:w[1]]
		if t.ignoreMerges {
			sc.mapped = sc.mapped[:0]
			for k := 0; k < len(word); k++ {
				sc.mapped = utf8.AppendRune(sc.mapped, byteToRune[word[k]])
			}
			if id, ok := t.toID[string(sc.mapped)]; ok {
				out = append(out, id)
				continue
			}
		}
		if len(word) <= smallWord {
			out = t.mergeSmall(word, out, sc)
		} else {
			out = t.mergeHeap(word, out, sc)
		}
	}
	return out
}

// mergeSmall finds the best pair by scanning: for short words this is
// faster than a heap and gives the same order (lowest rank, then leftmost).
// pr[k] caches the rank of pair (k, k+1), so a merge costs two lookups.
func (t *Tokenizer) mergeSmall(word string, out []int32, sc *bpeScratch) []int32 {
	const none = ^uint64(0)
	pairRank := func(l, r int32) uint64 {
		if l < 0 || r < 0 {
			return none
		}
		if v, ok := t.ranks[uint64(uint32(l))<<32|uint64(uint32(r))]; ok {
			return v // rank<<32 | merged id: orders by rank
		}
		return none
	}
	ids := sc.ids[:0]
	for k := 0; k < len(word); k++ {
		ids = append(ids, t.byteTok[word[k]])
	}
	pr := sc.pr[:0]
	for k := 0; k+1 < len(ids); k++ {
		pr = append(pr, pairRank(ids[k], ids[k+1]))
	}
	for {
		best := -1
		for k, v := range pr {
			if v != none && (best < 0 || v>>32 < pr[best]>>32) {
				best = k
			}
		}
		if best < 0 {
			break
		}
		ids[best] = int32(uint32(pr[best]))
		ids = append(ids[:best+1], ids[best+2:]...)
		pr = append(pr[:best], pr[best+1:]...)
		if best > 0 {
			pr[best-1] = pairRank(ids[best-1], ids[best])
		}
		if best < len(pr) {
			pr[best] = pairRank(ids[best], ids[best+1])
		}
	}
	for _, id := range ids {
		if id >= 0 { // a byte missing from the vocabulary: llama.cpp drops it too
			out = append(out, id)
		}
	}
	sc.ids, sc.pr = ids, pr
	return out
}

// mergeHeap is llama.cpp's priority-queue merge, used for long words (runs
// of spaces, long numbers in some vocabularies, unbroken scripts).
func (t *Tokenizer) mergeHeap(word string, out []int32, sc *bpeScratch) []int32 {
	syms := sc.syms[:0]
	for k := 0; k < len(word); k++ {
		next := int32(k + 1)
		if k+1 == len(word) {
			next = -1
		}
		syms = append(syms, bpeSym{id: t.byteTok[word[k]], prev: int32(k - 1), next: next})
	}
	q := &sc.q
	q.items = q.items[:0]
	add := func(l, r int32) {
		if l < 0 || r < 0 || syms[l].id < 0 || syms[r].id < 0 {
			return
		}
		if rk, _, ok := t.rank(syms[l].id, syms[r].id); ok {
			q.push(bpeBigram{left: l, right: r, rank: rk, lid: syms[l].id, rid: syms[r].id})
		}
	}
	for k := int32(1); k < int32(len(syms)); k++ {
		add(k-1, k)
	}
	for q.len() > 0 {
		b := q.pop()
		l, r := &syms[b.left], &syms[b.right]
		// Stale if either side has been merged since (llama.cpp compares
		// the texts; ids are the same thing here).
		if l.dead || r.dead || l.id != b.lid || r.id != b.rid {
			continue
		}
		_, merged, _ := t.rank(b.lid, b.rid)
		l.id = merged
		r.dead = true
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = b.left
		}
		add(l.prev, b.left)
		add(b.left, l.next)
	}
	for k := int32(0); k != -1; k = syms[k].next {
		if syms[k].id >= 0 {
			out = append(out, syms[k].id)
		}
	}
	sc.syms = syms
	return out
}
