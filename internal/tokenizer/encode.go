package tokenizer

import (
	"strings"
)

// fragment is a piece of the input: raw text s[start:end] (id < 0) or a
// special token matched in the text.
type fragment struct {
	start, end int
	id         int32
}

// Encode tokenizes text.
//
// addSpecial adds BOS (and EOS) when the vocabulary asks for them
// (tokenizer.ggml.add_bos_token / add_eos_token and llama.cpp's per-model
// defaults). parseSpecial lets control tokens written in the text
// ("<|im_start|>", "<s>") become their ids; without it they are tokenized as
// plain text. User-defined tokens are always matched, as llama.cpp and
// Hugging Face do.
//
// Cost is linear in the text except within one pre-tokenized word (a run of
// letters, or for SentencePiece a run without spaces), where merging is
// O(n log n) like llama.cpp's and Hugging Face's: a single 1 MiB word takes
// on the order of a second. Servers should bound the text length before
// calling Encode.
func (t *Tokenizer) Encode(text string, addSpecial, parseSpecial bool) []int32 {
	out := make([]int32, 0, len(text)/3+2)
	var frags []fragment
	if text != "" {
		frags = t.partition(text, parseSpecial)
	}
	if addSpecial && t.addBOS {
		out = append(out, t.bos)
	}
	switch t.kind {
	case kindSPM:
		var b strings.Builder
		prevSpecial := true // the text's start counts as "after a special token"
		for _, f := range frags {
			if f.id >= 0 {
				out = append(out, f.id)
				prevSpecial = true
				continue
			}
			b.Reset()
			if t.addSpacePrefix && prevSpecial {
				b.WriteString(spmSpace)
			}
			escapeSpaces(&b, text[f.start:f.end])
			out = t.encodeSPM(b.String(), out)
			prevSpecial = false
		}
	case kindBPE:
		var sc bpeScratch
		for _, f := range frags {
			if f.id >= 0 {
				out = append(out, f.id)
				continue
			}
			out = t.encodeBPE(text, f.start, f.end, out, &sc)
		}
	}
	if addSpecial && t.addEOS {
		out = append(out, t.eos)
	}
	return out
}

const spmSpace = "\u2581"

func escapeSpaces(b *strings.Builder, s string) {
	for {
		i := strings.IndexByte(s, ' ')
		if i < 0 {
			b.WriteString(s)
			return
		}
		b.WriteString(s[:i])
		b.WriteString(spmSpace)
		s = s[i+1:]
	}
}

// partition splits text at special tokens exactly as llama.cpp's
// tokenizer_st_partition: each special token in turn, longest first, is cut
// out of every remaining raw fragment, left to right. Only tokens that occur
// somewhere in the text are tried, which is the same result without one scan
// of the text per special token.
func (t *Tokenizer) partition(text string, parseSpecial bool) []fragment {
	frags := []fragment{{0, len(text), -1}}
	if len(t.special) == 0 || !parseSpecial && !t.hasUserDefined {
		return frags
	}
	present := map[int32]bool{}
	for i := 0; i < len(text); i++ {
		if !t.specialHead[text[i]] {
			continue
		}
		for _, l := range t.specialLens {
			if i+l > len(text) {
				break
			}
			if id, ok := t.specialText[text[i:i+l]]; ok {
				present[id] = true
			}
		}
	}
	if len(present) == 0 {
		return frags
	}
	for _, id := range t.special {
		if !present[id] {
			continue
		}
		if !parseSpecial && t.attrs[id]&(attrControl|attrUnknown) != 0 {
			continue
		}
		tok := t.tokens[id]
		next := make([]fragment, 0, len(frags)+2)
		for _, f := range frags {
			if f.id >= 0 {
				next = append(next, f)
				continue
			}
			pos := f.start
			for {
				k := strings.Index(text[pos:f.end], tok)
				if k < 0 {
					break
				}
				m := pos + k
				if m > pos {
					next = append(next, fragment{pos, m, -1})
				}
				next = append(next, fragment{m, m + len(tok), id})
				pos = m + len(tok)
			}
			if pos < f.end {
				next = append(next, fragment{pos, f.end, -1})
			}
		}
		frags = next
	}
	return frags
}
