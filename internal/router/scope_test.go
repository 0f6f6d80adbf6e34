package router

import (
	"strings"
	"testing"
)

// Issue 30 item 8: the cache scope's two fields. Each is bounded at 256
// bytes (the 257th is a 400 naming the field), and their join is length
// prefixed, so a prompt_cache_key that spells "x;cache_salt:y" is not
// the scope of key "x" with salt "y" (a caller cannot reach another
// caller's narrowed scope by moving bytes between the fields).
func TestCacheScopeBoundAndJoin(t *testing.T) {
	s := func(v string) *string { return &v }
	for _, f := range []string{"prompt_cache_key", "cache_salt"} {
		ok, long := s(strings.Repeat("k", 256)), s(strings.Repeat("k", 257))
		var k, v [2]*string
		k[0], k[1] = ok, long
		if f == "cache_salt" {
			v[0], v[1] = ok, long
			k = [2]*string{}
		}
		if _, e := cacheScope(k[0], v[0]); e != nil {
			t.Errorf("%s of 256 bytes refused: %v", f, e)
		}
		_, e := cacheScope(k[1], v[1])
		if e == nil || e.Status != 400 || e.Param != f {
			t.Errorf("%s of 257 bytes: %+v, want a 400 naming %s", f, e, f)
		}
	}
	a, e1 := cacheScope(s("x;cache_salt:y"), nil)
	b, e2 := cacheScope(s("x"), s("y"))
	if e1 != nil || e2 != nil || a == b {
		t.Fatalf("key %q alone and key %q with salt %q give the same scope %q (%v %v)", "x;cache_salt:y", "x", "y", a, e1, e2)
	}
	c, _ := cacheScope(nil, s("y"))
	d, _ := cacheScope(s("y"), nil)
	if c == d || c == "" {
		t.Fatalf("the same value as key and as salt gives one scope %q", c)
	}
}
