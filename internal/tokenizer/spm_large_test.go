package tokenizer

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"sluice/internal/gguf"
	"sluice/internal/quant"
	"sluice/internal/synth"
	"sluice/internal/testenv"
)

// TestGemmaLikeSPMVocabulary: no real Gemma vocabulary is available here
// (no download), so a SentencePiece vocabulary laid out as Gemma's is
// synthesized (sluice synth --spm-vocab: <pad> <eos> <bos> <unk>, turn
// markers, 256 byte-fallback tokens, scored pieces, no space prefix).
// testdata/models/arch/gemma3-spm-q8_0.gguf carries it and
// TestArchReferences holds its ids to llama.cpp's; here the same
// vocabulary padded to Gemma 3's 262,144 tokens loads in well under a
// second and tokenizes exactly as the small one does, bytes outside the
// vocabulary through <0xNN>, and decodes back to the text.
func TestGemmaLikeSPMVocabulary(t *testing.T) {
	small, err := gguf.Open(testenv.Shared(t, "models/arch/gemma3-spm-q8_0.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	want, err := FromGGUF(small)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "large.gguf")
	spec := synth.Spec{Arch: "gemma3", Layers: 1, Embd: 32, Heads: 1, KVHeads: 1, FF: 32, Context: 64,
		Type: quant.Q8_0, SPMVocab: true, Vocab: 262144, TieOutput: true, SlidingWindow: 8, Seed: 1}
	if err := synth.WriteFile(p, spec); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	start, cpu0 := time.Now(), testenv.CPUTime()
	large, err := FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	// CPU time, not wall time: the load takes about 0.2 s of CPU (1.1 s
	// under -race); a loaded machine stretches the wall time, not this.
	if d := testenv.CPUTime() - cpu0; d > 3*time.Second {
		t.Errorf("loading a 262,144-token vocabulary took %v of CPU", d)
	}
	if large.Size() != 262144 {
		t.Fatalf("vocabulary of %d tokens, want 262144", large.Size())
	}
	for _, text := range []string{"Once upon a time", " Café  naïve\tthe   über-fast 東京 😀", "<start_of_turn>user\nHi<end_of_turn>\n", "x\x00\xff"} {
		for _, special := range []bool{false, true} {
			a, b := want.Encode(text, true, special), large.Encode(text, true, special)
			if !slices.Equal(a, b) {
				t.Errorf("%q (special %v): large vocabulary %v, small %v", text, special, b, a)
			}
			if a[0] != 2 {
				t.Errorf("%q: first id %d, want <bos> 2", text, a[0])
			}
			if got := large.Decode(b[1:]); !special && got != text {
				t.Errorf("%q decodes to %q", text, got)
			}
		}
	}
	if os.Getenv("SLUICE_VERBOSE") != "" {
		t.Logf("large vocabulary loaded in %v", time.Since(start))
	}
}
