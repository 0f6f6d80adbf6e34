package router

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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

// The key-file line the flags' help shows is one the parser takes: each of
// its options, with a number for N, is a valid line.
func TestKeyLineFormatParses(t *testing.T) {
	line := strings.NewReplacer("KEY", "sk-1", "TENANT", "acme", "[", "", "]", "", "=N", "=7").Replace(KeyLineFormat)
	p := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(p, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := LoadKeys(p)
	if err != nil {
		t.Fatalf("%q (from KeyLineFormat) does not parse: %v", line, err)
	}
	if tenant, ok := k.Lookup("sk-1"); !ok || tenant != "acme" {
		t.Fatalf("%q: lookup %q %v", line, tenant, ok)
	}
	for _, opt := range []string{"weight=", "rpm=", "tpm="} {
		if !strings.Contains(KeyLineFormat, opt) {
			t.Errorf("KeyLineFormat %q does not name %sN, which key files take", KeyLineFormat, opt)
		}
	}
}
