package engine

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"testing"

	"sluice/internal/gguf"
	"sluice/internal/kv"
	"sluice/internal/testenv"
)

// archCases reads testdata/reference/arch.json (scripts/arch-references.sh):
// llama.cpp's prompt and greedy ids for the small qwen3 and gemma3 files.
func archCases(t *testing.T) map[string][]refCase {
	t.Helper()
	b, err := os.ReadFile(testenv.Shared(t, "reference/arch.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Models []struct {
			File  string    `json:"file"`
			Cases []refCase `json:"cases"`
		} `json:"models"`
	}
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	out := map[string][]refCase{}
	for _, m := range ref.Models {
		out[m.File] = m.Cases
	}
	return out
}

// TestOracleArchTransports: the qwen3 (head_dim != n_embd/n_head) and
// gemma3 (16-token sliding window, prompts and continuations past it)
// files through the disaggregated path over TCP and shared memory give
// the colocated engine's tokens, which are llama.cpp's. Each request is a
// reference prompt plus k of llama.cpp's greedy tokens (greedy decoding
// is its own teacher forcing), from three tenants, prefilled in chunks of
// 7 through small LIFO pools, so pages are reused across tenants.
func TestOracleArchTransports(t *testing.T) {
	cases := archCases(t)
	for _, file := range []string{"models/arch/qwen3-hd32-f16.gguf", "models/arch/gemma3-w16-q8_0.gguf"} {
		t.Run(file, func(t *testing.T) {
			f, err := gguf.Open(testenv.Shared(t, file))
			if err != nil {
				t.Fatal(err)
			}
			// A cleanup, not a defer: it must run after the rigs' cleanups
			// (newRemoteRig), which stop the workers reading the mapping.
			t.Cleanup(func() { f.Close() })
			rt, _, err := LoadRuntime(file, f)
			if err != nil {
				t.Fatal(err)
			}
			var reqs []*Request
			var want [][]int32
			for i, c := range cases[file] {
				for j := 0; j < 3 && len(c.Gen) >= 4; j++ {
					k := (j * 5) % (len(c.Gen) - 3)
					n := min(len(c.Gen)-k, 4+j*3)
					p := append(slices.Clone(c.Prompt), c.Gen[:k]...)
					reqs = append(reqs, &Request{ID: fmt.Sprint(i, j), Tenant: fmt.Sprintf("tenant-%d", (i+j)%3), Prompt: p, MaxTokens: n, IgnoreEOS: true})
					want = append(want, c.Gen[k:k+n])
				}
			}
			if len(reqs) < 6 {
				t.Fatalf("only %d requests from the references", len(reqs))
			}
			cfg := func(pages int) Config {
				return Config{Model: rt, Context: 256, PoolPages: pages, PageSize: 16, Order: kv.LIFO, ChunkTokens: 7, StepTokens: 64}
			}
			col, err := NewColocated(cfg(24))
			if err != nil {
				t.Fatal(err)
			}
			ref := runMany(t, col, reqs)
			closeWithin(t, col)
			for i := range reqs {
				if ref[i].final.Err != nil || !slices.Equal(ref[i].tokens, want[i]) {
					t.Fatalf("colocated request %d: %v (err %v), llama.cpp %v", i, ref[i].tokens, ref[i].final.Err, want[i])
				}
			}
			for _, transport := range []string{"tcp", "shm"} {
				r := newRemoteRig(t, transport, cfg(16), cfg(24))
				got := runMany(t, r.eng, reqs)
				for i := range reqs {
					if got[i].final.Err != nil {
						t.Fatalf("%s request %d: %v", transport, i, got[i].final.Err)
					}
					if !slices.Equal(got[i].tokens, ref[i].tokens) {
						t.Errorf("%s request %d: %v, colocated and llama.cpp %v", transport, i, got[i].tokens, ref[i].tokens)
					}
				}
				for name, p := range map[string]*kv.Pool{"prefill": r.pw.Pool(), "decode": r.dw.Pool()} {
					if err := p.CheckDrained(); err != nil {
						t.Errorf("%s pool over %s not drained: %v", name, transport, err)
					}
				}
				r.close()
			}
		})
	}
}
