package tokenizer

// SentencePiece-style encoding as llama.cpp's llm_tokenizer_spm: start from
// single characters and repeatedly merge the adjacent pair whose
// concatenation is the vocabulary token with the highest score (ties: the
// leftmost pair). Characters left that are not tokens become their bytes'
// <0xNN> tokens.

type spmSym struct {
	start, n   int // bytes of the escaped text; n == 0 once merged away
	prev, next int
}

type spmBigram struct {
	left, right int
	score       float32
	size        int
}

// spmLess orders the work queue: higher score first, then leftmost.
func spmLess(a, b spmBigram) bool {
	if a.score != b.score {
		return a.score > b.score
	}
	return a.left < b.left
}

// utf8Len is llama.cpp's unicode_len_utf8: the sequence length announced by
// a lead byte, 1 for anything else, so invalid input still advances.
func utf8Len(c byte) int {
	switch c >> 4 {
	case 0xC, 0xD:
		return 2
	case 0xE:
		return 3
	case 0xF:
		return 4
	}
	return 1
}

func (t *Tokenizer) encodeSPM(text string, out []int32) []int32 {
	if text == "" {
		return out
	}
	syms := make([]spmSym, 0, len(text))
	for off := 0; off < len(text); {
		n := min(utf8Len(text[off]), len(text)-off)
		i := len(syms)
		next := i + 1
		if off+n == len(text) {
			next = -1
		}
		syms = append(syms, spmSym{start: off, n: n, prev: i - 1, next: next})
		off += n
	}
	var q heap[spmBigram]
	q.less = spmLess
	try := func(l, r int) {
		if l < 0 || r < 0 {
			return
		}
		s := text[syms[l].start : syms[r].start+syms[r].n]
		id, ok := t.toID[s]
		if !ok {
			return
		}
		q.push(spmBigram{left: l, right: r, score: t.scores[id], size: len(s)})
	}
	for i := 1; i < len(syms); i++ {
		try(i-1, i)
	}
	for q.len() > 0 {
		b := q.pop()
		l, r := &syms[b.left], &syms[b.right]
		if l.n == 0 || r.n == 0 || l.n+r.n != b.size {
			continue // stale: one side already merged elsewhere
		}
		l.n += r.n
		r.n = 0
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = b.left
		}
		try(l.prev, b.left)
		try(b.left, l.next)
	}
	for i := 0; i != -1; i = syms[i].next {
		s := text[syms[i].start : syms[i].start+syms[i].n]
		if id, ok := t.toID[s]; ok {
			out = append(out, id)
			continue
		}
		// Byte fallback. A vocabulary without the byte token maps the byte
		// to UNK rather than dropping text silently.
		for k := 0; k < len(s); k++ {
			if id := t.byteTok[s[k]]; id >= 0 {
				out = append(out, id)
			} else if t.unk >= 0 {
				out = append(out, t.unk)
			}
		}
	}
	return out
}

// heap is a binary min-heap under less (the standard library's
// container/heap boxes every element in an interface).
type heap[T any] struct {
	items []T
	less  func(a, b T) bool
}

func (h *heap[T]) len() int { return len(h.items) }

func (h *heap[T]) push(x T) {
	h.items = append(h.items, x)
	i := len(h.items) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(h.items[i], h.items[p]) {
			break
		}
		h.items[i], h.items[p] = h.items[p], h.items[i]
		i = p
	}
}

func (h *heap[T]) pop() T {
	top := h.items[0]
	last := len(h.items) - 1
	h.items[0] = h.items[last]
	h.items = h.items[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= last {
			break
		}
		m := l
		if r := l + 1; r < last && h.less(h.items[r], h.items[l]) {
			m = r
		}
		if !h.less(h.items[m], h.items[i]) {
			break
		}
		h.items[i], h.items[m] = h.items[m], h.items[i]
		i = m
	}
	return top
}
