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
		kv       string // Discovery.KVBuffer
		verdict  string
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
				"/v1/models": `{"object":"list","data":[{"id":"meta-llama/Llama-3.1-8B","object":"model","owned_by":"vllm","max_model_len":131072}]}`,
			},
			server: "vllm", ok: true, noteHas: "vLLM refuses to start", kv: KVShared,
		},
		{
			name: "other openai-compatible",
			bodies: map[string]string{
				"/v1/models": `{"object":"list","data":[{"id":"m","object":"model","max_model_len":4096}]}`,
			},
			server: "openai-compatible", ok: true, noteHas: "check the pool size by hand", kv: KVCannotSee, verdict: RemoteOK,
		},
		{
			name: "llama.cpp server",
			bodies: map[string]string{
				"/v1/models": `{"object":"list","data":[{"id":"model.gguf","object":"model"}]}`,
				"/props":     `{"default_generation_settings":{"n_ctx":4096,"params":{}},"total_slots":4,"model_path":"model.gguf"}`,
			},
			// llama-server's default: 4 slots over ONE unified buffer.
			server: "llama.cpp", ok: true, noteHas: "share one KV buffer", kv: KVShared,
		},
		{
			// The shape llama-server (de3ff81) really serves, with /props
			// turned off: the per-slot context is in /v1/models meta.
			name: "llama.cpp server, /props off",
			bodies: map[string]string{
				"/v1/models": `{"object":"list","data":[{"id":"/m/stories260K.gguf","object":"model","owned_by":"llamacpp","meta":{"vocab_type":1,"n_vocab":512,"n_ctx":2048,"n_ctx_train":2048}}]}`,
			},
			server: "llama.cpp", ok: true, kv: KVCannotSee, verdict: RemoteOK,
		},
		{
			name: "llama.cpp server, -np 1",
			bodies: map[string]string{
				"/v1/models": `{"object":"list","data":[{"id":"m","object":"model","owned_by":"llamacpp","meta":{"n_ctx":2048}}]}`,
				"/props":     `{"default_generation_settings":{"n_ctx":2048},"total_slots":1}`,
			},
			server: "llama.cpp", ok: true, kv: KVPerSlot,
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
			server: "unknown", ok: true, noteHas: "exposes neither", kv: KVCannotSee, verdict: RemoteInconclusive,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			url := fakeEndpoints(t, c.bodies)
			r, err := Remote(context.Background(), url, nil)
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
			if c.kv != "" && r.KVBuffer != c.kv {
				t.Errorf("KV buffer = %q, want %q", r.KVBuffer, c.kv)
			}
			if c.verdict != "" && r.Verdict() != c.verdict {
				t.Errorf("verdict = %q, want %q", r.Verdict(), c.verdict)
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

// The report says what sluice does with its pool today: pages on demand,
// preemption and the queue, not the whole context reserved at admission
// with a 503 when it cannot be (what it did before pages grew on demand).
func TestDiscoverSluiceKVBufferSaysWhatItDoes(t *testing.T) {
	url := fakeEndpoints(t, map[string]string{
		"/v1/models":   `{"object":"list","data":[{"id":"m","object":"model","context_length":2048}]}`,
		"/sluice/info": `{"server":"sluice","model":"m","context":2048,"roles":[{"role":"decode","pool_tokens":8192,"page_size":16,"context":2048}]}`,
	})
	r, err := Remote(context.Background(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	src := r.KVBufferSource
	if r.KVBuffer != KVOnDemand || !strings.Contains(src, "page by page") || !strings.Contains(src, "preempted") ||
		strings.Contains(src, "whole context") || strings.Contains(src, "kv_capacity_exhausted") {
		t.Errorf("KV buffer %q (%s)", r.KVBuffer, src)
	}
}

// The n_ctx llama-server publishes must be the context discovered, from
// /props or from /v1/models meta.
func TestDiscoverLlamaContext(t *testing.T) {
	for _, bodies := range []map[string]string{
		{"/v1/models": `{"data":[{"id":"m","owned_by":"llamacpp","meta":{"n_ctx":2048}}]}`, "/props": `{"default_generation_settings":{"n_ctx":2048},"total_slots":4}`},
		{"/v1/models": `{"data":[{"id":"m","owned_by":"llamacpp","meta":{"n_ctx":2048}}]}`},
	} {
		url := fakeEndpoints(t, bodies)
		d, err := (&Prober{}).Discover(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		if d.Server != ServerLlama || !d.Context.Known || d.Context.Value != 2048 {
			t.Errorf("%v: server %q context %+v, want llama.cpp 2048", bodies, d.Server, d.Context)
		}
	}
}

// A server that refuses every request without a key is an authentication
// error naming the fix, never "server: unknown ... OK".
func TestRemoteAuthRefusal(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer good" {
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":{"message":"Invalid API Key","type":"authentication_error","code":401}}`))
			return
		}
		w.Write([]byte(`{"data":[{"id":"m","max_model_len":4096}]}`))
	}))
	defer srv.Close()
	for _, c := range []struct{ key, want string }{{"", "HTTP 401: the server wants an API key: pass --api-key"}, {"bad", "HTTP 401: the server refused the API key"}} {
		_, err := Remote(context.Background(), srv.URL, &Prober{APIKey: c.key})
		if err == nil || !IsAuth(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("key %q: err = %v, want an auth error containing %q", c.key, err, c.want)
		}
	}
	if r, err := Remote(context.Background(), srv.URL, &Prober{APIKey: "good"}); err != nil || r.Verdict() != RemoteOK {
		t.Errorf("good key: %v %+v", err, r)
	}
}

// The /v1 base URL that OpenAI clients are given finds the same server.
func TestNormalizeEndpoint(t *testing.T) {
	for in, want := range map[string]string{
		"http://h:1":       "http://h:1",
		"http://h:1/":      "http://h:1",
		"http://h:1/v1":    "http://h:1",
		"http://h:1/v1/":   "http://h:1",
		" https://h/x/v1 ": "https://h/x",
	} {
		if got, err := NormalizeEndpoint(in); err != nil || got != want {
			t.Errorf("NormalizeEndpoint(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"h:1", "ftp://h", "http://", "http://h/?a=1"} {
		if _, err := NormalizeEndpoint(bad); err == nil {
			t.Errorf("NormalizeEndpoint(%q) accepted", bad)
		}
	}
	url := fakeEndpoints(t, map[string]string{"/v1/models": `{"data":[{"id":"m","owned_by":"llamacpp","meta":{"n_ctx":512}}]}`, "/props": `{"default_generation_settings":{"n_ctx":512},"total_slots":1}`})
	r, err := Remote(context.Background(), url+"/v1/", nil)
	if err != nil || r.Server != ServerLlama || r.Endpoint != url {
		t.Fatalf("with /v1: %v %+v", err, r)
	}
}
