package engine

import (
	"crypto/rand"
	"encoding/binary"

	"sluice/internal/kv"
)

// prefixCache is a worker's use of its pool's prefix cache (kv/cache.go,
// I11): the keys of a request's full prompt pages, the lookup at admission
// and the insertion of newly computed full pages when the prompt is done.
// The salt is derived here, from the authenticated tenant the router put in
// Request.Tenant and the deployment secret; the request can only narrow it
// (Request.CacheScope).
type prefixCache struct {
	pool   *kv.Pool
	secret []byte
	fp     []byte
	ps     int
	blind  bool // Unsafe.TenantBlindCache: TEST HOOK, no tenant in the salt
}

// newPrefixCache is nil (no cache) when cfg turns it off or the pool is not
// a real kv pool.
func newPrefixCache(cfg Config, pool pagePool) *prefixCache {
	return newPrefixCacheOn(cfg, rawPool(pool))
}

// newPrefixCacheOn is the cache of raw (nil: none), for a worker whose
// pool is wrapped by a driver (Driven.Raw).
func newPrefixCacheOn(cfg Config, raw *kv.Pool) *prefixCache {
	if !cfg.PrefixCache || raw == nil {
		return nil
	}
	secret := cfg.CacheSecret
	if len(secret) == 0 {
		// One process, one pool: a random secret serves as well as a
		// configured one, since no other process shares this cache.
		secret = make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			panic("engine: crypto/rand failed: " + err.Error())
		}
	}
	return &prefixCache{pool: raw, secret: secret, fp: cfg.fingerprint(), ps: cfg.PageSize, blind: cfg.Unsafe.TenantBlindCache}
}

// fingerprint names the model in cache keys: the model file's fingerprint
// (I13) when the runtime knows it, so KV computed by one model is never
// found by another; else (test runtimes) the model's name and shape. A pool
// only ever holds one model's KV, so the key has to keep apart only what
// one process could load in turn.
func (c Config) fingerprint() []byte {
	if len(c.ModelFingerprint) > 0 {
		return c.ModelFingerprint
	}
	if fp := FingerprintOf(c.Model); fp.Sum != ([16]byte{}) {
		return append([]byte("gguf:"), fp.Sum[:]...)
	}
	b := []byte("shape:" + c.Model.Name())
	for _, n := range []int{c.Model.Layers(), c.Model.KVDim(), c.Model.Vocab(), c.Model.Context()} {
		b = binary.LittleEndian.AppendUint64(b, uint64(n))
	}
	return b
}

// keys are the chain keys of r's full prompt pages.
func (pc *prefixCache) keys(r *Request) []kv.BlockKey {
	tenant := r.Tenant
	if pc.blind {
		tenant = "" // the salt-less key of a tenant-blind cache
	}
	salt := kv.TenantSalt(pc.secret, tenant).Narrow(r.CacheScope)
	return kv.PrefixKeys(pc.fp, salt, pc.ps, r.Prompt)
}

// lookup takes the cached leading pages of the prompt for o (shares held).
// It never covers the prompt's last token: that token's logits give the
// first output token, so it is always computed. A failed lookup (a cached
// page that no longer matches its seal) is a miss: the pool has counted and
// quarantined it, and recomputing never reads it.
func (pc *prefixCache) lookup(o kv.Owner, keys []kv.BlockKey, promptLen int) []kv.PageRef {
	n := min(len(keys), (promptLen-1)/pc.ps)
	if n <= 0 {
		return nil
	}
	hits, err := pc.pool.Lookup(o, keys[:n])
	if err != nil {
		return nil
	}
	return hits
}

// insert seals the full prompt pages table[from:len(keys)], which o has
// just computed, and hands them to the cache. Failures leave the pages
// private: caching is an optimisation, never a reason to fail a request.
func (pc *prefixCache) insert(o kv.Owner, table []kv.PageRef, keys []kv.BlockKey, from int) {
	to := min(len(keys), len(table))
	if from >= to {
		return
	}
	if err := pc.pool.Seal(o, table[from:to]); err != nil {
		return
	}
	for i := from; i < to; i++ {
		_, _ = pc.pool.Insert(o, table[i], keys[i])
	}
}
