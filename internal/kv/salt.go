package kv

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
)

// Salts of the prefix cache (I11). The salt a page key is built with comes
// from the server, never from the caller: it is an HMAC, keyed with the
// deployment's secret, of the AUTHENTICATED tenant. A caller may narrow
// sharing within its tenant (OpenAI's prompt_cache_key, vLLM's cache_salt)
// but never widen it: the narrowing is a second HMAC keyed with the tenant's
// salt, so no value a caller sends can produce another tenant's salt (the
// flaw of a caller-supplied salt, vllm#53347), and the cache index is keyed
// by tenant as well (cache.go).

// Derivation labels: distinct from every other use of the deployment
// secret (node authentication), so a salt reveals nothing about the keys
// derived for those.
const (
	tenantSaltLabel = "sluice prefix-cache salt v1"
	scopeSaltLabel  = "sluice prefix-cache scope v1"
	publicSaltLabel = "sluice prefix-cache public v1"
)

// PublicSalt is the salt of the operator's public cache scope (a declared
// public system prompt every tenant may share, --shared-prefix-file):
// HMAC-SHA256(secret, its own label). It equals no tenant's salt (another
// label), and public entries live apart in the index (InsertPublic).
func PublicSalt(secret []byte) Salt {
	return saltHMAC(secret, publicSaltLabel, "")
}

// TenantSalt is HMAC-SHA256(secret, label || len(tenant) || tenant). The
// length prefix keeps ("ab","c") and ("a","bc")-style concatenations apart.
func TenantSalt(secret []byte, tenant string) Salt {
	return saltHMAC(secret, tenantSaltLabel, tenant)
}

// Narrow is the salt of a cache scope inside s's tenant: s itself for the
// empty scope, else HMAC-SHA256(s, label || len(scope) || scope). Requests
// of one tenant with different scopes never share pages; requests of two
// tenants never do, whatever scopes they name.
func (s Salt) Narrow(scope string) Salt {
	if scope == "" {
		return s
	}
	return saltHMAC(s[:], scopeSaltLabel, scope)
}

func saltHMAC(key []byte, label, v string) Salt {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(label))
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(v)))
	m.Write(n[:])
	m.Write([]byte(v))
	var out Salt
	m.Sum(out[:0])
	return out
}
