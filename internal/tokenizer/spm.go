package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// SentencePiece-style encoding as llama.cpp's llm_tokenizer_spm: start from
// single characters and repeatedly merge the adjacent pair whose
// concatenation is the vocabulary token with the highest score (ties: the
// leftmost pair). Characters left that are not tokens become their bytes'
// <0xNN> tokens.

type spmSym struct {
	start, n   int32 // bytes of the escaped text; n == 0 once merged away
	prev, next int32
}

type spmBigram struct {
	left, right int32
	score       float32
	size        int32
}

// before orders the work queue: higher score first, then leftmost.
func (a spmBigram) before(b spmBigram) bool {
	return a.score > b.score || a.score == b.score && a.left < b.left
}

// charLen is the length of the character at s[0]. For valid UTF-8 this is
// llama.cpp's unicode_len_utf8. On invalid input llama.cpp takes the length
// its lead byte announces, swallowing the bytes after it (so "\xff " loses
// its space to the invalid character); here an invalid byte is one
// character on its own, which keeps every other character intact and makes
// Decode(Encode(s)) == s hold for any bytes.
func charLen(s string) int {
	if s[0] < utf8.RuneSelf {
		return 1
	}
	_, n := utf8.DecodeRuneInString(s)
	return n
}

type spmScratch struct {
	syms []spmSym
	q    spmQueue
}

// encodeSPM tokenizes escaped text (spaces already U+2581).
//
// llama.cpp merges over the whole text at once. When no token has U+2581
// after another character (true of Llama 2's and TinyStories' vocabularies;
// New checks), no token can span the boundary before a run of U+2581 that
// follows other text, so each piece between such boundaries merges on its
// own with the same result. That keeps the work queue small, which is most
// of the cost on long prompts.
func (t *Tokenizer) encodeSPM(text string, out []int32) []int32 {
	var sc spmScratch
	if !t.spmSplitAtSpace {
		return t.encodeSPMPiece(text, out, &sc)
	}
	start := 0
	for i := 1; i < len(text); {
		k := strings.Index(text[i:], spmSpace)
		if k < 0 {
			break
		}
		i += k
		if !strings.HasSuffix(text[:i], spmSpace) {
			out = t.encodeSPMPiece(text[start:i], out, &sc)
			start = i
		}
		i += len(spmSpace)
	}
	return t.encodeSPMPiece(text[start:], out, &sc)
}

func (t *Tokenizer) encodeSPMPiece(text string, out []int32, sc *spmScratch) []int32 {
	if text == "" {
		return out
	}
	syms := sc.syms[:0]
	for off := 0; off < len(text); {
		n := charLen(text[off:])
		i := int32(len(syms))
		next := i + 1
		if off+n == len(text) {
			next = -1
		}
		syms = append(syms, spmSym{start: int32(off), n: int32(n), prev: i - 1, next: next})
		off += n
	}
	q := &sc.q
	q.items = q.items[:0]
	try := func(l, r int32) {
		if l < 0 || r < 0 {
			return
		}
		s := text[syms[l].start : syms[r].start+syms[r].n]
		id, ok := t.toID[s]
		if !ok {
			return
		}
		q.push(spmBigram{left: l, right: r, score: t.scores[id], size: int32(len(s))})
	}
	for i := int32(1); i < int32(len(syms)); i++ {
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
	for i := int32(0); i != -1; i = syms[i].next {
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
	sc.syms = syms
	return out
}
