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

// kvTypes are the two KV row types the reference tests run on. llama.cpp
// made the references with an F32 KV cache (../shared/reference/README.md),
// so F32 pages are held to today's bounds; F16 pages are held to how far
// llama.cpp's own F16 KV cache moved its first-step logits from those
// references (the README's cross-check: <= 0.012 for stories260K, <= 0.021
// for the qwen2 model, same greedy ids), and must pick llama.cpp's token at
// every step. At later steps (teacher forced) the README gives no figure;
// there F16 pages may be twice that far from the F32 reference: as far as
// llama.cpp's F16 cache moves from it, and as far again from that.
type kvType struct {
	name string
	new  func(ps, layers, kvd int) *memKV
	// stories: first-step logits; qwen: first-step logits; qwenSteps:
	// llama.cpp's top-5 logits at every step; top5: the whole top-5
	// ranking must agree (else only the greedy choice).
	stories, qwen, qwenSteps float64
	top5                     bool
}

// kvTypesQ8 adds Q8_0 pages to kvTypes for the invariance tests (shapes
// whose KV rows are whole Q8_0 blocks); the llama.cpp reference tests
// keep F32 and F16, whose references were made with those caches.
var kvTypesQ8 = append(append([]kvType(nil), kvTypes...), kvType{name: "q8_0", new: newMemKVQ8})

var kvTypes = []kvType{{"f32", newMemKV, 1e-3, 2e-2, 2e-2, true}, {"f16", newMemKV16, 0.012, 0.021, 2 * 0.021, false}}

// greedyRun prefills prompt in one step, then decodes n tokens one per
// step, returning generated ids and the first step's logits.
func greedyRun(t *testing.T, m *Model, threads int, prompt []int32, n int, newKV func(ps, layers, kvd int) *memKV) ([]int32, []float32) {
	r := m.NewRunner(kernels.NewParallel(threads))
	kv := newKV(16, m.cfg.Layers, m.cfg.KVDim())
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
	for _, kt := range kvTypes {
		worst := 0.0
		for i, c := range mr.Cases {
			ids, first := greedyRun(t, m, 1, c.PromptIDs, len(c.GeneratedIDs), kt.new)
			if !slices.Equal(ids, c.GeneratedIDs) {
				t.Errorf("%s %q: generated %v, llama.cpp %v", kt.name, c.Prompt, ids, c.GeneratedIDs)
			}
			d := maxAbsDiff(first, lg.Cases[i].Logits)
			if d > kt.stories {
				t.Errorf("%s %q: first-step logits differ from llama.cpp by up to %g (want <= %g)", kt.name, c.Prompt, d, kt.stories)
			}
			worst = max(worst, d)
		}
		ids, first := greedyRun(t, m, 2, mr.Long.PromptIDs, len(mr.Long.GeneratedIDs), kt.new)
		if !slices.Equal(ids, mr.Long.GeneratedIDs) {
			t.Errorf("%s long case: first mismatch at %d", kt.name, firstDiffInt(ids, mr.Long.GeneratedIDs))
		}
		d := maxAbsDiff(first, lg.Long.Logits)
		if d > kt.stories {
			t.Errorf("%s long case: first-step logits differ by up to %g", kt.name, d)
		}
		t.Logf("%s KV: max first-step logit diff %.2g over the cases, %.2g on the long case; %d/%d long-case tokens match",
			kt.name, worst, d, firstDiffInt(ids, mr.Long.GeneratedIDs), len(mr.Long.GeneratedIDs))
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
	for _, kt := range kvTypes {
		worstTop, worstFirst, steps, same := 0.0, 0.0, 0, 0
		for i, c := range mr.Cases {
			toks := append(slices.Clone(c.PromptIDs), c.GeneratedIDs[:len(c.GeneratedIDs)-1]...)
			kv := kt.new(16, m.cfg.Layers, m.cfg.KVDim())
			res := m.NewRunner(kernels.NewParallel(2)).Forward([]Seq{{Tokens: toks, KV: kv, AllLogits: true}})
			if res[0].Err != nil {
				t.Fatal(res[0].Err)
			}
			for s, top := range c.Top5 {
				p := len(c.PromptIDs) - 1 + s
				logits := res[0].Logits[p*V : (p+1)*V]
				got := top5(logits)
				steps++
				if got[0] == int32(top[0][0]) {
					same++
				} else {
					t.Errorf("%s %q step %d: greedy %d, llama.cpp %v", kt.name, c.Prompt, s, got[0], top[0])
				}
				for k, e := range top {
					if kt.top5 && got[k] != int32(e[0]) {
						t.Errorf("%s %q step %d: top-5 %v, llama.cpp %v", kt.name, c.Prompt, s, got, top)
						break
					}
					worstTop = max(worstTop, math.Abs(float64(logits[int(e[0])])-e[1]))
				}
				if s == 0 {
					worstFirst = max(worstFirst, maxAbsDiff(logits, lg.Cases[i].Logits))
				}
			}
		}
		if worstFirst > kt.qwen || worstTop > kt.qwenSteps {
			t.Errorf("%s KV: first-step logits differ by up to %g (want <= %g), llama.cpp's top-5 logits by up to %g (want <= %g)",
				kt.name, worstFirst, kt.qwen, worstTop, kt.qwenSteps)
		}
		t.Logf("%s KV: %d/%d greedy choices agree; worst first-step logit diff %.3g, worst top-5 logit diff %.3g", kt.name, same, steps, worstFirst, worstTop)
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
