package engine

import (
	"bytes"
	"testing"

	"sluice/internal/kv"
)

// TestCacheKeysNameTheKVType: the prefix cache's keys of the same model,
// tenant and prompt differ between F16, F32 and Q8_0 pages (whichever way
// the model is named), so a page of one type is never found for another.
func TestCacheKeysNameTheKVType(t *testing.T) {
	for _, named := range [][]byte{nil, []byte("weights-v1")} {
		for _, pair := range [][2]kv.Type{{kv.F16, kv.F32}, {kv.F16, kv.Q8_0}, {kv.F32, kv.Q8_0}} {
			x := Config{Model: newToy(), ModelFingerprint: named, KVType: pair[0]}
			y := x
			y.KVType = pair[1]
			if bytes.Equal(x.fingerprint(), y.fingerprint()) {
				t.Fatalf("model named %q: %v and %v pages share cache keys", named, pair[0], pair[1])
			}
			prompt := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}
			salt := kv.TenantSalt([]byte("secret-of-16-bytes"), "acme")
			a, b := kv.PrefixKeys(x.fingerprint(), salt, 4, prompt), kv.PrefixKeys(y.fingerprint(), salt, 4, prompt)
			if len(a) == 0 || a[0] == b[0] {
				t.Fatalf("model named %q: first page key the same for %v and %v", named, pair[0], pair[1])
			}
		}
	}
}
