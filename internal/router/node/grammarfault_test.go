package node

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"sluice/internal/gguf"
)

// A schema that compiles but that the grammar gives up on while
// generating (more anyOf parses alive at once than it follows) reaches
// the client as a 400 with the stable code grammar_ambiguous and a
// sentence saying what to change, colocated and over TCP, streamed or
// not; never a 500 or a handoff failure.
func TestGrammarFaultReachesClientAs400(t *testing.T) {
	m, err := LoadModel("", gguf.MemoryAuto)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	pools := Pools{Context: 128, PoolTokens: 1024}
	// Two anyOf of 600 const arrays: more parses than the grammar
	// follows (grammar.MaxStacks) after the first "[".
	var halves [2][]any
	for i := range 1200 {
		halves[i/600] = append(halves[i/600], map[string]any{"const": []any{i}})
	}
	branches := []any{map[string]any{"anyOf": halves[0]}, map[string]any{"anyOf": halves[1]}}
	params := openai.ChatCompletionNewParams{
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		MaxTokens: openai.Int(20), Temperature: openai.Float(1), Seed: openai.Int(1),
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "amb", Schema: map[string]any{"anyOf": branches}}}},
	}
	// The same branches under a property: the first tokens are sent
	// before the grammar gives up (a streamed error after 200 OK).
	nested := params
	nested.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
		JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "amb", Schema: map[string]any{"type": "object",
			"properties": map[string]any{"x": map[string]any{"anyOf": branches}}, "required": []string{"x"}}}}}
	for _, lc := range []struct {
		name string
		cfg  LocalConfig
	}{{"colocated", LocalConfig{Colocated: true, Pools: pools}}, {"tcp", LocalConfig{Transport: TransportTCP, Pools: pools}}} {
		s := serve(t, m, lc.cfg, nil)
		ctx := context.Background()
		_, err := s.client.Chat.Completions.New(ctx, params)
		var ae *openai.Error
		if !errors.As(err, &ae) || ae.StatusCode != 400 || ae.Code != "grammar_ambiguous" || !strings.Contains(ae.Message, "anyOf") {
			t.Fatalf("%s: %v, want a 400 grammar_ambiguous naming anyOf", lc.name, err)
		}
		st := s.client.Chat.Completions.NewStreaming(ctx, params)
		for st.Next() {
		}
		err = st.Err()
		st.Close()
		ae = nil
		if !errors.As(err, &ae) || ae.StatusCode != 400 || ae.Code != "grammar_ambiguous" {
			var raw string
			if ae != nil {
				raw = ae.RawJSON()
			}
			t.Fatalf("%s streamed: %v (%s), want a 400 grammar_ambiguous", lc.name, err, raw)
		}
		if _, err := s.client.Chat.Completions.New(ctx, nested); !errors.As(err, &ae) || ae.StatusCode != 400 || ae.Code != "grammar_ambiguous" {
			t.Fatalf("%s nested: %v, want a 400 grammar_ambiguous", lc.name, err)
		}
		st = s.client.Chat.Completions.NewStreaming(ctx, nested)
		var text strings.Builder
		for st.Next() {
			if c := st.Current(); len(c.Choices) > 0 {
				text.WriteString(c.Choices[0].Delta.Content)
			}
		}
		err = st.Err()
		st.Close()
		if err == nil || !strings.Contains(err.Error(), "grammar_ambiguous") || !strings.Contains(text.String(), `"x"`) {
			t.Fatalf("%s nested streamed: got %q then %v, want the first tokens then grammar_ambiguous", lc.name, text.String(), err)
		}
		t.Logf("%s nested streamed: %q then %v", lc.name, text.String(), err)
	}
}
