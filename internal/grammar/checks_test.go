package grammar

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// The router's cache of schema checks answers a tenant's schema from
// memory the second time, refusals included, and never from another
// tenant's check; it reports $ref use as the compiler found it; and it is
// bounded like the workers' grammar cache: a tenant past its bytes drops
// its own oldest checks, and past the total the heaviest tenant gives up
// room, never the light tenant holding less than the others.
func TestChecksCachedPerTenant(t *testing.T) {
	c := NewChecks(0, 0)
	ref := []byte(`{"$defs":{"s":{"type":"string"}},"$ref":"#/$defs/s"}`)
	named := []byte(`{"type":"object","properties":{"$ref":{"type":"string"}}}`)
	bad := []byte(`{"type":"string","pattern":"^(a?)*$"}`)
	for i, s := range []struct {
		tenant         string
		schema         []byte
		usesRef, hit   bool
		code           string
		hitsN, missesN int64
	}{
		{"A", ref, true, false, "", 0, 1},
		{"A", ref, true, true, "", 1, 1},
		{"B", ref, true, false, "", 1, 2},
		{"A", named, false, false, "", 1, 3},
		{"A", bad, false, false, "unsupported_schema", 1, 4},
		{"A", bad, false, true, "unsupported_schema", 2, 4},
		{"B", bad, false, false, "unsupported_schema", 2, 5},
	} {
		usesRef, hit, err := c.Check(s.tenant, s.schema)
		var ge *Error
		if usesRef != s.usesRef || hit != s.hit || (s.code == "") != (err == nil) || (err != nil && (!errors.As(err, &ge) || ge.Code != s.code)) {
			t.Fatalf("step %d: usesRef %v hit %v err %v, want %v %v %q", i, usesRef, hit, err, s.usesRef, s.hit, s.code)
		}
		if h, m := c.Stats(); h != s.hitsN || m != s.missesN {
			t.Fatalf("step %d: %d hits %d misses, want %d %d", i, h, m, s.hitsN, s.missesN)
		}
	}

	c = NewChecks(10*checkEntryBytes+checkEntryBytes/2, 30*checkEntryBytes+checkEntryBytes/2)
	light := []byte(`{"const":"light"}`)
	if _, _, err := c.Check("a-light", light); err != nil {
		t.Fatal(err)
	}
	for i := range 25 {
		for _, h := range []string{"h1", "h2", "h3", "h4"} {
			if _, _, err := c.Check(h, fmt.Appendf(nil, `{"const":%d}`, i)); err != nil {
				t.Fatal(err)
			}
			c.mu.Lock()
			over := c.l.held[h] > c.l.tenantBytes || c.l.bytes > c.l.maxBytes
			lightHeld := c.l.count("a-light")
			c.mu.Unlock()
			if over {
				t.Fatalf("%s's check %d: past a bound (%d bytes held, %d in all)", h, i, c.l.held[h], c.l.bytes)
			}
			if lightHeld != 1 {
				t.Fatalf("%s's check %d evicted the light tenant's", h, i)
			}
		}
	}
	if _, hit, _ := c.Check("a-light", light); !hit {
		t.Fatal("the light tenant's check was not kept")
	}
	if _, hit, _ := c.Check("h1", []byte(`{"const":0}`)); hit {
		t.Fatal("h1's oldest check was kept past its own bound")
	}
}

// BenchmarkSchemaCheck compares the router's check of a 60 KB schema
// compiled every time (what it did per request) with the same check
// answered by Checks (what a tenant's repeated schema now costs).
func BenchmarkSchemaCheck(b *testing.B) {
	var props []string
	for i := 0; len(strings.Join(props, ",")) < 60<<10; i++ {
		props = append(props, fmt.Sprintf(`"p%d":{"type":"string","pattern":"^[a-z]{1,%d}(-[a-z0-9]+)*$"}`, i, 2+i%16))
	}
	schema := []byte(`{"type":"object","properties":{` + strings.Join(props, ",") + `},"additionalProperties":false}`)
	if _, err := CompileSchema(schema); err != nil {
		b.Fatal(err)
	}
	b.Logf("schema of %d bytes", len(schema))
	b.Run("compile", func(b *testing.B) {
		for b.Loop() {
			if _, err := CompileSchema(schema); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		c := NewChecks(0, 0)
		c.Check("A", schema)
		for b.Loop() {
			if _, hit, err := c.Check("A", schema); err != nil || !hit {
				b.Fatal(err, hit)
			}
		}
	})
}
