package model

import (
	"slices"
	"testing"

	"sluice/internal/gguf"
	"sluice/internal/testenv"
	"sluice/internal/tokenizer"
)

// archRef is testdata/reference/arch.json (scripts/arch-references.sh).
type archRef struct {
	Cut    float64 `json:"cut_margin"`
	Models []struct {
		File  string `json:"file"`
		Cases []struct {
			Prompt    string    `json:"prompt"`
			PromptIDs []int32   `json:"prompt_token_ids"`
			Generated []int32   `json:"generated_token_ids"`
			Margins   []float64 `json:"top2_margins"`
		} `json:"cases"`
	} `json:"models"`
}

// TestArchReferences: for the small synthetic qwen3 and gemma3 files
// (head_dim != n_embd/n_head; gemma3 prompts longer than its 16-token
// sliding window, 32 greedy steps past it), sluice's tokenizer gives
// llama.cpp's prompt ids and its forward pass llama.cpp's greedy ids, up to
// the first step where llama.cpp's top two were within the cut margin. The
// prompt is prefilled in one step and in chunks of 5, on F32 and F16 pages,
// with 1 and 2 threads; every run must give the same ids.
func TestArchReferences(t *testing.T) {
	var ref archRef
	readJSON(t, "reference/arch.json", &ref)
	if len(ref.Models) < 4 {
		t.Fatalf("arch.json has %d models, want the 4 of scripts/arch-references.sh", len(ref.Models))
	}
	compared := 0
	for _, mr := range ref.Models {
		t.Run(mr.File, func(t *testing.T) {
			f, err := gguf.Open(testenv.Shared(t, mr.File))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			m, err := Load(f)
			if err != nil {
				t.Fatal(err)
			}
			tok, err := tokenizer.FromGGUF(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range mr.Cases {
				if got := tok.Encode(c.Prompt, true, true); !slices.Equal(got, c.PromptIDs) {
					t.Errorf("%q: prompt ids %v, llama.cpp %v", c.Prompt, got, c.PromptIDs)
				}
				if len(c.Generated) == 0 {
					continue
				}
				for _, kt := range kvTypes {
					for _, threads := range []int{1, 2} {
						ids, _ := greedyRun(t, m, threads, c.PromptIDs, len(c.Generated), kt.new)
						if !slices.Equal(ids, c.Generated) {
							at := firstDiffInt(ids, c.Generated)
							t.Errorf("%s KV, %d threads, %q: greedy ids differ from llama.cpp's at step %d (llama.cpp's top-2 margin there %.3g): got %v, want %v",
								kt.name, threads, c.Prompt, at, c.Margins[at], ids, c.Generated)
						}
					}
				}
				if ids := chunkedGreedy(t, m, c.PromptIDs, 5, len(c.Generated)); !slices.Equal(ids, c.Generated) {
					t.Errorf("%q prefilled in chunks of 5: %v, llama.cpp %v", c.Prompt, ids, c.Generated)
				}
				compared += len(c.Generated)
			}
		})
	}
	t.Logf("%d greedy tokens compared with llama.cpp's", compared)
	if compared < 100 {
		t.Errorf("only %d greedy tokens were compared; the references are too flat to test anything", compared)
	}
}

// chunkedGreedy prefills prompt chunk tokens per step (F32 pages of 4
// positions), then decodes n greedy tokens.
func chunkedGreedy(t *testing.T, m *Model, prompt []int32, chunk, n int) []int32 {
	t.Helper()
	r := m.NewRunner(nil)
	kv := newMemKV(4, m.cfg.Layers, m.cfg.KVDim())
	var logits []float32
	for p := 0; p < len(prompt); p += chunk {
		res := r.Forward([]Seq{{Tokens: prompt[p:min(p+chunk, len(prompt))], Pos: p, KV: kv}})
		if res[0].Err != nil {
			t.Fatal(res[0].Err)
		}
		logits = res[0].Logits
	}
	var out []int32
	for i := 0; i < n; i++ {
		id := int32(0)
		for j, v := range logits {
			if v > logits[id] {
				id = int32(j)
			}
		}
		out = append(out, id)
		if i == n-1 {
			break
		}
		res := r.Forward([]Seq{{Tokens: []int32{id}, Pos: len(prompt) + i, KV: kv}})
		if res[0].Err != nil {
			t.Fatal(res[0].Err)
		}
		logits = res[0].Logits
	}
	return out
}
