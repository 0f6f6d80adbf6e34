// Package llamaref is what the reference writers (scripts/kvq8ref,
// scripts/moeref) share: write a seeded synthetic file, run llama.cpp's
// llama-server on it on loopback, and record its prompt ids, greedy ids and
// top-2 log-probabilities per step. Each command chooses the files, prompts
// and KV settings; the JSON shape here is what the reference tests read.
package llamaref

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"time"

	"sluice/internal/synth"
)

// Logprob is one candidate of a step: token id and log-probability.
type Logprob struct {
	ID      int32   `json:"id"`
	Logprob float64 `json:"logprob"`
}

// Step is one generated token with llama.cpp's top two candidates.
type Step struct {
	ID   int32      `json:"id"`
	Top2 [2]Logprob `json:"top2"`
}

// Case is one prompt: its ids, the greedy ids and every step.
type Case struct {
	Prompt    string  `json:"prompt"`
	PromptIDs []int32 `json:"prompt_token_ids"`
	Generated []int32 `json:"generated_token_ids"`
	Steps     []Step  `json:"steps"`
}

// File is a synthetic file written into dir: its path, SHA-256 and size
// (the tests regenerate it from its seed and compare the hash).
type File struct {
	Path   string
	SHA256 string
	Bytes  int
}

// WriteFile writes r's file into dir.
func WriteFile(dir string, r synth.MoEReference) File {
	var b bytes.Buffer
	Check(synth.Write(&b, r.Spec))
	path := filepath.Join(dir, r.Name+".gguf")
	Check(os.WriteFile(path, b.Bytes(), 0o644))
	sum := sha256.Sum256(b.Bytes())
	return File{Path: path, SHA256: hex.EncodeToString(sum[:]), Bytes: b.Len()}
}

// listening is llama-server's line naming the address it bound.
var listening = regexp.MustCompile(`listening on (http://[0-9.]+:[0-9]+)`)

// Run starts llama-server (1 thread, one slot, 1024 context, plus args) on
// model at the loopback port (0: one llama-server picks) and returns one
// Case per prompt, nPredict greedy tokens each, without the prompt cache.
// It talks to the address the server it started logs: a server already
// on a fixed port (a stale run, another model) is never asked, as the
// child then fails to bind and exits.
func Run(server, model string, port int, prompts []string, nPredict int, args ...string) []Case {
	cmd := exec.Command(server, append([]string{"-m", model, "--host", "127.0.0.1", "--port", fmt.Sprint(port),
		"-t", "1", "-tb", "1", "-c", "1024", "-np", "1", "--no-warmup"}, args...)...)
	cmd.Stdout = io.Discard
	stderr, err := cmd.StderrPipe()
	Check(err)
	Check(cmd.Start())
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	addr, exited := make(chan string, 1), make(chan struct{})
	go func() { // drains stderr to the end, so the child never blocks on it
		defer close(exited)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	var base string
	select {
	case base = <-addr:
	case <-exited:
		panic("llama-server exited before listening (is the port taken?)")
	case <-time.After(2 * time.Minute):
		panic("llama-server did not listen within 2 minutes")
	}
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
	var cases []Case
	for _, p := range prompts {
		var tok struct {
			Tokens []int32 `json:"tokens"`
		}
		post(base+"/tokenize", map[string]any{"content": p, "add_special": true}, &tok)
		var comp struct {
			Tokens []int32 `json:"tokens"`
			Probs  []struct {
				ID  int32     `json:"id"`
				Top []Logprob `json:"top_logprobs"`
			} `json:"completion_probabilities"`
		}
		post(base+"/completion", map[string]any{"prompt": tok.Tokens, "n_predict": nPredict, "temperature": 0,
			"n_probs": 2, "cache_prompt": false, "return_tokens": true, "ignore_eos": true}, &comp)
		c := Case{Prompt: p, PromptIDs: tok.Tokens, Generated: comp.Tokens}
		for _, s := range comp.Probs {
			if len(s.Top) != 2 {
				panic("expected 2 top log-probabilities")
			}
			c.Steps = append(c.Steps, Step{ID: s.ID, Top2: [2]Logprob{s.Top[0], s.Top[1]}})
		}
		cases = append(cases, c)
	}
	return cases
}

// WriteJSON writes doc to out as one line of JSON.
func WriteJSON(out string, doc any) {
	j, err := json.Marshal(doc)
	Check(err)
	Check(os.WriteFile(out, append(j, '\n'), 0o644))
}

func post(url string, body, out any) {
	j, _ := json.Marshal(body)
	r, err := http.Post(url, "application/json", bytes.NewReader(j))
	Check(err)
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	if r.StatusCode != 200 {
		panic(fmt.Sprintf("%s: %d %s", url, r.StatusCode, b))
	}
	Check(json.Unmarshal(b, out))
}

// Check panics on err: these are one-shot developer commands.
func Check(err error) {
	if err != nil {
		panic(err)
	}
}
