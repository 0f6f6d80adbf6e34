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
	c.tenantGram, c.maxGram = 3*one+one/2, 5*one+one/2
	if _, _, err := c.Get("B", false, big(0)); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, _, err := c.Get("A", false, big(i)); err != nil {
			t.Fatal(err)
		}
		if c.gramHeld["A"] > c.tenantGram || c.gramBytes > c.maxGram {
			t.Fatalf("after %d of A's grammars: A holds %d bytes (bound %d), the cache %d (bound %d)", i+1, c.gramHeld["A"], c.tenantGram, c.gramBytes, c.maxGram)
		}
	}
	if c.count["A"] != 3 {
		t.Fatalf("A holds %d grammars, want 3", c.count["A"])
	}
	if _, hit, _ := c.Get("B", false, big(0)); !hit {
		t.Fatal("A's grammars evicted B's within the cache's bound")
	}
	if _, hit, _ := c.Get("A", false, big(9)); !hit {
		t.Fatal("A's newest grammar was evicted")
	}
	// Past the cache's bound, the least recently used go, whoever's.
	for _, tn := range []string{"C", "D", "E"} {
		if _, _, err := c.Get(tn, false, big(0)); err != nil {
			t.Fatal(err)
		}
		if c.gramBytes > c.maxGram {
			t.Fatalf("the cache holds %d bytes, bound %d", c.gramBytes, c.maxGram)
		}
	}
	var sum int64
	for e := c.lru.Front(); e != nil; e = e.Next() {
		sum += e.Value.(*cacheEntry).size
	}
	if sum != c.gramBytes {
		t.Fatalf("entries hold %d bytes, counted %d", sum, c.gramBytes)
	}
}
