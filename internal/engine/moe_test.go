package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"testing"

	"sluice/internal/gguf"
	"sluice/internal/kv"
	"sluice/internal/synth"
)

// moeRuntime loads reference MoE file name (synth.MoEReferences,
// regenerated from its seed) and returns it with llama.cpp's cases from
// testdata/reference/moe.json, each cut before llama.cpp's first near-tie
// (top-2 log-probability margin < 0.02, where rounding may decide either
// way; the model package's TestMoEMatchesLlamaCpp holds the details).
func moeRuntime(t *testing.T, name string) (*ModelRuntime, []refCase) {
	t.Helper()
	var spec *synth.Spec
	for _, r := range synth.MoEReferences() {
		if r.Name == name {
			spec = &r.Spec
		}
	}
	var b bytes.Buffer
	if err := synth.Write(&b, *spec); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	rt, _, err := LoadRuntime(name, f)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("../../testdata/reference/moe.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Models []struct {
			Name  string `json:"name"`
			Cases []struct {
				Prompt []int32 `json:"prompt_token_ids"`
				Gen    []int32 `json:"generated_token_ids"`
				Steps  []struct {
					Top2 [2]struct {
						Logprob float64 `json:"logprob"`
					} `json:"top2"`
				} `json:"steps"`
			} `json:"cases"`
		} `json:"models"`
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	var cases []refCase
	for _, m := range ref.Models {
		if m.Name != name {
			continue
		}
		for _, c := range m.Cases {
			n := len(c.Gen)
			for s, st := range c.Steps {
				if st.Top2[0].Logprob-st.Top2[1].Logprob < 0.02 {
					n = s
					break
				}
			}
			cases = append(cases, refCase{Prompt: c.Prompt, Gen: c.Gen[:n]})
		}
	}
	return rt, cases
}

// TestOracleMoE is the determinism oracle on mixture-of-experts models:
// concurrent requests (prompts up to 130 tokens, so prefill chunks group
// many tokens per expert and decode steps batch several sequences) give
// the same tokens colocated, disaggregated in process and over TCP and
// shared memory, and llama.cpp's tokens up to its first near-tie.
func TestOracleMoE(t *testing.T) {
	for _, name := range []string{"moe-qwen3moe-q8_0", "moe-glm4moe-f16"} {
		t.Run(name, func(t *testing.T) {
			rt, cases := moeRuntime(t, name)
			var reqs []*Request
			var want [][]int32
			for i := 0; i < 12; i++ {
				c := cases[i%len(cases)]
				k := min(len(c.Gen), (i*5)%11)
				mx := 3 + i%6
				p := append(slices.Clone(c.Prompt), c.Gen[:k]...)
				reqs = append(reqs, &Request{ID: fmt.Sprint(i), Tenant: fmt.Sprintf("tenant-%d", i%3), Prompt: p, MaxTokens: mx, IgnoreEOS: true})
				want = append(want, c.Gen[k:min(len(c.Gen), k+mx)])
			}
			cfg := func(pages int) Config {
				return Config{Model: rt, Context: 512, PoolPages: pages, PageSize: 16, Order: kv.LIFO,
					ChunkTokens: 24, StepTokens: 64, BatchBytes: 2 * rt.Layers() * rt.KVDim() * 4 * 16 * 2}
			}
			col, err := NewColocated(cfg(48))
			if err != nil {
				t.Fatal(err)
			}
			ref := runMany(t, col, reqs)
			col.Close(context.Background())
			for i := range reqs {
				if ref[i].final.Err != nil {
					t.Fatalf("request %d: %v", i, ref[i].final.Err)
				}
				if n := len(want[i]); !slices.Equal(ref[i].tokens[:n], want[i]) {
					t.Errorf("request %d: colocated %v, llama.cpp %v (to its first near-tie)", i, ref[i].tokens, want[i])
				}
			}
			loc, err := NewLocal(cfg(32), cfg(48))
			if err != nil {
				t.Fatal(err)
			}
			got := runMany(t, loc, reqs)
			loc.Close(context.Background())
			for i := range reqs {
				if got[i].final.Err != nil || !slices.Equal(got[i].tokens, ref[i].tokens) {
					t.Errorf("request %d: disaggregated %v (%v), colocated %v", i, got[i].tokens, got[i].final.Err, ref[i].tokens)
				}
			}
			for _, transport := range []string{"tcp", "shm"} {
				r := newRemoteRig(t, transport, cfg(32), cfg(48))
				got := runMany(t, r.eng, reqs)
				for i := range reqs {
					if got[i].final.Err != nil || !slices.Equal(got[i].tokens, ref[i].tokens) {
						t.Errorf("request %d over %s: %v (%v), colocated %v", i, transport, got[i].tokens, got[i].final.Err, ref[i].tokens)
					}
				}
				for pname, p := range map[string]*kv.Pool{"prefill": r.pw.Pool(), "decode": r.dw.Pool()} {
					if err := p.CheckDrained(); err != nil {
						t.Errorf("%s pool over %s not drained: %v", pname, transport, err)
					}
				}
				r.close()
			}
		})
	}
}
