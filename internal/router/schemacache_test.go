package router

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"sluice/internal/grammar"
)

// The router checks each schema a tenant sends (response_format's, each
// tool's parameters and tool_choice "required"'s anyOf of them) once: the
// same schema again from the same tenant is a hit, refused ones too (with
// the same code), while another tenant's first use of it is a miss like
// any other (I11: no timing tells one tenant what another sent). The
// counts are the metrics sluice_schema_check_cache_{hits,misses}_total.
func TestSchemaChecksCachedPerTenant(t *testing.T) {
	keys, err := ParseKeys(strings.NewReader("key-a acme\nkey-b globex\n"))
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, 64, func(c *Config) { c.Keys, c.MaxBodyBytes = keys, 1<<16 })
	admin := httptest.NewServer(h.srv.AdminHandler())
	defer admin.Close()
	post := func(key, extra string) (int, string) {
		t.Helper()
		body := `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,` + extra + `}`
		req, _ := http.NewRequest("POST", h.ts.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	format := `"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"a":{"type":"string"}}}}}`
	tools := `"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"x":{"type":"integer"}}}}},{"type":"function","function":{"name":"g"}}],"tool_choice":"required"`
	bad := `"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"string","pattern":"^(a?)*$"}}}`
	steps := []struct {
		key, extra   string
		hits, misses int64
		refused      bool
	}{
		{"key-a", format, 0, 1, false},
		{"key-a", format, 1, 1, false},
		{"key-b", format, 1, 2, false}, // another tenant's first use: a miss
		{"key-a", tools, 1, 5, false},  // f's and g's parameters, then their anyOf
		{"key-a", tools, 4, 5, false},
		{"key-a", bad, 4, 6, true},
		{"key-a", bad, 5, 6, true}, // a refusal is remembered too
		{"key-b", tools, 5, 9, false},
	}
	for i, s := range steps {
		code, body := post(s.key, s.extra)
		if refused := code == 400; refused != s.refused || (s.refused && !strings.Contains(body, `"unsupported_schema"`)) {
			t.Fatalf("step %d: %d %s", i, code, body)
		}
		if hits, misses := h.srv.schemas.Stats(); hits != s.hits || misses != s.misses {
			t.Fatalf("step %d: %d hits and %d misses, want %d and %d", i, hits, misses, s.hits, s.misses)
		}
	}
	_, body := get(t, admin.URL+"/metrics")
	for _, want := range []string{"sluice_schema_check_cache_hits_total 5\n", "sluice_schema_check_cache_misses_total 9\n"} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// A schema check cut short by the end of its request (it waited for the
// same tenant's concurrent compile, grammar.Checks) is the 499 of a client
// that went away in metrics and logs, not a schema the server refused.
func TestSchemaCheckCancelledIsClientGone(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for _, err := range []error{context.Canceled, fmt.Errorf("waiting: %w", context.DeadlineExceeded), ctx.Err()} {
		if e := schemaError("tools", err); e.Status != statusClientGone || e.Code != CodeClientGone {
			t.Fatalf("%v: %d %s, want %d %s", err, e.Status, e.Code, statusClientGone, CodeClientGone)
		}
	}
	if e := schemaError("tools", &grammar.Error{Code: "schema_too_deep", Msg: "deep"}); e.Status != http.StatusBadRequest || e.Code != "schema_too_deep" {
		t.Fatalf("a refused schema: %d %s", e.Status, e.Code)
	}
}
