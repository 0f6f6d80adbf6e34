package engine

import (
	"bytes"
	"testing"

	"sluice/internal/kv"
)

// TestCacheKeysNameTheKVType: the prefix cache's keys of the same model,
// tenant and prompt differ between F16 and F32 pages (whichever way the
// model is named), so a page of one type is never found for the other.
func TestCacheKeysNameTheKVType(t *testing.T) {
	for _, named := range [][]byte{nil, []byte("weights-v1")} {
		f16 := Config{Model: newToy(), ModelFingerprint: named, KVType: kv.F16}
		f32 := f16
		f32.KVType = kv.F32
		if bytes.Equal(f16.fingerprint(), f32.fingerprint()) {
			t.Fatalf("model named %q: F16 and F32 pages share cache keys", named)
		}
		prompt := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}
		salt := kv.TenantSalt([]byte("secret-of-16-bytes"), "acme")
		a, b := kv.PrefixKeys(f16.fingerprint(), salt, 4, prompt), kv.PrefixKeys(f32.fingerprint(), salt, 4, prompt)
		if len(a) == 0 || a[0] == b[0] {
			t.Fatalf("model named %q: first page key the same for both types", named)
		}
	}
}
