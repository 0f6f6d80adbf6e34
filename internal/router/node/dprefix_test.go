package node

import (
	"strings"
	"testing"
	"time"

	"sluice/internal/gguf"
	"sluice/internal/kv"
	"sluice/internal/router"
)

// The decode worker's own prefix cache through the whole path, in-process,
// over TCP and over shared memory (built-in model): a repeat by the same
// tenant finds the prompt's full pages on decode, so the reservation says
// decode_prefix_len and prefill transfers only the pages after it (counted
// on decode: sluice_handoff_pages_total); another tenant with the same
// prompt, and the same tenant with a narrower scope, miss on decode too;
// every text equals a cache-off server's. Afterwards both pools hold no
// page, and the decode pool's idle cache entries are exactly the three
// prompts' full pages, reported apart (kv.Pool.Drained).
func TestDecodePrefixCacheThroughTheRouter(t *testing.T) {
	for _, tr := range []string{TransportInproc, TransportTCP, TransportSHM} {
		t.Run(tr, func(t *testing.T) { testDecodePrefixCache(t, tr) })
	}
}

func testDecodePrefixCache(t *testing.T, transport string) {
	m, err := LoadModel("", gguf.MemoryAuto)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	keys, err := router.ParseKeys(strings.NewReader("key-a alice\nkey-b bob\n"))
	if err != nil {
		t.Fatal(err)
	}
	pools := Pools{Context: 256, PoolTokens: 1024}
	off := serve(t, m, LocalConfig{Transport: transport, Pools: pools}, keys)
	on := serve(t, m, LocalConfig{Transport: transport, PrefixCache: true, Pools: pools}, keys)
	prompt := strings.Repeat("A small robot counted the pages of its memory, one by one. ", 3)
	body := func(extra ...string) map[string]any {
		b := map[string]any{"prompt": prompt, "max_tokens": 8, "temperature": 0}
		for i := 0; i+1 < len(extra); i += 2 {
			b[extra[i]] = extra[i+1]
		}
		return b
	}
	cold := completeRaw(t, off, "key-a", body())
	if cold.status != 200 {
		t.Fatalf("cache-off server: %+v", cold)
	}
	ps := on.stack.Pools["decode"].Geometry().PageSize
	n := (cold.usage.PromptTokens + ps - 1) / ps // prompt pages of a handoff
	full := (cold.usage.PromptTokens - 1) / ps   // pages decode may hold: never the last token's
	if full < 2 {
		t.Fatalf("prompt of %d tokens is too short for this test", cold.usage.PromptTokens)
	}
	t.Logf("prompt of %d tokens: %d pages, %d cacheable", cold.usage.PromptTokens, n, full)
	pages := func() (uint64, uint64) {
		st := on.stack.Stats()
		return st.HandoffPagesTransferred, st.HandoffPagesSkipped
	}
	for _, tc := range []struct {
		name, key string
		extra     []string
		skipped   int
	}{
		{"alice, first", "key-a", nil, 0},
		{"alice, again: decode hit", "key-a", nil, full},
		{"bob, same prompt: decode miss", "key-b", nil, 0},
		{"bob, again", "key-b", nil, full},
		{"alice, narrower scope: miss", "key-a", []string{"prompt_cache_key", "conversation-2"}, 0},
		{"alice, third time", "key-a", nil, full},
	} {
		tr0, sk0 := pages()
		r := completeRaw(t, on, tc.key, body(tc.extra...))
		tr1, sk1 := pages()
		if r.status != 200 || r.text != cold.text {
			t.Errorf("%s: status %d text %q, cache-off %q", tc.name, r.status, r.text, cold.text)
		}
		if int(sk1-sk0) != tc.skipped || int(tr1-tr0) != n-tc.skipped {
			t.Errorf("%s: %d pages transferred, %d skipped; want %d and %d", tc.name, tr1-tr0, sk1-sk0, n-tc.skipped, tc.skipped)
		}
	}
	mb := scrape(t, on.ts.URL)
	for _, want := range []string{
		`sluice_handoff_pages_total{result="skipped"} ` + itoa(3*full) + "\n",
		`sluice_handoff_pages_total{result="transferred"} ` + itoa(6*n-3*full) + "\n",
		`sluice_prefix_cache_tokens_total{result="hit",role="decode"} ` + itoa(3*full*ps) + "\n",
	} {
		if !strings.Contains(mb, want) {
			t.Errorf("metrics lack %q:\n%s", want, grepLines(mb, "sluice_handoff_pages")+grepLines(mb, "sluice_prefix_cache_tokens"))
		}
	}
	// Three (tenant, scope) entries of cold.usage.PromptTokens/ps full pages each.
	entries := 3 * (cold.usage.PromptTokens / ps)
	for role, p := range on.stack.Pools {
		rep := waitHeldFree(t, p)
		if rep.CacheIdle != entries {
			t.Errorf("%s pool: %+v; want %d idle cache pages", role, rep, entries)
		}
	}
	if rep := waitHeldFree(t, off.stack.Pools["decode"]); rep.CacheIdle != 0 || rep.Free != rep.Pages {
		t.Errorf("cache-off decode pool: %+v", rep)
	}
}

// waitHeldFree waits (bounded) until p holds no page: a reply can reach
// the client just before the release that follows its last token.
func waitHeldFree(t *testing.T, p *kv.Pool) kv.DrainReport {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rep, err := p.Drained()
		if err == nil {
			return rep
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
}
