package model

import (
	"encoding/json"
	"math"
	"os"
	"slices"
	"sluice/internal/kernels"
	"testing"

	"sluice/internal/gguf"
	"sluice/internal/sample"
	"sluice/internal/testenv"
)

// refFile is the part of ../shared/reference/reference.json these tests use.
type refFile struct {
	Models []struct {
		File  string    `json:"file"`
		Cases []refCase `json:"cases"`
		Long  *refCase  `json:"long_case"`
	} `json:"models"`
}

type refCase struct {
	Prompt       string         `json:"prompt"`
	PromptIDs    []int32        `json:"prompt_token_ids"`
	GeneratedIDs []int32        `json:"generated_token_ids"`
	Top5         [][][2]float64 `json:"top5_per_step"`
	Top5First    [][2]float64   `json:"top5_first_step"`
}

type refLogits struct {
	Cases []struct {
		Prompt string    `json:"prompt"`
		Logits []float32 `json:"first_step_logits"`
	} `json:"cases"`
	Long struct {
		Logits []float32 `json:"first_step_logits"`
	} `json:"long_case"`
}

func readJSON(t *testing.T, rel string, v any) {
	t.Helper()
	b, err := os.ReadFile(testenv.Shared(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

func openModel(t *testing.T, rel string) *Model {
	t.Helper()
	f, err := gguf.Open(testenv.Shared(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	m, err := Load(f)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// greedyRun prefills prompt in one step, then decodes n tokens one per
// step, returning generated ids and the first step's logits.
func greedyRun(t *testing.T, m *Model, threads int, prompt []int32, n int) ([]int32, []float32) {
	r := m.NewRunner(kernels.NewParallel(threads))
	kv := newMemKV(16, m.cfg.Layers, m.cfg.KVDim())
	res := r.Forward([]Seq{{Tokens: prompt, KV: kv}})
	if res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	first := slices.Clone(res[0].Logits) // the runner reuses its logits buffer
	var out []int32
	logits := first
	for i := 0; i < n; i++ {
		id := sample.Greedy(logits)
		out = append(out, id)
		if i == n-1 {
			break
		}
		res = r.Forward([]Seq{{Tokens: []int32{id}, Pos: len(prompt) + i, KV: kv}})
		if res[0].Err != nil {
			t.Fatal(res[0].Err)
		}
		logits = res[0].Logits
	}
	return out, first
}

func maxAbsDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

// TestStories260KMatchesLlamaCpp: llama.cpp's greedy ids for every case
// (and the 255-token long case) and its first-step logits within 1e-3.
func TestStories260KMatchesLlamaCpp(t *testing.T) {
	m := openModel(t, "models/stories260K.gguf")
	var ref refFile
	readJSON(t, "reference/reference.json", &ref)
	var lg refLogits
	readJSON(t, "reference/reference_logits_stories260K.json", &lg)
	mr := ref.Models[0]
	if mr.File != "stories260K.gguf" {
		t.Fatalf("reference model 0 is %s", mr.File)
	}
	for i, c := range mr.Cases {
		ids, first := greedyRun(t, m, 1, c.PromptIDs, len(c.GeneratedIDs))
		if !slices.Equal(ids, c.GeneratedIDs) {
			t.Errorf("%q: generated %v, llama.cpp %v", c.Prompt, ids, c.GeneratedIDs)
		}
		if d := maxAbsDiff(first, lg.Cases[i].Logits); d > 1e-3 {
			t.Errorf("%q: first-step logits differ from llama.cpp by up to %g (want <= 1e-3)", c.Prompt, d)
		} else {
			t.Logf("%q: max first-step logit diff %.2g", c.Prompt, d)
		}
	}
	ids, first := greedyRun(t, m, 2, mr.Long.PromptIDs, len(mr.Long.GeneratedIDs))
	if !slices.Equal(ids, mr.Long.GeneratedIDs) {
		t.Errorf("long case: first mismatch at %d", firstDiffInt(ids, mr.Long.GeneratedIDs))
	}
	if d := maxAbsDiff(first, lg.Long.Logits); d > 1e-3 {
		t.Errorf("long case: first-step logits differ by up to %g", d)
	}
}

func firstDiffInt(a, b []int32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestTinyQwen2TeacherForced: feed llama.cpp's generated tokens back in;
// at every step the top-5 ids agree and their logits are within 2e-2.
func TestTinyQwen2TeacherForced(t *testing.T) {
	m := openModel(t, "models/tiny-qwen2-random-gpt2vocab.gguf")
	var ref refFile
	readJSON(t, "reference/reference.json", &ref)
	var lg refLogits
	readJSON(t, "reference/reference_logits_tiny-qwen2-random-gpt2vocab.json", &lg)
	mr := ref.Models[1]
	V := m.cfg.Vocab
	for i, c := range mr.Cases {
		toks := append(slices.Clone(c.PromptIDs), c.GeneratedIDs[:len(c.GeneratedIDs)-1]...)
		kv := newMemKV(16, m.cfg.Layers, m.cfg.KVDim())
		res := m.NewRunner(kernels.NewParallel(2)).Forward([]Seq{{Tokens: toks, KV: kv, AllLogits: true}})
		if res[0].Err != nil {
			t.Fatal(res[0].Err)
		}
		worst := 0.0
		for s, top := range c.Top5 {
			p := len(c.PromptIDs) - 1 + s
			logits := res[0].Logits[p*V : (p+1)*V]
			got := top5(logits)
			for k, e := range top {
				if got[k] != int32(e[0]) {
					t.Errorf("%q step %d: top-5 %v, llama.cpp %v", c.Prompt, s, got, top)
					break
				}
				worst = max(worst, math.Abs(float64(logits[got[k]])-e[1]))
			}
			if s == 0 {
				if d := maxAbsDiff(logits, lg.Cases[i].Logits); d > 2e-2 {
					t.Errorf("%q: first-step logits differ by up to %g (want <= 2e-2)", c.Prompt, d)
				}
			}
		}
		if worst > 2e-2 {
			t.Errorf("%q: top-5 logits differ by up to %g (want <= 2e-2)", c.Prompt, worst)
		}
		t.Logf("%q: worst top-5 logit diff %.3g", c.Prompt, worst)
	}
}

// top5 returns the 5 largest logits' ids, ties to the lower id.
func top5(l []float32) []int32 {
	var ids []int32
	for len(ids) < 5 {
		best := int32(-1)
		for i, v := range l {
			if slices.Contains(ids, int32(i)) {
				continue
			}
			if best < 0 || v > l[best] {
				best = int32(i)
			}
		}
		ids = append(ids, best)
	}
	return ids
}
