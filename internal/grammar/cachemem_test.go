package grammar

import (
	"fmt"
	"testing"
)

// The cache bounds its compiled grammars' memory, not only their count:
// a tenant past its bytes drops its own least recently used grammars (not
// another's), and past the cache's bytes the least recently used go. A
// 35-byte schema compiles to about 5 MB, so 32 entries a tenant held
// 160 MB.
func TestCacheBoundsGrammarMemory(t *testing.T) {
	big := func(i int) string { return fmt.Sprintf(`{"type":"string","maxLength":%d}`, 20000+i) }
	g, err := CompileSchema([]byte(big(0)))
	if err != nil {
		t.Fatal(err)
	}
	one := g.Bytes()
	if one < 3<<20 {
		t.Fatalf("a %d-element grammar counted as %d bytes", g.Size(), one)
	}
	c := NewCache(testVocab(), 0)
	c.grams.tenantBytes, c.grams.maxBytes = 3*one+one/2, 5*one+one/2
	if _, _, err := c.Get(t.Context(), "B", false, big(0)); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, _, err := c.Get(t.Context(), "A", false, big(i)); err != nil {
			t.Fatal(err)
		}
		if c.grams.held["A"] > c.grams.tenantBytes || c.grams.bytes > c.grams.maxBytes {
			t.Fatalf("after %d of A's grammars: A holds %d bytes (bound %d), the cache %d (bound %d)", i+1, c.grams.held["A"], c.grams.tenantBytes, c.grams.bytes, c.grams.maxBytes)
		}
	}
	if c.grams.count("A") != 3 {
		t.Fatalf("A holds %d grammars, want 3", c.grams.count("A"))
	}
	if _, hit, _ := c.Get(t.Context(), "B", false, big(0)); !hit {
		t.Fatal("A's grammars evicted B's within the cache's bound")
	}
	if _, hit, _ := c.Get(t.Context(), "A", false, big(9)); !hit {
		t.Fatal("A's newest grammar was evicted")
	}
	// Past the cache's bound, the least recently used go, whoever's.
	for _, tn := range []string{"C", "D", "E"} {
		if _, _, err := c.Get(t.Context(), tn, false, big(0)); err != nil {
			t.Fatal(err)
		}
		if c.grams.bytes > c.grams.maxBytes {
			t.Fatalf("the cache holds %d bytes, bound %d", c.grams.bytes, c.grams.maxBytes)
		}
	}
	var sum int64
	c.grams.each(func(e *lruEntry[*Compiled]) { sum += e.size })
	if sum != c.grams.bytes {
		t.Fatalf("entries hold %d bytes, counted %d", sum, c.grams.bytes)
	}
}

// Past the cache's bounds (entries or bytes), the grammar that goes is the
// least recently used one of the tenant holding the most, not the least
// recently used of anyone: four heavy tenants each filling up to its own
// bound push out each other's grammars, never the light tenant's, which
// holds less than any of them (and whose name would win a tie).
func TestCacheEvictsHeaviestTenant(t *testing.T) {
	big := func(i int) string { return fmt.Sprintf(`{"type":"string","maxLength":%d}`, 20000+i) }
	small := func(i int) string { return fmt.Sprintf(`{"const":%d}`, i) }
	g, err := CompileSchema([]byte(big(0)))
	if err != nil {
		t.Fatal(err)
	}
	one := g.Bytes()
	for _, tc := range []struct {
		name   string
		schema func(int) string
		bound  func(c *Cache)
		within func(c *Cache) bool
	}{
		{"bytes", big, func(c *Cache) {
			c.grams.tenantBytes, c.grams.maxBytes = 3*one+one/2, 8*one+one/2
		}, func(c *Cache) bool { return c.grams.bytes <= c.grams.maxBytes }},
		{"entries", small, func(c *Cache) {
			c.grams.perTenant, c.grams.max = 3, 8
		}, func(c *Cache) bool { return c.grams.len() <= c.grams.max }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCache(testVocab(), 0)
			tc.bound(c)
			light := tc.schema(999)
			if _, _, err := c.Get(t.Context(), "a-light", false, light); err != nil {
				t.Fatal(err)
			}
			evicted := 0
			for round := range 3 {
				for _, h := range []string{"h1", "h2", "h3", "h4"} {
					for i := range 3 {
						before := c.grams.len()
						if _, _, err := c.Get(t.Context(), h, false, tc.schema(100*round+10*i+len(h)+int(h[1]))); err != nil {
							t.Fatal(err)
						}
						if !tc.within(c) {
							t.Fatalf("%s's grammar %d: past the cache's bound", h, i)
						}
						if c.grams.len() <= before {
							evicted++
						}
						if c.grams.count("a-light") != 1 {
							t.Fatalf("round %d, %s's grammar %d evicted the light tenant's (tenants hold %v bytes)", round, h, i, c.grams.held)
						}
					}
				}
			}
			if evicted == 0 {
				t.Fatal("the heavy tenants never filled the cache: the test shows nothing")
			}
			if _, hit, _ := c.Get(t.Context(), "a-light", false, light); !hit {
				t.Fatal("the light tenant's grammar missed")
			}
		})
	}
}

// lightest is heaviest's opposite (the tenant holding the least), the
// rule the mutations gcache-evict-heaviest and gcache-mask-room-heaviest
// put in its place (scripts/mutate).
func lightest(weights map[string]int64) string {
	light, least := "", int64(-1)
	for t, n := range weights {
		if n > 0 && (least < 0 || n < least || n == least && t < light) {
			light, least = t, n
		}
	}
	return light
}
