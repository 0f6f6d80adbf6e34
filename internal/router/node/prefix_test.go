package node

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"sluice/internal/gguf"
	"sluice/internal/router"
)

type cacheReply struct {
	status int
	text   string
	usage  struct {
		PromptTokens        int `json:"prompt_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
}

func completeRaw(t *testing.T, s *served, key string, body map[string]any) cacheReply {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", s.ts.URL+"/v1/completions", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := cacheReply{status: resp.StatusCode}
	var doc struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
		Usage json.RawMessage `json:"usage"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
	if len(doc.Choices) == 1 {
		out.text = doc.Choices[0].Text
	}
	if len(doc.Usage) > 0 {
		_ = json.Unmarshal(doc.Usage, &out.usage)
	}
	return out
}

// The whole path with the prefix cache on (colocated, and the prefill
// worker's cache over TCP and shm; built-in model): the
// router reports usage.prompt_tokens_details.cached_tokens; a repeat by the
// same tenant hits with the same text; another tenant misses, also when it
// names the first tenant in prompt_cache_key or cache_salt (the salt is the
// server's, the caller's value only narrows); a narrower key misses; the
// metrics count the hits.
func TestPrefixCacheThroughTheRouter(t *testing.T) {
	for _, mode := range []LocalConfig{{Colocated: true}, {Transport: TransportTCP}, {Transport: TransportSHM}} {
		name, role := mode.Transport, "prefill"
		if mode.Colocated {
			name, role = "colocated", "colocated"
		}
		t.Run(name, func(t *testing.T) { testPrefixCacheThroughTheRouter(t, mode, role) })
	}
}

func testPrefixCacheThroughTheRouter(t *testing.T, mode LocalConfig, role string) {
	m, err := LoadModel("", gguf.MemoryAuto)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	keys, err := router.ParseKeys(strings.NewReader("key-a alice\nkey-b bob\nkey-c carol\n"))
	if err != nil {
		t.Fatal(err)
	}
	mode.PrefixCache, mode.Pools = true, Pools{Context: 256, PoolTokens: 1024}
	s := serve(t, m, mode, keys)
	prompt := strings.Repeat("Once upon a time there was a little robot who liked to count pages. ", 3)
	body := func(extra ...string) map[string]any {
		b := map[string]any{"prompt": prompt, "max_tokens": 8, "temperature": 0}
		for i := 0; i+1 < len(extra); i += 2 {
			b[extra[i]] = extra[i+1]
		}
		return b
	}
	first := completeRaw(t, s, "key-a", body())
	if first.status != 200 || first.usage.PromptTokensDetails.CachedTokens != 0 || first.usage.PromptTokens < 33 {
		t.Fatalf("first request: %+v", first)
	}
	full := (first.usage.PromptTokens - 1) / 16 * 16 // cacheable: full pages, never the last token
	for _, tc := range []struct {
		name, key string
		extra     []string
		cached    int
	}{
		{"same tenant", "key-a", nil, full},
		{"other tenant", "key-b", nil, 0},
		{"other tenant naming alice in prompt_cache_key", "key-c", []string{"prompt_cache_key", "alice"}, 0},
		{"other tenant naming alice in cache_salt", "key-c", []string{"cache_salt", "alice"}, 0},
		{"same tenant, narrower key", "key-a", []string{"prompt_cache_key", "conversation-2"}, 0},
		{"same tenant, same narrower key", "key-a", []string{"prompt_cache_key", "conversation-2"}, full},
	} {
		r := completeRaw(t, s, tc.key, body(tc.extra...))
		if r.status != 200 || r.usage.PromptTokensDetails.CachedTokens != tc.cached || r.text != first.text {
			t.Errorf("%s: status %d cached %d (want %d) text %q (cold %q)", tc.name, r.status, r.usage.PromptTokensDetails.CachedTokens, tc.cached, r.text, first.text)
		}
	}
	if r := completeRaw(t, s, "key-a", body("prompt_cache_key", strings.Repeat("k", 257))); r.status != 400 {
		t.Errorf("an oversized prompt_cache_key got %d", r.status)
	}
	mb := scrape(t, s.ts.URL)
	hit := `sluice_prefix_cache_tokens_total{result="hit",role="` + role + `"} `
	if !strings.Contains(mb, hit+itoa(2*full)+"\n") {
		t.Errorf("metrics do not show %d hit tokens:\n%s", 2*full, grepLines(mb, "sluice_prefix_cache"))
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// The operator's public prefix through the router (colocated and over
// TCP): tenant b hits the public pages tenant a computed, and only those;
// the metrics show the public pages and the seal re-hashes of the hits.
func TestSharedPrefixThroughTheRouter(t *testing.T) {
	for _, mode := range []LocalConfig{{Colocated: true}, {Transport: TransportTCP}} {
		name, role := mode.Transport, "prefill"
		if mode.Colocated {
			name, role = "colocated", "colocated"
		}
		t.Run(name, func(t *testing.T) {
			m, err := LoadModel("", gguf.MemoryAuto)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			keys, err := router.ParseKeys(strings.NewReader("key-a alice\nkey-b bob\n"))
			if err != nil {
				t.Fatal(err)
			}
			ids := func(seed, n int) []int32 {
				out := make([]int32, n)
				for i := range out {
					out[i] = int32(3 + (seed*7919+i*104729)%200)
				}
				return out
			}
			public := ids(1, 40) // 2 full pages of 16 and 8 private tokens
			mode.PrefixCache, mode.PublicPrefix, mode.Pools = true, public, Pools{Context: 256, PoolTokens: 1024}
			s := serve(t, m, mode, keys)
			prompt := append(append([]int32(nil), public...), ids(2, 40)...) // 80 tokens: 5 pages, 4 cacheable
			body := map[string]any{"prompt": prompt, "max_tokens": 4, "temperature": 0}
			a := completeRaw(t, s, "key-a", body)
			b := completeRaw(t, s, "key-b", body)
			a2 := completeRaw(t, s, "key-a", body)
			if a.status != 200 || b.status != 200 || a2.status != 200 || a.text != b.text || a.text != a2.text {
				t.Fatalf("statuses %d %d %d, texts %q %q %q", a.status, b.status, a2.status, a.text, b.text, a2.text)
			}
			if c := [3]int{a.usage.PromptTokensDetails.CachedTokens, b.usage.PromptTokensDetails.CachedTokens, a2.usage.PromptTokensDetails.CachedTokens}; c != [3]int{0, 32, 64} {
				t.Fatalf("cached tokens a, b, a again = %v, want [0 32 64] (b: the public pages only)", c)
			}
			mb := scrape(t, s.ts.URL)
			if !strings.Contains(mb, `sluice_prefix_cache_public_pages{role="`+role+`"} 2`+"\n") {
				t.Errorf("metrics do not show 2 public pages:\n%s", grepLines(mb, "sluice_prefix_cache"))
			}
			if !strings.Contains(mb, `sluice_kv_verified_pages_total{role="`+role+`"} 6`+"\n") { // b's 2 hits, a's 4
				t.Errorf("metrics do not show 6 verified pages:\n%s", grepLines(mb, "sluice_kv_verified"))
			}
		})
	}
}
