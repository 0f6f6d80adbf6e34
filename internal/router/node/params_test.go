package node

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"sluice/internal/gguf"
)

// TestSamplingParametersEndToEnd: through HTTP, the tokenizer and the
// engine over TCP, a prompt list with n=2, logprobs and every penalty gives
// exactly what the colocated stack gives (the oracle), in a shape the
// official client parses; a json_object response format is refused.
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
	_, err = tcp.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Messages:       []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &openai.ResponseFormatJSONObjectParam{}}})
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 400 || ae.Code != "unsupported_parameter" || ae.Param != "response_format" {
		t.Fatalf("json_object: %v", err)
	}
}
