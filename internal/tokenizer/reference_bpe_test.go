package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/dlclark/regexp2"

	"sluice/internal/gguf"
	"sluice/internal/synth"
)

// naiveBPE is an independent, deliberately simple byte-level BPE written
// from the algorithm's definition: split with the original regex (regexp2),
// spell each word's bytes with the GPT-2 map, then repeatedly merge the
// adjacent pair with the lowest rank (leftmost on ties) using the merge
// strings as given, and look the pieces up by text.
type naiveBPE struct {
	re     *regexp2.Regexp
	ranks  map[[2]string]int
	toID   map[string]int32
	byteCh []string
}

func newNaiveBPE(t testing.TB, pattern string, tokens, merges []string) *naiveBPE {
	n := &naiveBPE{re: regexp2.MustCompile(pattern, regexp2.None), ranks: map[[2]string]int{}, toID: map[string]int32{}, byteCh: byteLevelTokens()}
	for i, tok := range tokens {
		n.toID[tok] = int32(i)
	}
	for i, m := range merges {
		l, r, ok := strings.Cut(m, " ")
		if !ok {
			t.Fatalf("merge %d %q has no space", i, m)
		}
		if _, dup := n.ranks[[2]string{l, r}]; !dup {
			n.ranks[[2]string{l, r}] = i
		}
	}
	return n
}

func (n *naiveBPE) encode(t testing.TB, text string) []int32 {
	var ids []int32
	for _, word := range refSplit(t, []*regexp2.Regexp{n.re}, text) {
		var syms []string
		for _, b := range []byte(word) {
			syms = append(syms, n.byteCh[b])
		}
		for {
			best, bestRank := -1, 0
			for i := 0; i+1 < len(syms); i++ {
				if r, ok := n.ranks[[2]string{syms[i], syms[i+1]}]; ok && (best < 0 || r < bestRank) {
					best, bestRank = i, r
				}
			}
			if best < 0 {
				break
			}
			syms = slices.Replace(syms, best, best+2, syms[best]+syms[best+1])
		}
		for _, s := range syms {
			id, ok := n.toID[s]
			if !ok {
				t.Fatalf("naive BPE: piece %q is not a token", s)
			}
			ids = append(ids, id)
		}
	}
	return ids
}

// TestBuiltinDefaultVocab loads the built-in default model's vocabulary
// (internal/synth) and checks its documented shape and that Encode agrees
// with the naive reference BPE on its own merges.
func TestBuiltinDefaultVocab(t *testing.T) {
	data, err := synth.Default()
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tk, err := FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	if tk.Size() != 514 || tk.BOS() != 512 || tk.EOS() != 513 || !tk.AddBOS() || !tk.IsEOG(513) || tk.IsEOG(512) {
		t.Fatalf("default vocab: size %d bos %d eos %d addBOS %v", tk.Size(), tk.BOS(), tk.EOS(), tk.AddBOS())
	}
	tokens, _ := f.Strings("tokenizer.ggml.tokens")
	merges, _ := f.Strings("tokenizer.ggml.merges")
	ref := newNaiveBPE(t, reGPT2, tokens, merges)

	r := rand.New(rand.NewPCG(7, 8))
	texts := []string{"Once upon a time, there was a little girl.", "", "the the the", "\x01\x02 \n\n 42"}
	texts = append(texts, trickyTexts...)
	for i := 0; i < 300; i++ {
		texts = append(texts, randText(r, 30))
	}
	for _, s := range texts {
		got := tk.Encode(s, false, false)
		if want := ref.encode(t, s); !slices.Equal(got, want) {
			t.Fatalf("%q: got %v, naive reference %v", s, got, want)
		}
		if d := tk.Decode(got); d != s {
			t.Fatalf("round trip %q -> %q", s, d)
		}
	}
	if ids := tk.Encode("the the the", false, false); len(ids) >= len("the the the") {
		t.Errorf("no merges applied to English text: %v", ids)
	}
	if ids := tk.Encode("<|bos|>hi<|eos|>", true, true); len(ids) < 4 || ids[0] != 512 || ids[1] != 512 || ids[len(ids)-1] != 513 {
		t.Errorf("special tokens: %v", ids)
	}
}

// TestGPT2MatchesNaiveReference runs the naive reference against GPT-2's
// real vocabulary (50,000 merges) on random text.
func TestGPT2MatchesNaiveReference(t *testing.T) {
	p := sharedPath(t, "vocab/ggml-vocab-gpt-2.gguf")
	f, err := gguf.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tokens, _ := f.Strings("tokenizer.ggml.tokens")
	merges, _ := f.Strings("tokenizer.ggml.merges")
	ref := newNaiveBPE(t, reGPT2, tokens, merges)
	tk := loadVocab(t, "gpt-2")
	r := rand.New(rand.NewPCG(9, 10))
	texts := []string{benchText[:3000]}
	for i := 0; i < 300; i++ {
		texts = append(texts, randText(r, 30))
	}
	for _, s := range texts {
		if got, want := tk.Encode(s, false, false), ref.encode(t, s); !slices.Equal(got, want) {
			t.Fatalf("%q: got %v, naive reference %v", s, got, want)
		}
	}
}
