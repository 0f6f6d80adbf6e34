package node

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"sluice/internal/gguf"
)

// TestSamplingParametersEndToEnd: through HTTP, the tokenizer and the
// engine over TCP, a prompt list with n=2, logprobs and every penalty gives
// exactly what the colocated stack gives (the oracle), in a shape the
// official client parses; json_schema and json_object response formats
// give the same valid JSON both ways, and a hostile schema is refused.
func TestSamplingParametersEndToEnd(t *testing.T) {
	m, err := LoadModel("", gguf.MemoryAuto)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	pools := Pools{Context: 128, PoolTokens: 1024}
	col := serve(t, m, LocalConfig{Colocated: true, Pools: pools}, nil)
	tcp := serve(t, m, LocalConfig{Transport: TransportTCP, Pools: pools}, nil)
	ctx := context.Background()
	params := openai.CompletionNewParams{
		Prompt:    openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: []string{"hello there", "once upon"}},
		N:         openai.Int(2),
		MaxTokens: openai.Int(10), Temperature: openai.Float(0.8), Seed: openai.Int(5), TopP: openai.Float(0.9),
		Logprobs: openai.Int(3), PresencePenalty: openai.Float(0.5), FrequencyPenalty: openai.Float(0.5),
		LogitBias: map[string]int64{"5": -100, "9": 3},
	}
	extra := []option.RequestOption{option.WithJSONSet("repetition_penalty", 1.2), option.WithJSONSet("min_p", 0.05),
		option.WithJSONSet("top_k", 50), option.WithJSONSet("ignore_eos", true)}
	want, err := col.client.Completions.New(ctx, params, extra...)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tcp.client.Completions.New(ctx, params, extra...)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Choices) != 4 {
		t.Fatalf("%d choices, want 4", len(got.Choices))
	}
	for i := range got.Choices {
		g, w := got.Choices[i], want.Choices[i]
		if g.Index != int64(i) || g.Text != w.Text || g.FinishReason != "length" ||
			!reflect.DeepEqual(g.Logprobs.TokenLogprobs, w.Logprobs.TokenLogprobs) || !reflect.DeepEqual(g.Logprobs.Tokens, w.Logprobs.Tokens) {
			t.Errorf("choice %d over TCP: %q %v, colocated %q %v", i, g.Text, g.Logprobs.TokenLogprobs, w.Text, w.Logprobs.TokenLogprobs)
		}
		if len(g.Logprobs.TokenLogprobs) != 10 || len(g.Logprobs.TopLogprobs[0]) < 3 {
			t.Errorf("choice %d logprobs %+v", i, g.Logprobs)
		}
	}
	if got.Choices[0].Text == got.Choices[1].Text && got.Choices[2].Text == got.Choices[3].Text {
		t.Error("the two samples of each prompt are identical: seed+j was not used")
	}
	if got.Usage.PromptTokens != want.Usage.PromptTokens || got.Usage.CompletionTokens != 40 || want.Usage.CompletionTokens != 40 {
		t.Errorf("usage %+v, colocated %+v", got.Usage, want.Usage)
	}

	cr, err := tcp.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		Logprobs: openai.Bool(true), TopLogprobs: openai.Int(2), MaxCompletionTokens: openai.Int(4), Temperature: openai.Float(0)})
	if err != nil {
		t.Fatal(err)
	}
	if lp := cr.Choices[0].Logprobs.Content; len(lp) == 0 || len(lp[0].TopLogprobs) != 2 || lp[0].TopLogprobs[0].Logprob < lp[0].TopLogprobs[1].Logprob || lp[0].Logprob != lp[0].TopLogprobs[0].Logprob {
		// Greedy: the sampled token is the most likely one.
		t.Fatalf("chat logprobs %+v", cr.Choices[0].Logprobs)
	}
	// Structured outputs through the official client: a json_schema and a
	// json_object request at temperature 1, streamed and not, colocated and
	// over TCP, give the same valid JSON.
	schema := map[string]any{"type": "object", "additionalProperties": false, "required": []string{"name", "n"},
		"properties": map[string]any{"name": map[string]any{"type": "string", "maxLength": 8}, "n": map[string]any{"type": "integer", "minimum": 0, "maximum": 9}}}
	formats := []openai.ChatCompletionNewParamsResponseFormatUnion{
		{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "pair", Schema: schema, Strict: openai.Bool(true)}}},
		{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}},
	}
	for fi, rf := range formats {
		for seed := range int64(3) {
			p := openai.ChatCompletionNewParams{Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
				Temperature: openai.Float(1), Seed: openai.Int(seed), MaxCompletionTokens: openai.Int(100), ResponseFormat: rf}
			var texts []string
			ended := true
			for _, s := range []*served{col, tcp} {
				r, err := s.client.Chat.Completions.New(ctx, p)
				if err != nil {
					var ae *openai.Error
					if errors.As(err, &ae) {
						t.Fatalf("%s: %s", ae.Code, ae.RawJSON())
					}
					t.Fatal(err)
				}
				// Any JSON object may be a free string that a random
				// model never closes: it may end at max_tokens.
				ended = r.Choices[0].FinishReason == "stop"
				if !ended && (fi == 0 || r.Choices[0].FinishReason != "length") {
					t.Fatalf("format %d seed %d: finish %q after %q", fi, seed, r.Choices[0].FinishReason, r.Choices[0].Message.Content)
				}
				texts = append(texts, r.Choices[0].Message.Content)
				st := s.client.Chat.Completions.NewStreaming(ctx, p)
				var acc openai.ChatCompletionAccumulator
				for st.Next() {
					acc.AddChunk(st.Current())
				}
				if err := st.Err(); err != nil {
					t.Fatal(err)
				}
				texts = append(texts, acc.Choices[0].Message.Content)
			}
			for _, x := range texts[1:] {
				if x != texts[0] {
					t.Fatalf("format %d seed %d: outputs differ: %q", fi, seed, texts)
				}
			}
			if !ended {
				continue
			}
			var v struct {
				Name *string `json:"name"`
				N    *int    `json:"n"`
			}
			dec := json.NewDecoder(strings.NewReader(texts[0]))
			if fi == 0 {
				dec.DisallowUnknownFields()
			}
			if err := dec.Decode(&v); err != nil || (fi == 0 && (v.Name == nil || v.N == nil || len([]rune(*v.Name)) > 8 || *v.N < 0 || *v.N > 9)) {
				t.Fatalf("format %d seed %d: %q does not fit the schema: %v", fi, seed, texts[0], err)
			}
			t.Logf("format %d seed %d: %s", fi, seed, texts[0])
		}
	}
	_, err = tcp.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "deep", Schema: map[string]any{"type": "string", "pattern": "^((a{1000}){1000}){1000}$"}}}}})
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 400 || ae.Code != "pattern_too_complex" || ae.Param != "response_format.json_schema.schema" {
		t.Fatalf("hostile pattern: %v", err)
	}
}
