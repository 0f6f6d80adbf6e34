package router

import "testing"

// --api-key's table: the key maps to the single tenant; a key no client
// could send in a header is refused.
func TestSingleKey(t *testing.T) {
	k, err := SingleKey("sk-abc.123_XYZ")
	if err != nil {
		t.Fatal(err)
	}
	if tenant, ok := k.Lookup("sk-abc.123_XYZ"); !ok || tenant != SingleTenant || k.Tenants() != 1 {
		t.Errorf("lookup: %q %v, %d tenants", tenant, ok, k.Tenants())
	}
	if _, ok := k.Lookup("sk-abc.123_XY"); ok {
		t.Error("a prefix of the key was accepted")
	}
	for _, bad := range []string{"", "two words", "tab\tkey", "caf\u00e9"} {
		if _, err := SingleKey(bad); err == nil {
			t.Errorf("SingleKey(%q) accepted", bad)
		}
	}
}
