package kv

import (
	"crypto/sha256"
	"errors"
	"math"
	"testing"
	"time"
)

var testFP = []byte("model fingerprint")

func saltOf(tenant string) Salt { return Salt(sha256.Sum256([]byte("test salt " + tenant))) }

// prompt is n full pages of tokens derived from seed.
func prompt(seed int32, pages int) []int32 {
	out := make([]int32, pages*tg.PageSize)
	for i := range out {
		out[i] = seed*1000 + int32(i)
	}
	return out
}

// cachedSeq builds a sequence of o whose prompt fills pages full pages,
// seals them and hands them to the cache; it returns the table (o still
// reads every page) and the keys.
func cachedSeq(t *testing.T, p *Pool, o Owner, toks []int32) ([]PageRef, []BlockKey) {
	t.Helper()
	refs, keys, n := insertAll(t, p, o, toks)
	if n != len(refs) {
		t.Fatalf("cached %d of %d pages", n, len(refs))
	}
	return refs, keys
}

func TestPrefixKeysChain(t *testing.T) {
	a := prompt(1, 3)
	ka := PrefixKeys(testFP, saltOf("t1"), tg.PageSize, a)
	if len(ka) != 3 {
		t.Fatalf("%d keys for 3 full pages", len(ka))
	}
	// The partial last page has no key; a prompt's prefix has the prefix of its keys.
	if k := PrefixKeys(testFP, saltOf("t1"), tg.PageSize, a[:2*tg.PageSize+1]); len(k) != 2 || k[0] != ka[0] || k[1] != ka[1] {
		t.Fatal("keys of a prefix are not the prefix of the keys")
	}
	// Everything the KV depends on changes the key.
	b := append([]int32(nil), a...)
	b[0]++ // first page differs: every later key differs (the chain)
	kb := PrefixKeys(testFP, saltOf("t1"), tg.PageSize, b)
	for i := range ka {
		if ka[i] == kb[i] {
			t.Fatalf("page %d key unchanged after an earlier token changed", i)
		}
	}
	if PrefixKeys(testFP, saltOf("t2"), tg.PageSize, a)[0] == ka[0] {
		t.Fatal("two tenants' salts gave the same key")
	}
	if PrefixKeys([]byte("other model"), saltOf("t1"), tg.PageSize, a)[0] == ka[0] {
		t.Fatal("two model fingerprints gave the same key")
	}
	// Same tokens at another depth (another parent) is another key.
	c := append(append([]int32(nil), a[tg.PageSize:2*tg.PageSize]...), a[tg.PageSize:2*tg.PageSize]...)
	kc := PrefixKeys(testFP, saltOf("t1"), tg.PageSize, c)
	if kc[0] != ChainKey(BlockKey{}, testFP, saltOf("t1"), a[tg.PageSize:2*tg.PageSize]) || kc[0] == kc[1] || kc[0] == ka[1] {
		t.Fatal("a page's key does not depend on its parent")
	}
}

func TestCacheHitSameTenantMissOtherTenant(t *testing.T) {
	p := newPool(t, 8, func(c *Config) { c.Scrub = ScrubPoison })
	a := owner("t1", 1)
	toks := prompt(7, 2)
	refsA, keys := cachedSeq(t, p, a, toks)

	// Same tenant, same prefix: hit, and the rows are the writer's.
	b := owner("t1", 2)
	hit, err := p.Lookup(b, keys)
	if err != nil || len(hit) != 2 || hit[0] != refsA[0] || hit[1] != refsA[1] {
		t.Fatalf("same-tenant lookup: %v %v", hit, err)
	}
	vb := p.View(b, hit)
	for blk := range hit {
		for l := range tg.Layers {
			k, v, n, err := vb.Block(l, blk)
			if err != nil || n != tg.PageSize {
				t.Fatalf("read of a hit: %d %v", n, err)
			}
			for s := range n {
				pos := blk*tg.PageSize + s
				if !sameBits(k[s*tg.KVDim:(s+1)*tg.KVDim], row(a, refsA[blk].Gen, l, pos, false, tg.KVDim)) ||
					!sameBits(v[s*tg.KVDim:(s+1)*tg.KVDim], row(a, refsA[blk].Gen, l, pos, true, tg.KVDim)) {
					t.Fatal("a hit read rows its writer did not write")
				}
			}
		}
	}
	// Digest covers a sequence made of cached pages like any other.
	if _, err := p.Digest(b, hit, len(toks)); err != nil {
		t.Fatal(err)
	}

	// Other tenant, same prefix, with its own keys: miss.
	c := owner("t2", 3)
	if got, err := p.Lookup(c, PrefixKeys(testFP, saltOf("t2"), tg.PageSize, toks)); err != nil || len(got) != 0 {
		t.Fatalf("other tenant hit: %v %v", got, err)
	}
	// Other tenant presenting t1's very keys (a salt it should never have):
	// still a miss, the index is keyed by tenant too.
	if got, err := p.Lookup(c, keys); err != nil || len(got) != 0 {
		t.Fatalf("other tenant with the victim's keys hit: %v %v", got, err)
	}
	st := p.Stats()
	if st.CacheHits != 2 || st.CacheMisses != 4 || st.CacheReaders != 4 || st.Cached != 2 || st.CacheInserts != 2 {
		t.Fatalf("stats %+v", st)
	}

	// Release of one reader (a preempted sequence) leaves the entry for
	// the other, then idle, then found again.
	if err := p.Release(a, refsA); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := vb.Block(0, 1); err != nil {
		t.Fatalf("remaining reader lost the page: %v", err)
	}
	if err := p.Release(b, hit); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.CacheIdle != 2 || st.CacheReaders != 0 || st.Free != 6 {
		t.Fatalf("after every reader left: %+v", st)
	}
	if err := p.CheckDrained(); err != nil {
		t.Fatalf("idle cache pages count as drained: %v", err)
	}
	d := owner("t1", 4)
	if got, _ := p.Lookup(d, keys); len(got) != 2 {
		t.Fatalf("idle entry not found again: %v", got)
	}
	// A reader's double release is a violation, not a second share drop.
	if err := p.Release(d, got2(p, d, keys)); err != nil {
		t.Fatal(err)
	}
	err = p.Release(d, refsA)
	wantViolation(t, p, err, KindDoubleRelease, refsA[0].Page, true)
}

// got2 is Lookup that must not fail.
func got2(p *Pool, o Owner, keys []BlockKey) []PageRef {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []PageRef
	for _, k := range keys {
		pg := p.cache.index[entryKey{tenant: o.Tenant, key: k}]
		out = append(out, PageRef{Page: pg, Gen: tagGen(p.pages[pg].tag.Load())})
	}
	return out
}

func TestCacheForgedCrossTenantRead(t *testing.T) {
	p := newPool(t, 8)
	a := owner("t1", 1)
	refs, _ := cachedSeq(t, p, a, prompt(3, 2))
	// A page table forged to point at t1's cached pages, in a t2 view.
	forger := owner("t2", 9)
	k, _, _, err := p.View(forger, refs).Block(0, 0)
	if k != nil {
		t.Fatal("a foreign view read a cached page")
	}
	wantViolation(t, p, err, KindForeignOwner, refs[0].Page, true)
	// The suspect page is out of the index; its reader fails closed.
	if _, _, _, err := p.View(a, refs).Block(0, 0); !errors.Is(err, ErrQuarantined) {
		t.Fatalf("reader of a quarantined cached page: %v", err)
	}
	// A same-tenant sequence that never looked the page up cannot read it.
	_, _, _, err = p.View(owner("t1", 5), refs).Block(0, 1)
	wantViolation(t, p, err, KindForeignOwner, refs[1].Page, true)
	// The pages leave after the last reader and a lease (I6), scrubbed.
	if err := p.Release(a, refs); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	p.Expire(now)
	if err := p.CheckDrained(); err == nil {
		t.Fatal("a quarantined page left before its lease")
	}
	p.Expire(now.Add(time.Hour))
	if err := p.CheckDrained(); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Cached != 0 || st.Free != 8 {
		t.Fatalf("%+v", st)
	}
}

// The per-read tenant check does not rest on the owner check done when the
// view first touched the entry: a page whose tenant changed under an
// unchanged generation (a bookkeeping bug) is refused on the next read.
func TestViewChecksTenantOnEveryRead(t *testing.T) {
	for _, put := range []bool{false, true} {
		p := newPool(t, 2)
		a := owner("t1", 1)
		refs, _ := p.Reserve(a, 1)
		v := p.View(a, refs)
		fill(t, v, refs, 0, 2)
		if _, _, _, err := v.Block(0, 0); err != nil {
			t.Fatal(err)
		}
		p.mu.Lock()
		other := p.internLocked("t2")
		p.mu.Unlock()
		p.pages[refs[0].Page].tenant.Store(other)
		var err error
		if put {
			err = v.Put(0, 2, row(a, 0, 0, 2, false, tg.KVDim), row(a, 0, 0, 2, true, tg.KVDim))
		} else {
			var k []float32
			if k, _, _, err = v.Block(0, 0); k != nil {
				t.Fatal("read data of a page now tagged with another tenant")
			}
		}
		wantViolation(t, p, err, KindForeignOwner, refs[0].Page, true)
	}
}

func TestCacheForgedWriteIsViolation(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(p *Pool, o Owner, ref PageRef) error
	}{
		{"put", func(p *Pool, o Owner, ref PageRef) error {
			return p.View(o, []PageRef{ref}).Put(0, 0, make([]float32, tg.KVDim), make([]float32, tg.KVDim))
		}},
		{"writePage", func(p *Pool, o Owner, ref PageRef) error {
			return p.WritePage(o, ref, tg.PageSize, make([]byte, tg.PageBytes()))
		}},
		{"markWritten", func(p *Pool, o Owner, ref PageRef) error { return p.MarkWritten(o, ref, tg.PageSize) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPool(t, 4)
			a := owner("t1", 1)
			refs, keys := cachedSeq(t, p, a, prompt(4, 1))
			b := owner("t1", 2)
			hit, _ := p.Lookup(b, keys)
			before := append([]float32(nil), pageFloats(p, refs[0].Page)...)
			// The writer that inserted the page and a later reader: neither may write.
			for _, o := range []Owner{a, b} {
				err := tc.write(p, o, hit[0])
				if o == a {
					wantViolation(t, p, err, KindSealedWrite, refs[0].Page, true)
				} else if !errors.Is(err, ErrQuarantined) && !errors.Is(err, ErrSealedWrite) {
					t.Fatalf("second forged write: %v", err)
				}
			}
			if !sameBits(before, pageFloats(p, refs[0].Page)) {
				t.Fatal("a refused write changed a cached page")
			}
			if got, _ := p.Lookup(owner("t1", 3), keys); len(got) != 0 {
				t.Fatal("a page that was forged a write is still handed out")
			}
			_ = p.Release(a, refs)
			_ = p.Release(b, hit)
			p.Expire(time.Unix(0, 0))
			p.Expire(time.Unix(0, 0).Add(time.Hour))
			if err := p.CheckDrained(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestCacheEvictionUnderPressure(t *testing.T) {
	p := newPool(t, 4, func(c *Config) { c.Scrub = ScrubPoison })
	a := owner("t1", 1)
	refsA, keysA := cachedSeq(t, p, a, prompt(1, 2)) // pages of chain A
	b := owner("t1", 2)
	refsB, keysB := cachedSeq(t, p, b, prompt(2, 1))
	// b is, say, a prefill sending its pages: what it reads must not change
	// under pool pressure.
	imgB, _, err := p.PageData(b, refsB[0])
	if err != nil {
		t.Fatal(err)
	}
	imgB = append([]byte(nil), imgB...)
	digB, err := p.Digest(b, refsB, tg.PageSize)
	if err != nil {
		t.Fatal(err)
	}
	// A is idle, B is still read by b.
	if err := p.Release(a, refsA); err != nil {
		t.Fatal(err)
	}
	// 4 pages: 1 free, 2 idle, 1 read. A reservation that cannot fit even
	// with every idle page takes nothing and evicts nothing.
	if _, err := p.Reserve(owner("t3", 3), 4); !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("reserve of 4 with 1 free + 2 idle: %v", err)
	}
	if st := p.Stats(); st.CacheIdle != 2 || st.CacheEvictions != 0 {
		t.Fatalf("a failed reservation evicted: %+v", st)
	}
	// Two pages: one free + the oldest idle one, which is A's deeper page
	// (released last-first, so a chain's tail goes before its head).
	c := owner("t3", 4)
	got, err := p.Reserve(c, 2)
	if err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.CacheIdle != 1 || st.CacheEvictions != 1 || st.Cached != 2 {
		t.Fatalf("after pressure: %+v", st)
	}
	evicted := refsA[1]
	if got[0].Page != evicted.Page && got[1].Page != evicted.Page {
		t.Fatalf("evicted page %d not handed out: %v", evicted.Page, got)
	}
	// The evicted page is scrubbed for its new owner (I7) ...
	for i, f := range pageFloats(p, evicted.Page) {
		if math.Float32bits(f) != PoisonBits {
			t.Fatalf("evicted page float %d not scrubbed", i)
		}
	}
	// ... and a stale view of it fails (new generation).
	_, _, _, err = p.View(a, refsA).Block(0, 1)
	wantViolation(t, p, err, KindStaleGeneration, evicted.Page, true)
	// The chain's head is still found; its tail is a miss.
	if h, _ := p.Lookup(owner("t1", 5), keysA); len(h) != 1 {
		t.Fatalf("chain head after evicting its tail: %v", h)
	}
	// The page b reads is never evicted.
	if n := p.EvictIdle(-1); n != 0 {
		t.Fatalf("evicted %d pages with readers", n)
	}
	if h, _ := p.Lookup(owner("t1", 6), keysB); len(h) != 1 {
		t.Fatal("a page in use was evicted")
	}
	img, _, err := p.PageData(b, refsB[0])
	if err != nil || string(img) != string(imgB) {
		t.Fatalf("a page being sent changed under pressure: %v", err)
	}
	if d, err := p.Digest(b, refsB, tg.PageSize); err != nil || d != digB {
		t.Fatalf("digest of a read page changed under pressure: %v", err)
	}
}

func TestCacheInvalidateTenant(t *testing.T) {
	p := newPool(t, 4)
	a := owner("t1", 1)
	refs, keys := cachedSeq(t, p, a, prompt(1, 2))
	o2 := owner("t2", 2)
	refs2, _ := cachedSeq(t, p, o2, prompt(1, 1))
	_ = p.Release(o2, refs2)
	if n := p.InvalidateTenant("t1"); n != 2 {
		t.Fatalf("invalidated %d", n)
	}
	if h, _ := p.Lookup(owner("t1", 3), keys); len(h) != 0 {
		t.Fatal("invalidated entries still found")
	}
	// The reader keeps reading until it releases; then the pages go.
	if _, _, _, err := p.View(a, refs).Block(1, 1); err != nil {
		t.Fatal(err)
	}
	_ = p.Release(a, refs)
	if st := p.Stats(); st.Cached != 1 || st.Free != 3 || st.CacheIdle != 1 {
		t.Fatalf("%+v", st)
	}
}

func TestCacheLookupVerifiesSeal(t *testing.T) {
	p := newPool(t, 4)
	a := owner("t1", 1)
	refs, keys := cachedSeq(t, p, a, prompt(1, 2))
	_ = p.Release(a, refs)
	pageFloats(p, refs[1].Page)[3] += 1 // a stray write into the idle cached page
	got, err := p.Lookup(owner("t1", 2), keys)
	if got != nil {
		t.Fatal("a corrupt cached page was handed out")
	}
	wantViolation(t, p, err, KindDigestMismatch, refs[1].Page, true)
	if st := p.Stats(); st.CacheReaders != 0 || st.Cached != 1 {
		t.Fatalf("a failed lookup holds shares: %+v", st)
	}
}

func TestCacheInsertRefusesUnsealedOrForeign(t *testing.T) {
	p := newPool(t, 4)
	a := owner("t1", 1)
	refs, _ := p.Reserve(a, 2)
	v := p.View(a, refs)
	fill(t, v, refs, 0, tg.PageSize+1)
	var k BlockKey
	if _, err := p.Insert(a, refs[0], k); !errors.Is(err, ErrBadRange) {
		t.Fatalf("insert of an unsealed page: %v", err)
	}
	_ = p.Seal(a, refs)
	if _, err := p.Insert(a, refs[1], k); !errors.Is(err, ErrBadRange) {
		t.Fatalf("insert of a partial page: %v", err)
	}
	_, err := p.Insert(owner("t2", 2), refs[0], k)
	wantViolation(t, p, err, KindForeignOwner, refs[0].Page, true)
}

func TestCacheDuplicateInsertKeepsPagePrivate(t *testing.T) {
	p := newPool(t, 4)
	a := owner("t1", 1)
	_, keys := cachedSeq(t, p, a, prompt(1, 1))
	b := owner("t1", 2)
	refs, _ := p.Reserve(b, 1)
	fill(t, p.View(b, refs), refs, 0, tg.PageSize)
	_ = p.Seal(b, refs)
	if ok, err := p.Insert(b, refs[0], keys[0]); ok || err != nil {
		t.Fatalf("second insert of one key: %v %v", ok, err)
	}
	if err := p.Release(b, refs); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Cached != 1 || st.Free != 3 {
		t.Fatalf("%+v", st)
	}
}

// The operator's public scope: pages inserted public are found by every
// tenant's LookupPublic and read through their views; a tenant's private
// continuation after them is not, even under its exact key; without the
// public count nothing public is found; the pages stay read-only and
// outlive a tenant's invalidation.
func TestCachePublicScope(t *testing.T) {
	p := newPool(t, 8)
	a, b := owner("a", 1), owner("b", 2)
	pub := prompt(9, 2)
	privA := append(append([]int32(nil), pub...), prompt(1, 1)...)
	// The engine's chain: public salt over the public pages, then the
	// tenant's salt chained from the last public key.
	chain := func(tenant string, toks []int32) []BlockKey {
		k := PrefixKeys(testFP, saltOf("public"), tg.PageSize, toks[:len(pub)])
		last := k[len(k)-1]
		for i := len(pub) / tg.PageSize; i < len(toks)/tg.PageSize; i++ {
			last = ChainKey(last, testFP, saltOf(tenant), toks[i*tg.PageSize:(i+1)*tg.PageSize])
			k = append(k, last)
		}
		return k
	}
	keysA := chain("a", privA)
	refs, _ := p.Reserve(a, 3)
	fill(t, p.View(a, refs), refs, 0, len(privA))
	_ = p.Seal(a, refs)
	for i, r := range refs {
		var ok bool
		var err error
		if i < 2 {
			ok, err = p.InsertPublic(a, r, keysA[i])
		} else {
			ok, err = p.Insert(a, r, keysA[i])
		}
		if !ok || err != nil {
			t.Fatalf("insert %d: %v %v", i, ok, err)
		}
	}
	// a still reads all three through its own view (public pages too).
	va := p.View(a, refs)
	for blk := range 3 {
		if _, _, _, err := va.Block(0, blk); err != nil {
			t.Fatalf("a's read of block %d: %v", blk, err)
		}
	}
	_ = p.Release(a, refs)

	// b, even naming a's exact keys, gets the two public pages only.
	hits, err := p.LookupPublic(b, keysA, 2)
	if err != nil || len(hits) != 2 || hits[0] != refs[0] || hits[1] != refs[1] {
		t.Fatalf("b's public lookup: %v %v, want a's two public pages", hits, err)
	}
	vb := p.View(b, hits)
	k, _, _, err := vb.Block(1, 1)
	if err != nil || !sameBits(k[:tg.KVDim], row(a, refs[1].Gen, 1, tg.PageSize, false, tg.KVDim)) {
		t.Fatalf("b's read of the public page: %v", err)
	}
	if err := p.audit(); err != nil {
		t.Fatal(err)
	}

	c := owner("c", 3)
	if got, _ := p.Lookup(c, keysA); len(got) != 0 {
		t.Fatalf("a lookup without the public count found %d pages", len(got))
	}
	if got, _ := p.LookupPublic(c, keysA[:2], 0); len(got) != 0 {
		t.Fatal("public pages found in a tenant's own scope")
	}
	// a tenant key equal to a public key is still private: public count 0.
	if got, _ := p.LookupPublic(a, keysA, 2); len(got) != 3 {
		t.Fatalf("a's own lookup: %d pages, want 3", len(got))
	} else {
		_ = p.Release(a, got)
	}
	if n := p.InvalidateTenant("a"); n != 1 {
		t.Fatalf("invalidating a removed %d entries, want its 1 private one", n)
	}
	if got, _ := p.LookupPublic(c, keysA[:2], 2); len(got) != 2 {
		t.Fatalf("public pages gone after a's invalidation: %d", len(got))
	} else {
		_ = p.Release(c, got)
	}
	// A forged write, last (it quarantines the page); a forged read of a
	// tenant's cached page is TestCacheForgedCrossTenantRead's.
	if err := vb.Put(0, 3, make([]float32, tg.KVDim), make([]float32, tg.KVDim)); !errors.Is(err, ErrSealedWrite) {
		t.Fatalf("a write into a public page: %v, want sealed_write", err)
	}
	if err := p.audit(); err != nil {
		t.Fatal(err)
	}
}

// Issue 30 item 8: an owner that already reads a cached page gets no
// second share of it (a second lookup of the same keys is a miss): one
// release then ends its reading, and once every reader released, the
// pages are idle (evictable), not pinned by a share counted twice.
func TestCacheNoDuplicateReaderShare(t *testing.T) {
	p := newPool(t, 8)
	a := owner("t1", 1)
	refsA, keys := cachedSeq(t, p, a, prompt(7, 2))
	b := owner("t1", 2)
	hit, err := p.Lookup(b, keys)
	if err != nil || len(hit) != 2 {
		t.Fatalf("first lookup: %v %v", hit, err)
	}
	if again, err := p.Lookup(b, keys); err != nil || len(again) != 0 {
		t.Fatalf("a second lookup by the same owner took %d more shares (%v)", len(again), err)
	}
	if err := p.Release(b, hit); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(a, refsA); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.CacheReaders != 0 || st.CacheIdle != 2 {
		t.Fatalf("after every reader released: %d readers, %d idle pages, want 0 and 2", st.CacheReaders, st.CacheIdle)
	}
}
