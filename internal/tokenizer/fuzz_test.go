package tokenizer

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

func addSeeds(f *testing.F) {
	for _, s := range trickyTexts {
		f.Add(s)
	}
	f.Add("\xff\xfe\xe2\x82")
	f.Add("<s></s><unk><|endoftext|>")
	f.Add(strings.Repeat(" ", 100))
	f.Add(strings.Repeat("ab", 60))
}

// checkStream: every Push returns valid UTF-8.
func checkStream(t *testing.T, tk *Tokenizer, ids []int32) {
	d := tk.NewStreamDecoder()
	for _, id := range ids {
		if s := d.Push(id); !utf8.ValidString(s) {
			t.Fatalf("Push(%d) returned invalid UTF-8 %q", id, s)
		}
	}
	if s := d.Flush(); !utf8.ValidString(s) {
		t.Fatalf("Flush returned invalid UTF-8 %q", s)
	}
}

func checkRange(t *testing.T, tk *Tokenizer, ids []int32) {
	for _, id := range ids {
		if id < 0 || int(id) >= tk.Size() {
			t.Fatalf("id %d out of range [0,%d)", id, tk.Size())
		}
	}
}

// FuzzEncodeSPM: no panic, ids in range, valid streamed UTF-8, and
// Decode(Encode(s)) == s for any bytes, since byte fallback covers every byte
// (except U+2581, which SentencePiece uses for a space and cannot tell apart
// from one).
func FuzzEncodeSPM(f *testing.F) {
	addSeeds(f)
	real := loadVocab(f, "llama-spm")
	tiny := tinySPM(f)
	f.Fuzz(func(t *testing.T, s string) {
		for _, tk := range []*Tokenizer{real, tiny} {
			for _, parse := range []bool{false, true} {
				ids := tk.Encode(s, true, parse)
				checkRange(t, tk, ids)
				checkStream(t, tk, ids)
				if !parse && tk == real && !strings.Contains(s, spmSpace) {
					if got := tk.Decode(ids); got != s {
						t.Fatalf("round trip %q -> %v -> %q", s, ids, got)
					}
				}
			}
		}
	})
}

// FuzzEncodeBPE: no panic, ids in range, valid streamed UTF-8, exact round
// trip for any bytes (byte-level BPE covers every byte), and the two merge
// strategies agree.
func FuzzEncodeBPE(f *testing.F) {
	addSeeds(f)
	toks := []*Tokenizer{loadVocab(f, "gpt-2"), loadVocab(f, "llama-bpe"), tinyBPE(f)}
	f.Fuzz(func(t *testing.T, s string) {
		for _, tk := range toks {
			for _, parse := range []bool{false, true} {
				ids := tk.Encode(s, false, parse)
				checkRange(t, tk, ids)
				checkStream(t, tk, ids)
				if !parse {
					if got := tk.Decode(ids); got != s {
						t.Fatalf("%s round trip %q -> %v -> %q", tk.Pre(), s, ids, got)
					}
				}
			}
			if s != "" && len(s) < 200 {
				var sc bpeScratch
				if a, b := tk.mergeSmall(s, nil, &sc), tk.mergeHeap(s, nil, &sc); !slices.Equal(a, b) {
					t.Fatalf("merge strategies differ on %q: %v vs %v", s, a, b)
				}
			}
		}
	})
}

// FuzzPreTokenize: every hand-written pre-tokenizer splits valid UTF-8 text
// exactly as regexp2 running the original patterns (invalid UTF-8 has no
// regex reference: regexp2 sees U+FFFD where the splitter sees bytes).
func FuzzPreTokenize(f *testing.F) {
	addSeeds(f)
	type pair struct {
		pt  preTokenizer
		res []*regexp2.Regexp
	}
	var all []pair
	for name, pats := range preRegexps {
		pt, _ := preTokenizerFor(name)
		var res []*regexp2.Regexp
		for _, p := range pats {
			res = append(res, regexp2.MustCompile(p, regexp2.None))
		}
		all = append(all, pair{pt, res})
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		for _, p := range all {
			if got, want := ourSplit(&p.pt, s), refSplit(t, p.res, s); !slices.Equal(got, want) {
				t.Fatalf("%s %q:\n got %q\nwant %q", p.pt.name, s, got, want)
			}
		}
	})
}
