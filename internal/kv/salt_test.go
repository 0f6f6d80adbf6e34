package kv

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

// The salt against an independent computation of its definition.
func TestTenantSaltIsHMACOfTenant(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("sluice prefix-cache salt v1"))
	m.Write([]byte{2, 0, 0, 0, 0, 0, 0, 0})
	m.Write([]byte("t1"))
	if got := TenantSalt(secret, "t1"); hex.EncodeToString(got[:]) != hex.EncodeToString(m.Sum(nil)) {
		t.Fatal("TenantSalt is not HMAC-SHA256(secret, label || len || tenant)")
	}
	if TenantSalt(secret, "t1") == TenantSalt([]byte("another deployment's secret!!!!!"), "t1") {
		t.Fatal("the salt does not depend on the deployment secret")
	}
}

// Same tenant same prefix: hit; other tenant: miss; a caller-supplied
// scope equal to another tenant's name or salt: still a miss.
func TestSaltedCacheNeverCrossesTenants(t *testing.T) {
	secret := []byte("deployment secret, 32 bytes long")
	p := newPool(t, 8)
	toks := prompt(5, 2)
	keysFor := func(tenant, scope string) []BlockKey {
		return PrefixKeys(testFP, TenantSalt(secret, tenant).Narrow(scope), tg.PageSize, toks)
	}
	a := owner("alice", 1)
	refs, err := p.Reserve(a, 2)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, p.View(a, refs), refs, 0, len(toks))
	_ = p.Seal(a, refs)
	for i, k := range keysFor("alice", "") {
		if ok, err := p.Insert(a, refs[i], k); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	_ = p.Release(a, refs)

	look := func(tenant, scope string) int {
		o := owner(tenant, 2)
		h, err := p.Lookup(o, keysFor(tenant, scope))
		if err != nil {
			t.Fatal(err)
		}
		_ = p.Release(o, h)
		return len(h)
	}
	if n := look("alice", ""); n != 2 {
		t.Fatalf("same tenant, same prefix: %d pages hit, want 2", n)
	}
	if n := look("alice", "conversation-7"); n != 0 {
		t.Fatalf("a narrowing scope still shared the tenant-wide entry (%d pages)", n)
	}
	aliceSalt := TenantSalt(secret, "alice")
	for _, scope := range []string{"", "alice", hex.EncodeToString(aliceSalt[:]), string(aliceSalt[:])} {
		if n := look("mallory", scope); n != 0 {
			t.Fatalf("other tenant with scope %q hit %d pages", scope, n)
		}
	}
	// Even a key built with alice's salt, presented by mallory, misses:
	// the index is keyed by tenant too.
	o := owner("mallory", 3)
	if h, _ := p.Lookup(o, keysFor("alice", "")); len(h) != 0 {
		t.Fatal("another tenant's keys hit")
	}
	// Narrowing never yields another tenant's salt, whatever the scope.
	for _, scope := range []string{"alice", "", "\x00alice"} {
		if TenantSalt(secret, "mallory").Narrow(scope) == aliceSalt {
			t.Fatalf("scope %q widened mallory's salt to alice's", scope)
		}
	}
}
