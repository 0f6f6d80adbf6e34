package synth

import (
	"fmt"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// byteToUnicode is GPT-2's reversible byte -> rune map: printable Latin-1
// bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') map to themselves, every other byte,
// in increasing order, to U+0100, U+0101, ... (so space is 'Ġ', U+0120).
func byteToUnicode() [256]rune {
	var m [256]rune
	n := 0
	for b := 0; b < 256; b++ {
		if ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF) {
			m[b] = rune(b)
		} else {
			m[b] = rune(256 + n)
			n++
		}
	}
	return m
}

// byteVocab is the built-in byte-level BPE vocabulary.
type byteVocab struct {
	tokens []string
	types  []int32
	merges []string
	bos    uint32
	eos    uint32
}

// Token types as llama.cpp numbers them.
const (
	tokNormal  = 1
	tokControl = 3
	tokUnused  = 5
)

// defaultMerges is how many merges the built-in vocabulary learns.
const defaultMerges = 256

// builtinVocab builds the byte-level vocabulary: ids 0..255 are the bytes
// 0..255 (id = byte value) spelled with byteToUnicode, then the learned
// merges' results in merge order, then "<|bos|>" and "<|eos|>".
func builtinVocab() byteVocab {
	b2u := byteToUnicode()
	var v byteVocab
	for b := 0; b < 256; b++ {
		v.tokens = append(v.tokens, string(b2u[b]))
		v.types = append(v.types, tokNormal)
	}
	for _, m := range learnMerges(trainingText, defaultMerges) {
		v.merges = append(v.merges, m[0]+" "+m[1])
		v.tokens = append(v.tokens, m[0]+m[1])
		v.types = append(v.types, tokNormal)
	}
	v.bos = uint32(len(v.tokens))
	v.tokens = append(v.tokens, "<|bos|>")
	v.types = append(v.types, tokControl)
	v.eos = uint32(len(v.tokens))
	v.tokens = append(v.tokens, "<|eos|>")
	v.types = append(v.types, tokControl)
	return v
}

// pretokenize splits text the way GPT-2's pre-tokenizer does for plain
// English: runs of letters, runs of digits, runs of other symbols, each
// with at most one leading space; other whitespace stands alone. Merges
// learned on these pieces never cross a boundary the tokenizer keeps.
func pretokenize(text string) []string {
	var out []string
	rs := []rune(text)
	class := func(r rune) int {
		switch {
		case unicode.IsLetter(r):
			return 1
		case unicode.IsDigit(r):
			return 2
		case unicode.IsSpace(r):
			return 3
		}
		return 4
	}
	for i := 0; i < len(rs); {
		start := i
		if rs[i] == ' ' && i+1 < len(rs) && class(rs[i+1]) != 3 {
			i++
		}
		c := class(rs[i])
		if c == 3 {
			out = append(out, string(rs[i]))
			i++
			continue
		}
		for i < len(rs) && class(rs[i]) == c {
			i++
		}
		out = append(out, string(rs[start:i]))
	}
	return out
}

// learnMerges runs byte-level BPE training on text: start from single
// bytes, repeatedly merge the most frequent adjacent pair (ties: the
// lexicographically smallest pair), at most n times. Pairs seen once are
// merged too once the frequent ones run out, so the small text still
// yields n merges.
func learnMerges(text string, n int) [][2]string {
	b2u := byteToUnicode()
	counts := map[string]int{}
	for _, w := range pretokenize(text) {
		counts[w]++
	}
	type word struct {
		syms  []string
		count int
	}
	keys := make([]string, 0, len(counts))
	for w := range counts {
		keys = append(keys, w)
	}
	sort.Strings(keys)
	words := make([]word, 0, len(keys))
	for _, w := range keys {
		var syms []string
		for _, b := range []byte(w) {
			syms = append(syms, string(b2u[b]))
		}
		words = append(words, word{syms, counts[w]})
	}
	var merges [][2]string
	// A pair whose result is already a token (reached by another split of
	// the same string) is never chosen, so token strings stay unique.
	have := map[string]bool{}
	for b := 0; b < 256; b++ {
		have[string(b2u[b])] = true
	}
	for len(merges) < n {
		pairs := map[[2]string]int{}
		for _, w := range words {
			for i := 0; i+1 < len(w.syms); i++ {
				pairs[[2]string{w.syms[i], w.syms[i+1]}] += w.count
			}
		}
		var best [2]string
		bestN := 0
		for p, c := range pairs {
			if have[p[0]+p[1]] {
				continue
			}
			if c > bestN || (c == bestN && (p[0]+"\x00"+p[1]) < (best[0]+"\x00"+best[1])) {
				best, bestN = p, c
			}
		}
		if bestN < 1 {
			break
		}
		merges = append(merges, best)
		joined := best[0] + best[1]
		have[joined] = true
		for wi := range words {
			s := words[wi].syms
			out := s[:0]
			for i := 0; i < len(s); i++ {
				if i+1 < len(s) && s[i] == best[0] && s[i+1] == best[1] {
					out = append(out, joined)
					i++
				} else {
					out = append(out, s[i])
				}
			}
			words[wi].syms = out
		}
	}
	return merges
}

// trainingText is a small piece of plain English, written for this
// project, from which the built-in vocabulary learns its merges.
var trainingText = strings.Join([]string{
	"The quick brown fox jumps over the lazy dog. The dog was not amused, and the fox ran into the forest.",
	"Once upon a time there was a little girl who lived in a village near the river. She liked to walk along the water in the morning and listen to the birds.",
	"In the evening her father would come home from the fields, and the whole family would sit together at the table and talk about the day.",
	"A server that answers requests for many people at the same time must keep each person's data apart. It should never show one user what belongs to another.",
	"When a request is rejected, it has to stay rejected. The system then returns an error that says what went wrong, so that the user can fix the problem and try again.",
	"There are many ways to build such a system, but the simplest one is often the best: give every piece of memory an owner and check the owner on every read and every write.",
	"The weather was cold and the wind was strong, but the children played outside anyway. They built a small house from snow and laughed until it was time to go in.",
	"Numbers like 1, 2, 3, 10, 100 and 2048 appear in text as well, and so do words such as information, international, understanding, government and development.",
	"This is the end of the story. Thank you for reading, and have a good day.",
}, " ")

// spmVocab is the built-in SentencePiece-style vocabulary (Spec.SPMVocab),
// laid out as Gemma's: 0 "<pad>", 1 "<eos>", 2 "<bos>", 3 "<unk>", 4
// "<start_of_turn>", 5 "<end_of_turn>" (control; <unk> unknown), then the
// 256 byte-fallback tokens "<0x00>".."<0xFF>" (type byte), "▁" and the
// printable ASCII characters, then the pieces the built-in BPE vocabulary
// learned (spaces spelled U+2581 "▁"), scored by merge order, so merging
// by highest score reproduces them. Written without a space prefix
// (add_space_prefix false), as Gemma's files are.
type spmVocabT struct {
	tokens []string
	scores []float32
	types  []int32
}

// Token types llama.cpp uses beyond normal and control.
const (
	tokUnknown = 2
	tokByte    = 6
)

func spmVocab() spmVocabT {
	var v spmVocabT
	add := func(tok string, score float32, typ int32) {
		v.tokens = append(v.tokens, tok)
		v.scores = append(v.scores, score)
		v.types = append(v.types, typ)
	}
	for i, s := range []string{"<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"} {
		typ := int32(tokControl)
		if i == 3 {
			typ = tokUnknown
		}
		add(s, 0, typ)
	}
	for b := 0; b < 256; b++ {
		add(fmt.Sprintf("<0x%02X>", b), 0, tokByte)
	}
	have := map[string]bool{}
	add("▁", -1, tokNormal)
	have["▁"] = true
	for c := '!'; c <= '~'; c++ {
		add(string(c), -1, tokNormal)
		have[string(c)] = true
	}
	u2b := map[rune]byte{}
	for b, r := range byteToUnicode() {
		u2b[r] = byte(b)
	}
	for i, m := range learnMerges(trainingText, defaultMerges) {
		var raw []byte
		for _, r := range m[0] + m[1] {
			raw = append(raw, u2b[r])
		}
		piece := strings.ReplaceAll(string(raw), " ", "▁")
		if !utf8.ValidString(piece) || have[piece] {
			continue
		}
		have[piece] = true
		add(piece, -2-float32(i), tokNormal)
	}
	return v
}
