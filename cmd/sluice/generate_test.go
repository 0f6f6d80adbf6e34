package main

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"os"
	"slices"
	"sluice/internal/kv"
	"strings"
	"testing"

	"sluice/internal/gguf"
	"sluice/internal/testenv"
)

// The reference files are described in ../shared/reference/README.md; the
// expected values are llama.cpp's, never this code's.
type genRefFile struct {
	Models []struct {
		File  string       `json:"file"`
		Cases []genRefCase `json:"cases"`
		Long  *genRefCase  `json:"long_case"`
	} `json:"models"`
}

type genRefCase struct {
	Prompt       string         `json:"prompt"`
	PromptIDs    []int32        `json:"prompt_token_ids"`
	GeneratedIDs []int32        `json:"generated_token_ids"`
	Text         string         `json:"generated_text"`
	Top5         [][][2]float64 `json:"top5_per_step"`
}

type genRefLogits struct {
	Cases []struct {
		Prompt string    `json:"prompt"`
		Logits []float32 `json:"first_step_logits"`
	} `json:"cases"`
	Long struct {
		Logits []float32 `json:"first_step_logits"`
	} `json:"long_case"`
}

func readRefJSON(t *testing.T, rel string, v any) {
	t.Helper()
	b, err := os.ReadFile(testenv.Shared(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
}

func openShared(t *testing.T, rel string) *loadedModel {
	t.Helper()
	lm, err := openModel(testenv.Shared(t, rel), gguf.MemoryAuto)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lm.Close() })
	return lm
}

func maxDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

// TestGenerateStories260K: for every stories260K case and the 255-token
// long case, llama.cpp's prompt ids and greedy ids exactly, and its
// first-step logits within 1e-3 — through generate, the path of the command.
func TestGenerateStories260K(t *testing.T) {
	lm := openShared(t, "models/stories260K.gguf")
	var ref genRefFile
	readRefJSON(t, "reference/reference.json", &ref)
	var lg genRefLogits
	readRefJSON(t, "reference/reference_logits_stories260K.json", &lg)
	mr := ref.Models[0]
	if mr.File != "stories260K.gguf" {
		t.Fatalf("reference model 0 is %s, want stories260K.gguf", mr.File)
	}
	type tc struct {
		c      genRefCase
		logits []float32
		opt    genOptions
	}
	var cases []tc
	for i, c := range mr.Cases {
		cases = append(cases, tc{c, lg.Cases[i].Logits, genOptions{Threads: 1}})
	}
	// The long case also runs with 2 threads, small pages and prefill in
	// chunks of 1: none of that may change a token.
	cases = append(cases, tc{*mr.Long, lg.Long.Logits, genOptions{Threads: 2, PageSize: 4, Batch: 1}})
	for _, x := range cases {
		o := x.opt
		o.KVType = kv.F32 // the references' own setting (F32 KV cache); F16 pages: internal/model's reference tests
		o.Prompt, o.MaxTokens = x.c.Prompt, len(x.c.GeneratedIDs)
		var first []float32
		o.onLogits = func(step int, l []float32) {
			if step == 0 {
				first = slices.Clone(l)
			}
		}
		res, err := generate(lm, o)
		if err != nil {
			t.Fatalf("%q: %v", x.c.Prompt, err)
		}
		if !slices.Equal(res.PromptIDs, x.c.PromptIDs) {
			t.Errorf("%q: prompt ids %v, llama.cpp %v", x.c.Prompt, res.PromptIDs, x.c.PromptIDs)
		}
		if !slices.Equal(res.TokenIDs, x.c.GeneratedIDs) {
			t.Errorf("%q: generated ids differ from llama.cpp's (%d vs %d tokens)\n got %v\nwant %v", x.c.Prompt, len(res.TokenIDs), len(x.c.GeneratedIDs), res.TokenIDs, x.c.GeneratedIDs)
		}
		if res.Text != x.c.Text {
			t.Errorf("%q: text %q, llama.cpp %q", x.c.Prompt, res.Text, x.c.Text)
		}
		if d := maxDiff(first, x.logits); d > 1e-3 {
			t.Errorf("%q: first-step logits differ from llama.cpp's by up to %g (want <= 1e-3)", x.c.Prompt, d)
		}
	}
}

// TestGenerateTinyQwen2 checks the qwen2/BPE path: prompt ids exactly, and
// with llama.cpp's generated tokens fed back (teacher forcing; the model's
// top-2 gap can be 0.02, so free-running ids are not a fair test), the
// top-5 ids agree at every step and their logits are within 2e-2, and the
// full first-step logits are within 2e-2.
func TestGenerateTinyQwen2(t *testing.T) {
	lm := openShared(t, "models/tiny-qwen2-random-gpt2vocab.gguf")
	var ref genRefFile
	readRefJSON(t, "reference/reference.json", &ref)
	var lg genRefLogits
	readRefJSON(t, "reference/reference_logits_tiny-qwen2-random-gpt2vocab.json", &lg)
	mr := ref.Models[1]
	if !strings.HasPrefix(mr.File, "tiny-qwen2") {
		t.Fatalf("reference model 1 is %s", mr.File)
	}
	for i, c := range mr.Cases {
		worst := 0.0
		o := genOptions{Prompt: c.Prompt, Threads: 2, forced: c.GeneratedIDs, KVType: kv.F32} // the references' F32 KV cache
		o.onLogits = func(step int, l []float32) {
			top := topN(l, 5)
			for k, e := range c.Top5[step] {
				if top[k] != int32(e[0]) {
					t.Errorf("%q step %d: top-5 %v, llama.cpp %v", c.Prompt, step, top, c.Top5[step])
					return
				}
				worst = max(worst, math.Abs(float64(l[top[k]])-e[1]))
			}
			if step == 0 {
				if d := maxDiff(l, lg.Cases[i].Logits); d > 2e-2 {
					t.Errorf("%q: first-step logits differ by up to %g (want <= 2e-2)", c.Prompt, d)
				}
			}
		}
		res, err := generate(lm, o)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.PromptIDs, c.PromptIDs) {
			t.Errorf("%q: prompt ids %v, llama.cpp %v", c.Prompt, res.PromptIDs, c.PromptIDs)
		}
		if worst > 2e-2 {
			t.Errorf("%q: top-5 logits differ from llama.cpp's by up to %g (want <= 2e-2)", c.Prompt, worst)
		}
	}
}

// topN returns the n largest logits' ids, ties to the lower id, by n
// selection passes (a full sort of a 50k vocabulary per step is slow).
func topN(l []float32, n int) []int32 {
	var ids []int32
	for len(ids) < n {
		best := int32(-1)
		for i, v := range l {
			if slices.Contains(ids, int32(i)) {
				continue
			}
			if best < 0 || v > l[best] {
				best = int32(i)
			}
		}
		ids = append(ids, best)
	}
	return ids
}

// TestGenerateCommandJSON runs the command's run function as a user would
// and parses what it prints.
func TestGenerateCommandJSON(t *testing.T) {
	p := testenv.Shared(t, "models/stories260K.gguf")
	var out, errb bytes.Buffer
	code := runGenerate([]string{"--model", p, "--prompt", "Once upon a time", "--max-tokens", "8", "--temperature", "0", "--json"}, nil, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var got struct {
		PromptIDs []int32            `json:"prompt_token_ids"`
		TokenIDs  []int32            `json:"token_ids"`
		Text      string             `json:"text"`
		Timings   map[string]float64 `json:"timings"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out.String())
	}
	// From ../shared/reference/README.md: "Once upon a time" -> [1 403 407
	// 261 378], then 432 383 286 261 376 ... = ", there was a little ...".
	if !slices.Equal(got.PromptIDs, []int32{1, 403, 407, 261, 378}) || !slices.Equal(got.TokenIDs[:5], []int32{432, 383, 286, 261, 376}) {
		t.Fatalf("ids %v / %v", got.PromptIDs, got.TokenIDs)
	}
	if !strings.HasPrefix(got.Text, ", there was a little") {
		t.Fatalf("text %q", got.Text)
	}
	for _, k := range []string{"prefill_tokens_per_second", "decode_tokens_per_second", "prompt_ms", "decode_ms"} {
		if v, ok := got.Timings[k]; !ok || !(v > 0) {
			t.Errorf("timings.%s = %v, %v; want a positive number", k, v, ok)
		}
	}

	// Streaming mode prints the same text.
	out.Reset()
	if code := runGenerate([]string{"--model", p, "--prompt", "Once upon a time", "--max-tokens", "8"}, nil, &out, &errb); code != 0 {
		t.Fatalf("streaming exit %d: %s", code, errb.String())
	}
	if strings.TrimSuffix(out.String(), "\n") != got.Text {
		t.Fatalf("streamed %q, JSON text %q", out.String(), got.Text)
	}
}

func TestGenerateCommandErrors(t *testing.T) {
	var out, errb bytes.Buffer
	if code := runGenerate([]string{"--model", "/nonexistent.gguf", "--prompt", "x"}, nil, &out, &errb); code != 1 || !strings.Contains(errb.String(), "nonexistent") {
		t.Errorf("missing model: exit %d, stderr %q", code, errb.String())
	}
	errb.Reset()
	if code := runGenerate([]string{"--bogus"}, nil, &out, &errb); code != 2 {
		t.Errorf("unknown flag: exit %d", code)
	}
	errb.Reset()
	out.Reset()
	if code := runGenerate([]string{"--help"}, nil, &out, &errb); code != 0 || !strings.Contains(out.String(), "--json") || errb.Len() != 0 {
		t.Errorf("--help: exit %d, usage on stdout %q, stderr %q", code, out.String(), errb.String())
	}
	p := testenv.Shared(t, "models/stories260K.gguf")
	errb.Reset()
	if code := runGenerate([]string{"--model", p, "--prompt", "x", "--temperature", "-1"}, nil, &out, &errb); code != 1 || !strings.Contains(errb.String(), "invalid_temperature") {
		t.Errorf("negative temperature: exit %d, stderr %q", code, errb.String())
	}
}

// TestGenerateSampledReplays: a seeded non-greedy run replays exactly and
// another seed differs.
func TestGenerateSampledReplays(t *testing.T) {
	lm := openShared(t, "models/stories260K.gguf")
	run := func(seed uint64) []int32 {
		o := genOptions{Prompt: "Once upon a time", MaxTokens: 40, Threads: 2}
		o.Sampling.Temperature, o.Sampling.TopP, o.Sampling.Seed = 1.2, 0.95, seed
		res, err := generate(lm, o)
		if err != nil {
			t.Fatal(err)
		}
		return res.TokenIDs
	}
	a, b, c := run(11), run(11), run(12)
	if !slices.Equal(a, b) {
		t.Fatal("the same seed gave different tokens")
	}
	if slices.Equal(a, c) {
		t.Fatal("different seeds gave the same 40 tokens")
	}
}

// TestGenerateDefaultModel: with no --model the built-in synthetic model
// runs; greedy output does not depend on the prefill chunk size, page size
// or thread count (batch invariance through the whole command path).
func TestGenerateDefaultModel(t *testing.T) {
	lm, err := openModel("", gguf.MemoryAuto)
	if err != nil {
		t.Fatal(err)
	}
	defer lm.Close()
	base, err := generate(lm, genOptions{Prompt: "The quick brown fox jumps over the lazy dog", MaxTokens: 24, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(base.TokenIDs) == 0 || len(base.PromptIDs) < 5 {
		t.Fatalf("prompt %v generated %v", base.PromptIDs, base.TokenIDs)
	}
	for _, o := range []genOptions{{Threads: 2}, {Batch: 1, PageSize: 3}, {Batch: 4, PageSize: 1, Threads: 2}} {
		o.Prompt, o.MaxTokens = "The quick brown fox jumps over the lazy dog", 24
		res, err := generate(lm, o)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.TokenIDs, base.TokenIDs) {
			t.Errorf("threads %d batch %d page %d: %v, want %v", o.Threads, o.Batch, o.PageSize, res.TokenIDs, base.TokenIDs)
		}
	}
}

// TestGenerateStopString: with --stop the text ends before the stop string
// (stories260K greedy from "Once upon a time" is ", there was a little girl
// named Lily. ..." per llama.cpp's reference).
func TestGenerateStopString(t *testing.T) {
	lm := openShared(t, "models/stories260K.gguf")
	var streamed bytes.Buffer
	res, err := generate(lm, genOptions{Prompt: "Once upon a time", MaxTokens: 32, Stop: []string{"girl"}, Stream: &streamed})
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != ", there was a little " || res.Finish != "stop" || streamed.String() != res.Text {
		t.Fatalf("text %q finish %q streamed %q", res.Text, res.Finish, streamed.String())
	}
	// A stop string that never completes holds nothing back at the end
	// (its prefix "On" does occur in the text).
	res, err = generate(lm, genOptions{Prompt: "Once upon a time", MaxTokens: 32, Stop: []string{"Onze"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != ", there was a little girl named Lily. She loved to play outside in the park. One day, she saw" || res.Finish != "length" {
		t.Fatalf("no-match run: text %q finish %q", res.Text, res.Finish)
	}
}

func TestGenerateRequestErrors(t *testing.T) {
	lm := openShared(t, "models/stories260K.gguf")
	cases := []struct {
		o    genOptions
		code string
	}{
		{genOptions{Prompt: "x", MaxTokens: -1}, "invalid_max_tokens"},
		{genOptions{Prompt: "x", MaxTokens: 5000}, "context_length_exceeded"},
	}
	for _, c := range cases {
		_, err := generate(lm, c.o)
		ge, ok := err.(*genError)
		if !ok || ge.Code != c.code {
			t.Errorf("%+v: err %v, want code %s", c.o, err, c.code)
		}
	}
}

// Without --prompt, generate reads the prompt from stdin when stdin is
// not a terminal (as llama.cpp's tools read a prompt file; one trailing
// newline is the shell's, not the prompt's), and otherwise refuses with a
// hint instead of running on an empty prompt.
func TestGeneratePromptFromStdin(t *testing.T) {
	p := testenv.Shared(t, "models/stories260K.gguf")
	var out, errb bytes.Buffer
	if code := runGenerate([]string{"--model", p, "--max-tokens", "4"}, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "--prompt") || !strings.Contains(errb.String(), "stdin") || out.Len() != 0 {
		t.Errorf("no prompt, stdin a terminal: exit %d, stdout %q, stderr %q; want 2 and a hint naming --prompt and stdin", code, out.String(), errb.String())
	}
	// /dev/null is a character device, as a terminal is: not read (a
	// terminal would block the command waiting for input).
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	errb.Reset()
	if code := runGenerate([]string{"--model", p, "--max-tokens", "4"}, devNull, &out, &errb); code != 2 || !strings.Contains(errb.String(), "--prompt") || strings.Contains(errb.String(), "stdin held") {
		t.Errorf("no prompt, stdin /dev/null: exit %d, stderr %q; want 2 and the hint", code, errb.String())
	}
	ids := func(stdin io.Reader, args ...string) []int32 {
		t.Helper()
		out.Reset()
		errb.Reset()
		if code := runGenerate(append([]string{"--model", p, "--max-tokens", "4", "--temperature", "0", "--json"}, args...), stdin, &out, &errb); code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		var got struct {
			PromptIDs []int32 `json:"prompt_token_ids"`
		}
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		return got.PromptIDs
	}
	want := []int32{1, 403, 407, 261, 378} // "Once upon a time"
	if got := ids(strings.NewReader("Once upon a time\n")); !slices.Equal(got, want) {
		t.Errorf("prompt from stdin: ids %v, want %v", got, want)
	}
	if got := ids(strings.NewReader("ignored"), "--prompt", "Once upon a time"); !slices.Equal(got, want) {
		t.Errorf("--prompt with stdin: ids %v, want %v (--prompt wins)", got, want)
	}
	for name, in := range map[string]io.Reader{"empty": strings.NewReader(""), "newline only": strings.NewReader("\n"),
		"too large": io.LimitReader(zeros{}, maxStdinPrompt+1)} {
		out.Reset()
		errb.Reset()
		if code := runGenerate([]string{"--model", p, "--max-tokens", "4"}, in, &out, &errb); code != 2 || !strings.Contains(errb.String(), "stdin") {
			t.Errorf("stdin %s: exit %d, stderr %q; want 2 naming stdin", name, code, errb.String())
		}
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}
