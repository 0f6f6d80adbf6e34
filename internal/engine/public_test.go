package engine

import (
	"slices"
	"testing"

	"sluice/internal/kv"
)

// The operator's public prefix (Config.PublicPrefix, --shared-prefix-file):
// tenants a and b both hit its pages; a tenant's private continuation
// after it never hits for another tenant, not even for the same tokens;
// a prompt that only starts with part of it, or names a cache scope, gets
// nothing public; without the setting nothing crosses at all. Outputs
// equal a cold engine's. Colocated and disaggregated (prefill's cache).
func TestPublicPrefixSharedAcrossTenants(t *testing.T) {
	for _, mode := range []string{"colocated", "disaggregated"} {
		t.Run(mode, func(t *testing.T) { testPublicPrefix(t, mode) })
	}
}

func testPublicPrefix(t *testing.T, mode string) {
	rt := defaultRuntime(t)
	vocab := rt.Vocab()
	mk := func(seed, n int) []int32 {
		p := make([]int32, n)
		for i := range p {
			p[i] = int32((seed*131 + i*37 + 1) % vocab)
		}
		return p
	}
	public := mk(5, 52) // 3 full pages of 16, and 4 tokens that stay private
	cfg := Config{Model: rt, Context: 256, PoolPages: 96, PageSize: 16, Order: kv.LIFO, ChunkTokens: 32, StepTokens: 64}
	cold, err := NewColocated(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, cold)
	build := func(pub []int32) Engine {
		c := cfg
		c.PrefixCache, c.PublicPrefix = true, pub
		if mode == "colocated" {
			e, err := NewColocated(c)
			if err != nil {
				t.Fatal(err)
			}
			return e
		}
		d := c
		d.PublicPrefix = nil
		e, err := NewLocal(c, d)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	withPub, without := build(public), build(nil)
	defer closeWithin(t, withPub)
	defer closeWithin(t, without)

	cont := append(slices.Clone(public), mk(7, 40)...)                       // 92 tokens: 5 full pages
	partial := append(slices.Clone(public[:40]), mk(8, 52)...)               // starts with 2.5 pages of it
	other := append(append(slices.Clone(public), mk(9, 1)...), mk(7, 39)...) // public, then other tokens
	prompts := map[string][]int32{"cont": cont, "partial": partial, "other": other}
	want := map[string][]int32{}
	for n, p := range prompts {
		want[n] = run1(t, cold, &Request{ID: n, Tenant: "x", Prompt: p, MaxTokens: 8, IgnoreEOS: true}).tokens
	}
	for _, tc := range []struct {
		name, tenant, scope, prompt string
		e                           Engine
		cached                      int
	}{
		{"a first", "a", "", "cont", withPub, 0},
		{"a again: public and private pages", "a", "", "cont", withPub, 80},
		{"b, same tokens: the public pages only", "b", "", "cont", withPub, 48},
		{"b again: now its own continuation too", "b", "", "cont", withPub, 80},
		{"c, public then other tokens", "c", "", "other", withPub, 48},
		{"d, part of the prefix only", "d", "", "partial", withPub, 0},
		{"e, a narrowed scope", "e", "s", "cont", withPub, 0},
		{"no public prefix: a first", "a", "", "cont", without, 0},
		{"no public prefix: b misses", "b", "", "cont", without, 0},
	} {
		r := run1(t, tc.e, &Request{ID: tc.name, Tenant: tc.tenant, CacheScope: tc.scope, Prompt: prompts[tc.prompt], MaxTokens: 8, IgnoreEOS: true})
		if got := r.final.Usage.CachedTokens; got != tc.cached {
			t.Errorf("%s: %d cached tokens, want %d", tc.name, got, tc.cached)
		}
		if !slices.Equal(r.tokens, want[tc.prompt]) {
			t.Errorf("%s: output %v differs from the cold run %v", tc.name, r.tokens, want[tc.prompt])
		}
	}
	// Only the public prefix's 3 pages are in the public scope: the
	// private prompts' pages (d's partial prefix, e's narrowed scope, every
	// continuation) were inserted under their tenant, never as public (the
	// read-time tenant check stays on for them, I11).
	pool := map[string]func() *kv.Pool{
		"colocated":     func() *kv.Pool { return withPub.(*Colocated).Pool() },
		"disaggregated": func() *kv.Pool { return withPub.(*Local).Prefill.Pool() },
	}[mode]()
	if s := pool.Stats(); s.CachePublic != 3 {
		t.Errorf("%d pages in the public scope, want the public prefix's 3 (cached %d)", s.CachePublic, s.Cached)
	}
}
