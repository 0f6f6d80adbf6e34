// Command kvq8ref writes testdata/reference/kvq8.json: llama.cpp's prompt
// ids, greedy ids and top-2 log-probabilities per step for the synthetic
// files of synth.KVQ8References (written first; the test regenerates them
// and checks their SHA-256), once with a q8_0 KV cache (-ctk q8_0 -ctv
// q8_0) and once with f16, both with flash attention on (llama.cpp needs
// it for a quantized V cache), so the test can compare sluice's Q8_0
// pages with llama.cpp's and each engine's q8_0 with its own f16.
//
//	go run ./scripts/kvq8ref -server "$(../shared/tools/llama.cpp/select llama-server)"
//
// Settings: llama-server on loopback, 1 thread, one slot, no prompt
// cache, temperature 0 (greedy), n_probs 2, 32 tokens after a prompt of
// about 600 tokens (the cache's rounding matters with depth).
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"sluice/internal/synth"
)

// Prompts: a short one, and a long one that puts ~600 positions in the
// cache before the first generated token.
var prompts = []string{
	"Once upon a time",
	strings.Repeat("In the beginning the Universe was created. This has made a lot of people very angry and been widely regarded as a bad move. "+
		"Many were increasingly of the opinion that they'd all made a big mistake in coming down from the trees in the first place. ", 6),
}

const nPredict = 32

type step struct {
	ID   int32      `json:"id"`
	Top2 [2]logprob `json:"top2"`
}

type logprob struct {
	ID      int32   `json:"id"`
	Logprob float64 `json:"logprob"`
}

type refCase struct {
	Prompt    string  `json:"prompt"`
	PromptIDs []int32 `json:"prompt_token_ids"`
	Generated []int32 `json:"generated_token_ids"`
	Steps     []step  `json:"steps"`
}

type refModel struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256"`
	Bytes  int    `json:"bytes"`
	// Cases by llama.cpp KV cache type: "q8_0" and "f16".
	Cases map[string][]refCase `json:"cases"`
}

func main() {
	server := flag.String("server", "", "llama-server binary (../shared/tools/llama.cpp/select llama-server)")
	out := flag.String("out", "testdata/reference/kvq8.json", "output JSON")
	port := flag.Int("port", 18398, "loopback port for llama-server")
	flag.Parse()
	if *server == "" {
		fmt.Fprintln(os.Stderr, "kvq8ref: -server is required")
		os.Exit(2)
	}
	dir, err := os.MkdirTemp("", "kvq8ref")
	check(err)
	defer os.RemoveAll(dir)
	var models []refModel
	for _, r := range synth.KVQ8References() {
		var b bytes.Buffer
		check(synth.Write(&b, r.Spec))
		path := filepath.Join(dir, r.Name+".gguf")
		check(os.WriteFile(path, b.Bytes(), 0o644))
		sum := sha256.Sum256(b.Bytes())
		m := refModel{Name: r.Name, SHA256: hex.EncodeToString(sum[:]), Bytes: b.Len(), Cases: map[string][]refCase{}}
		for _, typ := range []string{"q8_0", "f16"} {
			m.Cases[typ] = run(*server, path, *port, typ)
		}
		models = append(models, m)
		fmt.Fprintf(os.Stderr, "%s: done\n", r.Name)
	}
	doc := map[string]any{
		"producer": "scripts/kvq8ref: llama.cpp llama-server (../shared/tools/llama.cpp), 1 thread, -fa on, -ctk/-ctv q8_0 and f16, greedy, n_probs 2",
		"models":   models,
	}
	j, err := json.Marshal(doc)
	check(err)
	check(os.WriteFile(*out, append(j, '\n'), 0o644))
}

func run(server, model string, port int, kvType string) []refCase {
	cmd := exec.Command(server, "-m", model, "--host", "127.0.0.1", "--port", fmt.Sprint(port),
		"-t", "1", "-tb", "1", "-c", "1024", "-np", "1", "--no-warmup", "-ctk", kvType, "-ctv", kvType, "-fa", "on")
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	check(cmd.Start())
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	for i := 0; ; i++ {
		if r, err := http.Get(base + "/health"); err == nil && r.StatusCode == 200 {
			r.Body.Close()
			break
		}
		if i > 600 {
			panic("llama-server did not come up")
		}
		time.Sleep(100 * time.Millisecond)
	}
	var cases []refCase
	for _, p := range prompts {
		var tok struct {
			Tokens []int32 `json:"tokens"`
		}
		post(base+"/tokenize", map[string]any{"content": p, "add_special": true}, &tok)
		var comp struct {
			Tokens []int32 `json:"tokens"`
			Probs  []struct {
				ID  int32     `json:"id"`
				Top []logprob `json:"top_logprobs"`
			} `json:"completion_probabilities"`
		}
		post(base+"/completion", map[string]any{"prompt": tok.Tokens, "n_predict": nPredict, "temperature": 0,
			"n_probs": 2, "cache_prompt": false, "return_tokens": true, "ignore_eos": true}, &comp)
		c := refCase{Prompt: p, PromptIDs: tok.Tokens, Generated: comp.Tokens}
		for _, s := range comp.Probs {
			if len(s.Top) != 2 {
				panic("expected 2 top log-probabilities")
			}
			c.Steps = append(c.Steps, step{ID: s.ID, Top2: [2]logprob{s.Top[0], s.Top[1]}})
		}
		cases = append(cases, c)
	}
	return cases
}

func post(url string, body, out any) {
	j, _ := json.Marshal(body)
	r, err := http.Post(url, "application/json", bytes.NewReader(j))
	check(err)
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	if r.StatusCode != 200 {
		panic(fmt.Sprintf("%s: %d %s", url, r.StatusCode, b))
	}
	check(json.Unmarshal(b, out))
}

func check(err error) {
	if err != nil {
		panic(err)
	}
}
