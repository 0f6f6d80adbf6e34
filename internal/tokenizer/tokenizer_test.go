package tokenizer

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
)

// byteLevelTokens returns the 256 GPT-2 byte-level tokens, id = byte value.
// The mapping is spelled out independently of byteToRune: printable ASCII
// and Latin-1 stand for themselves and the other 68 bytes, in byte order,
// take U+0100 upward.
func byteLevelTokens() []string {
	toks := make([]string, 256)
	next := rune(0x100)
	for b := 0; b < 256; b++ {
		printable := (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
		if printable {
			toks[b] = string(rune(b))
		} else {
			toks[b] = string(next)
			next++
		}
	}
	return toks
}

func TestByteToUnicodeKnownValues(t *testing.T) {
	// Well-known characters of GPT-2 vocabularies.
	for b, want := range map[byte]rune{' ': 'Ġ', '\n': 'Ċ', '\t': 'ĉ', 0: 'Ā', 0x7F: 'ġ', 0xAD: 'Ń', 'a': 'a', 0xFF: 'ÿ'} {
		if byteToRune[b] != want {
			t.Errorf("byte %#x -> %q, want %q", b, byteToRune[b], want)
		}
	}
	seen := map[rune]bool{}
	for b, r := range byteToRune {
		if seen[r] {
			t.Fatalf("byte %#x maps to %q twice", b, r)
		}
		seen[r] = true
		if string(r) != byteLevelTokens()[b] {
			t.Fatalf("byte %#x: %q vs %q", b, r, byteLevelTokens()[b])
		}
	}
}

// tinyBPE is a byte-level vocabulary small enough to work out by hand.
func tinyBPE(t testing.TB) *Tokenizer {
	t.Helper()
	v := DefaultVocab(ModelBPE)
	v.Pre = "gpt-2"
	v.Tokens = append(byteLevelTokens(), "he", "ll", "hell", "hello", "Ġw", "<|bos|>", "<|eos|>", "<|ud|>")
	v.Types = make([]int32, len(v.Tokens))
	for i := range v.Types {
		v.Types[i] = TypeNormal
	}
	v.Types[261], v.Types[262], v.Types[263] = TypeControl, TypeControl, TypeUserDefined
	v.Merges = []string{"h e", "l l", "he ll", "hell o", "Ġ w"}
	v.BOS, v.EOS, v.AddBOS = 261, 262, true
	tk, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func TestTinyBPE(t *testing.T) {
	tk := tinyBPE(t)
	cases := []struct {
		in             string
		special, parse bool
		want           []int32
	}{
		// "hello": he, ll, hell, hello by rank; " world": Ġw then bytes.
		{"hello world", false, false, []int32{259, 260, 'o', 'r', 'l', 'd'}},
		{"hello world", true, false, []int32{261, 259, 260, 'o', 'r', 'l', 'd'}},
		// Equal ranks: the leftmost pair merges first.
		{"lll", false, false, []int32{257, 'l'}},
		// Control tokens only when parsing specials; otherwise plain text.
		{"<|bos|>hi", false, true, []int32{261, 'h', 'i'}},
		{"<|bos|>hi", false, false, []int32{'<', '|', 'b', 'o', 's', '|', '>', 'h', 'i'}},
		{"", true, false, []int32{261}},
		{"", false, false, []int32{}},
		// User-defined tokens are matched even without parseSpecial (as
		// llama.cpp and Hugging Face do) and decode to their text.
		{"a<|ud|>b", false, false, []int32{'a', 263, 'b'}},
	}
	for _, c := range cases {
		got := tk.Encode(c.in, c.special, c.parse)
		if !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q, %v, %v) = %v, want %v", c.in, c.special, c.parse, got, c.want)
		}
	}
	if !tk.IsEOG(262) || tk.IsEOG(261) || tk.IsEOG('o') {
		t.Errorf("IsEOG: eos %v bos %v 'o' %v", tk.IsEOG(262), tk.IsEOG(261), tk.IsEOG('o'))
	}
	if got := tk.Decode([]int32{'a', 263, 'b'}); got != "a<|ud|>b" {
		t.Errorf("Decode user-defined = %q", got)
	}
	if got := tk.Decode([]int32{261, 259, 260, 'o', 262}); got != "hello wo" {
		t.Errorf("Decode = %q", got)
	}
	if tk.TokenText(261) != "<|bos|>" || tk.TokenText(260) != " w" || tk.TokenText(-1) != "" || tk.TokenText(9999) != "" {
		t.Errorf("TokenText: %q %q", tk.TokenText(261), tk.TokenText(260))
	}
}

// tinySPM is a SentencePiece-style vocabulary worked out by hand: scores,
// not lengths, decide the merges.
func tinySPM(t testing.TB) *Tokenizer {
	t.Helper()
	v := DefaultVocab(ModelSPM)
	v.Tokens = []string{"<unk>", "<s>", "</s>"}
	v.Types = []int32{TypeUnknown, TypeControl, TypeControl}
	for b := 0; b < 256; b++ {
		v.Tokens = append(v.Tokens, spmByteText(byte(b)))
		v.Types = append(v.Types, TypeByte)
	}
	v.Scores = make([]float32, len(v.Tokens))
	for _, tok := range []struct {
		s     string
		score float32
	}{
		{"▁", -1}, {"a", -2}, {"b", -2}, {"ab", -0.5}, {"▁a", -0.2}, {"▁ab", -3}, {"bb", -0.1}, // 259..265
		{"x", -5}, {"y", -5}, {"xy", -1}, {"yx", -1}, // 266..269
	} {
		v.Tokens = append(v.Tokens, tok.s)
		v.Types = append(v.Types, TypeNormal)
		v.Scores = append(v.Scores, tok.score)
	}
	tk, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func TestTinySPM(t *testing.T) {
	tk := tinySPM(t)
	cases := []struct {
		in             string
		special, parse bool
		want           []int32
	}{
		// ▁a (-0.2) beats ab (-0.5); then ▁a+b = ▁ab is a token.
		{"ab", false, false, []int32{264}},
		// bb (-0.1) first; ▁a next; "▁abb" is not a token.
		{"abb", false, false, []int32{263, 265}},
		// é is not a token: its UTF-8 bytes C3 A9 via <0xC3><0xA9> (id 3+byte).
		{"é", false, false, []int32{259, 3 + 0xC3, 3 + 0xA9}},
		// xy and yx score the same: the leftmost merges.
		{"xyx", false, false, []int32{259, 268, 266}},
		{"ab", true, false, []int32{1, 264}},
		{"", true, false, []int32{1}},
		// A special token resets the space prefix for the text after it.
		{"<s>ab", false, true, []int32{1, 264}},
		{"ab</s>ab", false, true, []int32{264, 2, 264}},
	}
	for _, c := range cases {
		got := tk.Encode(c.in, c.special, c.parse)
		if !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q, %v, %v) = %v, want %v", c.in, c.special, c.parse, got, c.want)
		}
	}
	if got := tk.Decode([]int32{1, 264, 263, 265}); got != "ab abb" {
		t.Errorf("Decode = %q", got)
	}
	if !tk.IsEOG(2) || tk.IsEOG(1) || !tk.AddBOS() || tk.BOS() != 1 || tk.EOS() != 2 {
		t.Errorf("specials: eog(2)=%v eog(1)=%v addBOS=%v", tk.IsEOG(2), tk.IsEOG(1), tk.AddBOS())
	}
}

func TestNewRejectsBadVocabularies(t *testing.T) {
	base := func() Vocab {
		v := DefaultVocab(ModelBPE)
		v.Pre = "gpt-2"
		v.Tokens = byteLevelTokens()
		return v
	}
	cases := []struct {
		name string
		mod  func(*Vocab)
		want error
	}{
		{"unknown model", func(v *Vocab) { v.Model = "t5" }, ErrUnknownModel},
		{"unknown pre", func(v *Vocab) { v.Pre = "tekken" }, ErrUnknownPre},
		{"no tokens", func(v *Vocab) { v.Tokens = nil }, ErrMissingKey},
		{"duplicate", func(v *Vocab) { v.Tokens[5] = v.Tokens[4] }, ErrDuplicateToken},
		{"scores length", func(v *Vocab) { v.Scores = []float32{1} }, ErrBadMetadata},
		{"types length", func(v *Vocab) { v.Types = []int32{1, 2} }, ErrBadMetadata},
		{"bos out of range", func(v *Vocab) { v.BOS = 256 }, ErrBadMetadata},
		{"add bos without bos", func(v *Vocab) { v.AddBOS = true }, ErrBadMetadata},
	}
	for _, c := range cases {
		v := base()
		c.mod(&v)
		_, err := New(v)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	if _, err := New(base()); err != nil {
		t.Fatalf("base vocabulary rejected: %v", err)
	}
}

// TestSpecialTokensInRealVocabs uses ids that are part of the published
// Qwen2 and Llama 3 vocabularies.
func TestSpecialTokensInRealVocabs(t *testing.T) {
	qwen := loadVocab(t, "qwen2")
	const imStart, imEnd, endOfText = 151644, 151645, 151643
	ids := qwen.Encode("<|im_start|>user\nhi<|im_end|>", false, true)
	if len(ids) < 3 || ids[0] != imStart || ids[len(ids)-1] != imEnd {
		t.Fatalf("qwen2 parse special: %v", ids)
	}
	plain := qwen.Encode("<|im_start|>user\nhi<|im_end|>", false, false)
	if slices.Contains(plain, imStart) || slices.Contains(plain, imEnd) {
		t.Fatalf("qwen2 without parse special produced control ids: %v", plain)
	}
	if qwen.Decode(plain) != "<|im_start|>user\nhi<|im_end|>" {
		t.Fatalf("qwen2 plain round trip: %q", qwen.Decode(plain))
	}
	if qwen.EOT() != imEnd && qwen.EOT() != endOfText {
		t.Fatalf("qwen2 EOT %d", qwen.EOT())
	}
	if !qwen.IsEOG(imEnd) || !qwen.IsEOG(endOfText) || qwen.IsEOG(imStart) || qwen.AddBOS() {
		t.Fatalf("qwen2 EOG/BOS rules: im_end %v endoftext %v im_start %v addBOS %v",
			qwen.IsEOG(imEnd), qwen.IsEOG(endOfText), qwen.IsEOG(imStart), qwen.AddBOS())
	}

	llama3 := loadVocab(t, "llama-bpe")
	const beginText, endText, eotID = 128000, 128001, 128009
	ids = llama3.Encode("<|begin_of_text|>Hi<|eot_id|>", true, true)
	if len(ids) != 4 || ids[0] != beginText || ids[1] != beginText || ids[3] != eotID {
		t.Fatalf("llama3 parse special with BOS: %v", ids)
	}
	if !llama3.IsEOG(eotID) || !llama3.IsEOG(endText) || llama3.IsEOG(beginText) || !llama3.AddBOS() {
		t.Fatalf("llama3 EOG/BOS rules")
	}

	gpt2 := loadVocab(t, "gpt-2")
	if !gpt2.IsEOG(50256) || gpt2.AddBOS() {
		t.Fatalf("gpt-2: <|endoftext|> must end generation and no BOS is added")
	}
	if ids := gpt2.Encode("a<|endoftext|>b", false, true); !slices.Equal(ids, []int32{64, 50256, 65}) {
		t.Fatalf("gpt-2 parse special: %v", ids)
	}

	spm := loadVocab(t, "llama-spm")
	// "Hello" is 15043 (▁Hello) at the start and after a special token.
	if ids := spm.Encode("<s>Hello", false, true); !slices.Equal(ids, []int32{1, 15043}) {
		t.Fatalf("llama-spm <s>Hello: %v", ids)
	}
	if spm.ChatTemplate() != "" || !strings.Contains(qwen.ChatTemplate(), "<|im_start|>") {
		t.Fatalf("chat templates: llama-spm has none, qwen2's uses <|im_start|>; got %q and %q", spm.ChatTemplate(), qwen.ChatTemplate())
	}
}

// TestMergeSmallMatchesHeap: the quadratic merge used for short words and
// llama.cpp's priority-queue merge give the same ids.
func TestMergeSmallMatchesHeap(t *testing.T) {
	for _, name := range []string{"gpt-2", "llama-bpe"} {
		tk := loadVocab(t, name)
		r := rand.New(rand.NewPCG(3, 4))
		var sc bpeScratch
		words := []string{"hello", "   ", "understanding", "ationalization", "aaaaaaaaaaaaaaaa", "🦙🦙🦙", "0000000"}
		for i := 0; i < 3000; i++ {
			words = append(words, randText(r, 12))
		}
		for _, w := range words {
			if w == "" {
				continue
			}
			a := tk.mergeSmall(w, nil, &sc)
			b := tk.mergeHeap(w, nil, &sc)
			if !slices.Equal(a, b) {
				t.Fatalf("%s %q: small %v heap %v", name, w, a, b)
			}
		}
	}
}

// TestConcurrentEncode: a Tokenizer is shared by every request of a server.
func TestConcurrentEncode(t *testing.T) {
	tk := loadVocab(t, "gpt-2")
	cases := readCases(t, "gpt-2")
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, c := range cases {
				if got := tk.Encode(c.in, false, false); !slices.Equal(got, c.want) {
					t.Errorf("concurrent %q: %v", c.in, got)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestSPMPiecewiseMatchesWhole: merging SPM text piece by piece (the fast
// path) gives exactly what llama.cpp's single pass over the whole text gives.
func TestSPMPiecewiseMatchesWhole(t *testing.T) {
	fast := loadVocab(t, "llama-spm")
	if !fast.spmSplitAtSpace {
		t.Fatal("Llama 2's vocabulary should allow piecewise merging")
	}
	whole := *fast
	whole.spmSplitAtSpace = false
	r := rand.New(rand.NewPCG(5, 6))
	texts := []string{benchText[:2000]}
	for _, c := range readCases(t, "llama-spm") {
		texts = append(texts, c.in)
	}
	for i := 0; i < 2000; i++ {
		texts = append(texts, randText(r, 30))
	}
	for _, s := range texts {
		a, b := fast.Encode(s, true, false), whole.Encode(s, true, false)
		if !slices.Equal(a, b) {
			t.Fatalf("%q: piecewise %v whole %v", s, a, b)
		}
	}
}
