package preflight

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// fakeEndpoints serves fixed JSON bodies by path, in the shapes these
// projects document; anything else is 404.
func fakeEndpoints(t *testing.T, bodies map[string]string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := bodies[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(b))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestRemoteShapes(t *testing.T) {
	cases := []struct {
		name     string
		bodies   map[string]string
		server   string
		ok       bool
		problem  string // substring of the first problem
		noteHas  string
		figNamed string // a figure that must be reported as not exposed
	}{
		{
			name: "sglang pool smaller than context (the incident)",
			bodies: map[string]string{
				"/v1/models":       `{"object":"list","data":[{"id":"m","object":"model","max_model_len":1048576}]}`,
				"/get_server_info": `{"context_length":1048576,"chunked_prefill_size":8192,"internal_states":[{"max_total_num_tokens":681280,"max_req_input_len":1048570}]}`,
			},
			server: "sglang", problem: "holds 681280 tokens but the context length is 1048576",
		},
		{
			name: "sglang consistent",
			bodies: map[string]string{
				"/get_server_info": `{"context_length":32768,"max_total_num_tokens":500000,"max_req_input_len":32762}`,
			},
			server: "sglang", ok: true, noteHas: "advertises no context length",
		},
		{
			name: "sglang without pool figure",
			bodies: map[string]string{
				"/server_info": `{"context_length":32768}`,
			},
			server: "sglang", ok: true, noteHas: "could not be compared", figNamed: "KV pool tokens",
		},
		{
			name: "vllm",
			bodies: map[string]string{
				"/v1/models": `{"object":"list","data":[{"id":"meta-llama/Llama-3.1-8B","object":"model","max_model_len":131072}]}`,
			},
			server: "openai-compatible (vLLM or other)", ok: true, noteHas: "vLLM refuses to start",
		},
		{
			name: "llama.cpp server",
			bodies: map[string]string{
				"/v1/models": `{"object":"list","data":[{"id":"model.gguf","object":"model"}]}`,
				"/props":     `{"default_generation_settings":{"n_ctx":4096,"params":{}},"total_slots":4,"model_path":"model.gguf"}`,
			},
			server: "llama.cpp", ok: true, noteHas: "per slot",
		},
		{
			name: "sluice with a role pool below the context",
			bodies: map[string]string{
				"/v1/models":   `{"object":"list","data":[{"id":"stories260K","object":"model","context_length":2048}]}`,
				"/sluice/info": `{"server":"sluice","model":"stories260K","context":2048,"roles":[{"role":"prefill","pool_tokens":4096,"page_size":16,"context":2048},{"role":"decode","pool_tokens":1024,"page_size":16,"context":2048}]}`,
			},
			server: "sluice", problem: "the decode role's KV pool holds 1024 tokens but the server admits requests up to 2048",
		},
		{
			name: "sluice advertising more than it admits",
			bodies: map[string]string{
				"/v1/models":   `{"object":"list","data":[{"id":"m","object":"model","context_length":4096}]}`,
				"/sluice/info": `{"server":"sluice","model":"m","context":2048,"roles":[{"role":"decode","pool_tokens":4096,"page_size":16,"context":2048}]}`,
			},
			server: "sluice", problem: "clients are told the context is 4096",
		},
		{
			name:   "nothing exposed",
			bodies: map[string]string{"/v1/models": `{"object":"list","data":[{"id":"m"}]}`},
			server: "unknown", ok: true, noteHas: "exposes neither",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			url := fakeEndpoints(t, c.bodies)
			r, err := Remote(context.Background(), url, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			r.WriteText(&b)
			t.Log(b.String())
			if r.Server != c.server {
				t.Errorf("server = %q, want %q", r.Server, c.server)
			}
			if r.OK() != c.ok {
				t.Errorf("OK() = %v, want %v; problems %v", r.OK(), c.ok, r.Problems)
			}
			if c.problem != "" && (len(r.Problems) == 0 || !strings.Contains(r.Problems[0], c.problem)) {
				t.Errorf("problems %q, want one containing %q", r.Problems, c.problem)
			}
			if c.noteHas != "" && !strings.Contains(strings.Join(r.Notes, "|"), c.noteHas) {
				t.Errorf("notes %q, want one containing %q", r.Notes, c.noteHas)
			}
			if c.figNamed != "" {
				found := false
				for _, f := range r.Figures {
					if f.Name == c.figNamed && !f.Known && strings.Contains(f.Source, "not exposed") {
						found = true
					}
				}
				if !found {
					t.Errorf("figure %q not reported as not exposed: %+v", c.figNamed, r.Figures)
				}
			}
		})
	}
}
