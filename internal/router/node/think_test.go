package node

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sluice/internal/gguf"
	"sluice/internal/quant"
	"sluice/internal/synth"
	"sluice/internal/testenv"
)

// thinkingModel writes a random-weight qwen3 model whose vocabulary is
// Qwen2's with <think> and </think> appended as tokens of their own (ids
// 151936, 151937), and whose chat template is Qwen3's with the
// generation prompt opening the reasoning ("<think>\n", as thinking-only
// templates do): a thinking model without a download.
func thinkingModel(t *testing.T) (path string, close int32) {
	t.Helper()
	f, err := gguf.Open(testenv.Shared(t, "vocab/ggml-vocab-qwen2.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tmpl, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(), "testdata/templates/Qwen-Qwen3-0.6B.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	open := strings.Replace(string(tmpl), `{{- '<|im_start|>assistant\n' }}`, `{{- '<|im_start|>assistant\n<think>\n' }}`, 1)
	if open == string(tmpl) {
		t.Fatal("the Qwen3 template's generation prompt moved")
	}
	w := gguf.NewWriter()
	w.CopyFrom(f, func(string) bool { return true })
	toks, _ := f.Strings("tokenizer.ggml.tokens")
	tv, _ := f.Value("tokenizer.ggml.token_type")
	types := append(append([]int32(nil), tv.Data.([]int32)...), 4, 4) // user-defined, as Qwen3's
	w.SetStrings("tokenizer.ggml.tokens", append(append([]string(nil), toks...), "<think>", "</think>"))
	w.SetInt32s("tokenizer.ggml.token_type", types)
	w.SetString("tokenizer.chat_template", open)
	dir := t.TempDir()
	vocab := filepath.Join(dir, "vocab.gguf")
	var b bytes.Buffer
	if _, err := w.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(vocab, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	b.Reset()
	if err := synth.Write(&b, synth.Spec{Arch: "qwen3", Layers: 2, Embd: 64, Heads: 4, KVHeads: 2, HeadDim: 32, FF: 128,
		Context: 2048, Type: quant.Q8_0, RopeBase: 10000, Seed: 0x5eed, VocabFrom: vocab}); err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, "think.gguf")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, int32(len(toks) + 1)
}

// TestThinkingModelEndToEnd: a thinking model served whole (prefill draws
// the first token, decode the rest, or colocated): the reasoning goes to
// reasoning_content, and a json_schema constrains the answer only, from
// after </think> (the logit bias makes the model close its reasoning
// early and then want </think> again, which the grammar refuses). Every
// layout gives the same answer.
func TestThinkingModelEndToEnd(t *testing.T) {
	path, close := thinkingModel(t)
	m, err := LoadModel(path, gguf.MemoryAuto)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	body, _ := json.Marshal(map[string]any{
		"messages": []map[string]string{{"role": "user", "content": "Say hi"}}, "max_tokens": 24, "temperature": 0,
		"logit_bias": map[string]float64{jsonID(close): 4},
		"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "x",
			"schema": map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": "integer"}}, "required": []string{"a"}, "additionalProperties": false}}},
	})
	var first string
	for _, mode := range []LocalConfig{{Colocated: true}, {Transport: TransportTCP}} {
		mode.Pools = Pools{Context: 512, PoolTokens: 1024}
		s := serve(t, m, mode, nil)
		resp, err := http.Post(s.ts.URL+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var a struct {
			Choices []struct {
				Message struct {
					Content          *string `json:"content"`
					ReasoningContent *string `json:"reasoning_content"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
			Usage struct {
				CompletionTokensDetails struct {
					ReasoningTokens int `json:"reasoning_tokens"`
				} `json:"completion_tokens_details"`
			} `json:"usage"`
		}
		if resp.StatusCode != 200 || json.Unmarshal(raw, &a) != nil || len(a.Choices) != 1 {
			t.Fatalf("%d %s", resp.StatusCode, raw)
		}
		c := a.Choices[0]
		var v struct {
			A *int64 `json:"a"`
		}
		dec := json.NewDecoder(strings.NewReader(deref(c.Message.Content)))
		dec.DisallowUnknownFields()
		if c.Message.ReasoningContent == nil || *c.Message.ReasoningContent == "" || dec.Decode(&v) != nil || v.A == nil ||
			c.FinishReason != "stop" || a.Usage.CompletionTokensDetails.ReasoningTokens < 2 {
			t.Fatalf("colocated %v: %s", mode.Colocated, raw)
		}
		if first == "" {
			first = string(raw[strings.Index(string(raw), `"choices"`):strings.Index(string(raw), `"usage"`)])
		} else if got := string(raw[strings.Index(string(raw), `"choices"`):strings.Index(string(raw), `"usage"`)]); got != first {
			t.Fatalf("disaggregated answer %s, colocated %s", got, first)
		}
	}
}

func jsonID(id int32) string { b, _ := json.Marshal(id); return string(b) }

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
