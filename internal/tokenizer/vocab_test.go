package tokenizer

import (
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"sluice/internal/testenv"
)

// The four vocabularies in ../shared/vocab, each with llama.cpp's
// test-tokenizer-0 inputs and the ids Hugging Face tokenizers (an
// independent implementation) gives for them.
var vocabNames = []string{"llama-spm", "gpt-2", "qwen2", "llama-bpe"}

var (
	loadMu sync.Mutex
	loaded = map[string]*Tokenizer{}
)

// loadShared loads a GGUF under ../shared once per test binary: the
// llama-bpe and qwen2 vocabularies take a noticeable time to build.
func loadShared(t testing.TB, rel string) *Tokenizer {
	t.Helper()
	p := testenv.Shared(t, rel)
	loadMu.Lock()
	defer loadMu.Unlock()
	if tk, ok := loaded[p]; ok {
		return tk
	}
	tk, err := Load(p)
	if err != nil {
		t.Fatalf("load %s: %v", rel, err)
	}
	loaded[p] = tk
	return tk
}

func loadVocab(t testing.TB, name string) *Tokenizer {
	return loadShared(t, "vocab/ggml-vocab-"+name+".gguf")
}

type vocabCase struct {
	in   string
	want []int32
}

func readCases(t *testing.T, name string) []vocabCase {
	t.Helper()
	base := testenv.Shared(t, "vocab/ggml-vocab-"+name+".gguf")
	inp, err := os.ReadFile(base + ".inp")
	if err != nil {
		t.Fatal(err)
	}
	outb, err := os.ReadFile(base + ".out")
	if err != nil {
		t.Fatal(err)
	}
	ins := strings.Split(string(inp), "\n__ggml_vocab_test__\n")
	outs := strings.Split(string(outb), "\n")
	// Both files end with a terminator, leaving one empty trailing element.
	if ins[len(ins)-1] != "" || outs[len(outs)-1] != "" {
		t.Fatalf("%s: unexpected file ending", name)
	}
	ins, outs = ins[:len(ins)-1], outs[:len(outs)-1]
	if len(ins) != len(outs) || len(ins) < 40 {
		t.Fatalf("%s: %d inputs but %d outputs", name, len(ins), len(outs))
	}
	cases := make([]vocabCase, len(ins))
	for i := range ins {
		cases[i].in = ins[i]
		cases[i].want = []int32{}
		for _, f := range strings.Fields(outs[i]) {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("%s line %d: %v", name, i+1, err)
			}
			cases[i].want = append(cases[i].want, int32(n))
		}
	}
	return cases
}

// TestVocabCases runs every llama.cpp test-tokenizer-0 case for all four
// vocabularies against Hugging Face's ids (encoded without BOS, special
// tokens not parsed, as test-tokenizer-0 does).
func TestVocabCases(t *testing.T) {
	for _, name := range vocabNames {
		t.Run(name, func(t *testing.T) {
			tk := loadVocab(t, name)
			for i, c := range readCases(t, name) {
				got := tk.Encode(c.in, false, false)
				if !slices.Equal(got, c.want) {
					t.Errorf("case %d %q:\n got %v\nwant %v", i, c.in, got, c.want)
				}
			}
		})
	}
}

// TestVocabRoundTrip: decoding the ids of every case gives the input back.
func TestVocabRoundTrip(t *testing.T) {
	for _, name := range vocabNames {
		t.Run(name, func(t *testing.T) {
			tk := loadVocab(t, name)
			for i, c := range readCases(t, name) {
				for _, special := range []bool{false, true} {
					ids := tk.Encode(c.in, special, false)
					if got := tk.Decode(ids); got != c.in {
						t.Errorf("case %d addSpecial=%v: Decode(Encode(%q)) = %q", i, special, c.in, got)
					}
				}
			}
		})
	}
}

type referenceFile struct {
	Models []struct {
		File      string `json:"file"`
		Tokenizer struct {
			BOS    int32 `json:"bos_id"`
			EOS    int32 `json:"eos_id"`
			AddBOS bool  `json:"add_bos"`
		} `json:"tokenizer"`
		Cases []struct {
			Prompt string  `json:"prompt"`
			IDs    []int32 `json:"prompt_token_ids"`
		} `json:"cases"`
	} `json:"models"`
	TokenizerOnly struct {
		Vocabs map[string]struct {
			IDs map[string][]int32 `json:"prompt_token_ids"`
		} `json:"vocabs"`
	} `json:"tokenizer_only_references"`
}

func readReference(t *testing.T) referenceFile {
	t.Helper()
	b, err := os.ReadFile(testenv.Shared(t, "reference/reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r referenceFile
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestReferencePrompts checks llama.cpp's own prompt ids (llama-tokenize
// with add_special=true) for the four vocabularies and the two test models.
func TestReferencePrompts(t *testing.T) {
	ref := readReference(t)
	if len(ref.TokenizerOnly.Vocabs) != 4 || len(ref.Models) != 2 {
		t.Fatalf("reference.json: %d vocabs, %d models", len(ref.TokenizerOnly.Vocabs), len(ref.Models))
	}
	for key, v := range ref.TokenizerOnly.Vocabs {
		// keys look like "vocab/ggml-vocab-gpt-2.gguf" or
		// "extra_over_4MiB/ggml-vocab-qwen2.gguf"
		file := key[strings.LastIndexByte(key, '/')+1:]
		tk := loadShared(t, "vocab/"+file)
		for prompt, want := range v.IDs {
			if got := tk.Encode(prompt, true, false); !slices.Equal(got, want) {
				t.Errorf("%s %q: got %v want %v", file, prompt, got, want)
			}
		}
	}
	for _, m := range ref.Models {
		tk := loadShared(t, "models/"+m.File)
		if tk.BOS() != m.Tokenizer.BOS || tk.EOS() != m.Tokenizer.EOS || tk.AddBOS() != m.Tokenizer.AddBOS {
			t.Errorf("%s: bos %d eos %d add_bos %v, want %d %d %v", m.File, tk.BOS(), tk.EOS(), tk.AddBOS(),
				m.Tokenizer.BOS, m.Tokenizer.EOS, m.Tokenizer.AddBOS)
		}
		if len(m.Cases) == 0 {
			t.Errorf("%s: no cases", m.File)
		}
		for _, c := range m.Cases {
			if got := tk.Encode(c.Prompt, true, false); !slices.Equal(got, c.IDs) {
				t.Errorf("%s %q: got %v want %v", m.File, c.Prompt, got, c.IDs)
			}
		}
	}
}

func sharedPath(t testing.TB, rel string) string { return testenv.Shared(t, rel) }
