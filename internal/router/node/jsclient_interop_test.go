//go:build interop

package node

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sluice/internal/gguf"
)

// openAIJS is the npm package version the JS interop test installs.
const openAIJS = "openai@7"

// TestInteropOpenAIJSClient runs the official OpenAI JS client (npm
// "openai", installed with npm into the user's cache on first use; needs
// node, npm and the npm registry) against sluice colocated and over TCP:
// json_schema and json_object outputs, tool_choice required and named,
// each streamed (the client's own stream helper assembles the chunks)
// and not, must agree and be well-formed; a multi-turn exchange with a
// tool message runs. Behind the interop build tag (make test-interop): the
// default suite installs nothing from the network.
func TestInteropOpenAIJSClient(t *testing.T) {
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed for the JS client test: %v", tool, err)
		}
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = t.TempDir()
	}
	dir := filepath.Join(cache, "sluice", "openai-js")
	mod := filepath.Join(dir, "node_modules", "openai")
	if _, err := os.Stat(mod); err != nil {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("npm", "install", "--no-audit", "--no-fund", "--prefix", dir, openAIJS)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm install %s: %v\n%s", openAIJS, err, b)
		}
	}
	script, err := filepath.Abs("../../../testdata/interop/openai-js.cjs")
	if err != nil {
		t.Fatal(err)
	}
	m, err := LoadModel("", gguf.MemoryAuto)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	pools := Pools{Context: 256, PoolTokens: 2048}
	type call struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	var results []string
	for _, lc := range []struct {
		name string
		cfg  LocalConfig
	}{{"colocated", LocalConfig{Colocated: true, Pools: pools}}, {"tcp", LocalConfig{Transport: TransportTCP, Pools: pools}}} {
		s := serve(t, m, lc.cfg, nil)
		cmd := exec.Command("node", script)
		cmd.Env = append(os.Environ(), "OPENAI_JS_MODULE="+mod, "BASE_URL="+s.ts.URL+"/v1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		start := time.Now()
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: node: %v\n%s", lc.name, err, stderr.String())
		}
		var out struct {
			Cases []struct {
				Kind, Finish, StreamFinish string
				Seed                       int
				Whole, Streamed, Chunks    string
				Calls, StreamCalls         []call
				Heads, Frags               int
			} `json:"cases"`
			MultiTurn struct {
				Content             string
				Prompt, FirstPrompt int
			} `json:"multiTurn"`
			Auto struct {
				Content string
				Calls   []call
			} `json:"auto"`
		}
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s: %v: %s", lc.name, err, b)
		}
		if len(out.Cases) != 8 {
			t.Fatalf("%s: %d cases", lc.name, len(out.Cases))
		}
		for _, c := range out.Cases {
			switch c.Kind {
			case "json_schema", "json_object":
				// json_object is unbounded: a random model need not close
				// it within max_tokens (then it ends "length").
				var v map[string]any
				bad := c.Whole != c.Streamed || c.Whole != c.Chunks || c.Finish != c.StreamFinish || !strings.HasPrefix(c.Whole, "{")
				if c.Finish == "stop" || c.Kind == "json_schema" {
					bad = bad || c.Finish != "stop" || json.Unmarshal([]byte(c.Whole), &v) != nil
				}
				if bad {
					t.Fatalf("%s %s seed %d: whole %q (%s), streamed %q (%s), chunks %q", lc.name, c.Kind, c.Seed, c.Whole, c.Finish, c.Streamed, c.StreamFinish, c.Chunks)
				}
				if c.Kind == "json_schema" {
					name, nok := v["name"].(string)
					age, aok := v["age"].(float64)
					tags, tok := v["tags"].([]any)
					if !nok || !aok || !tok || len([]rune(name)) > 8 || age != float64(int(age)) || age < 0 || age > 120 || len(tags) > 2 || len(v) != 3 {
						t.Fatalf("%s seed %d: %s does not fit the schema", lc.name, c.Seed, c.Whole)
					}
				}
				results = append(results, lc.name+" "+c.Kind+": "+c.Whole)
			default:
				if c.Finish != "tool_calls" || c.StreamFinish != "tool_calls" || len(c.Calls) != 1 || len(c.StreamCalls) != 1 {
					t.Fatalf("%s %s seed %d: finish %q/%q, %d/%d calls", lc.name, c.Kind, c.Seed, c.Finish, c.StreamFinish, len(c.Calls), len(c.StreamCalls))
				}
				w, st := c.Calls[0], c.StreamCalls[0]
				var args map[string]any
				if w.Type != "function" || w.ID == "" || st.ID == "" || w.Function.Name != st.Function.Name || w.Function.Arguments != st.Function.Arguments ||
					json.Unmarshal([]byte(w.Function.Arguments), &args) != nil || (c.Kind == "named" && w.Function.Name != "get_time") {
					t.Fatalf("%s %s seed %d: whole %+v, streamed %+v", lc.name, c.Kind, c.Seed, w, st)
				}
				if c.Heads != 1 || c.Frags < 3 {
					t.Fatalf("%s %s seed %d: %d opening chunks, %d argument fragments: not streamed token by token", lc.name, c.Kind, c.Seed, c.Heads, c.Frags)
				}
				results = append(results, lc.name+" "+c.Kind+": "+w.Function.Name+w.Function.Arguments)
			}
		}
		if out.MultiTurn.Content == "" || out.MultiTurn.Prompt <= out.MultiTurn.FirstPrompt {
			t.Fatalf("%s multi-turn: %+v", lc.name, out.MultiTurn)
		}
		if out.Auto.Content == "" || len(out.Auto.Calls) != 0 {
			t.Fatalf("%s auto: %+v", lc.name, out.Auto)
		}
		t.Logf("%s: %d cases in %v", lc.name, len(out.Cases), time.Since(start).Round(time.Millisecond))
	}
	for _, r := range results {
		t.Log(r)
	}
}
