package node

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"sluice/internal/gguf"
)

// TestToolCallsOfficialClient: the official OpenAI Go client, streaming and
// not, colocated and over TCP, gets well-formed tool_calls for tool_choice
// "required" and a named function (grammar-constrained: the arguments
// always validate), the same call both ways, streamed token by token in
// OpenAI's chunk shape (its accumulator assembles them); "auto" answers (this random
// model never writes a call of its own) parse as content; and a
// multi-turn exchange with the assistant's tool call and the tool's answer
// in the history renders and runs.
func TestToolCallsOfficialClient(t *testing.T) {
	m, err := LoadModel("", gguf.MemoryAuto)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	pools := Pools{Context: 256, PoolTokens: 2048}
	col := serve(t, m, LocalConfig{Colocated: true, Pools: pools}, nil)
	tcp := serve(t, m, LocalConfig{Transport: TransportTCP, Pools: pools}, nil)
	ctx := context.Background()
	tools := []openai.ChatCompletionToolUnionParam{
		openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "get_weather", Description: openai.String("Weather in a city"),
			Parameters: shared.FunctionParameters{"type": "object", "additionalProperties": false, "required": []string{"city", "unit"},
				"properties": map[string]any{"city": map[string]any{"type": "string", "maxLength": 10}, "unit": map[string]any{"enum": []string{"c", "f"}}}}}),
		openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "get_time",
			Parameters: shared.FunctionParameters{"type": "object", "additionalProperties": false, "required": []string{"tz"},
				"properties": map[string]any{"tz": map[string]any{"enum": []string{"UTC", "CET", "PST"}}}}}),
	}
	validArgs := func(name, args string) bool {
		var v map[string]any
		if json.Unmarshal([]byte(args), &v) != nil {
			return false
		}
		switch name {
		case "get_weather":
			c, ok := v["city"].(string)
			u := v["unit"]
			return ok && len([]rune(c)) <= 10 && (u == "c" || u == "f") && len(v) == 2
		case "get_time":
			tz := v["tz"]
			return (tz == "UTC" || tz == "CET" || tz == "PST") && len(v) == 1
		}
		return false
	}
	choices := map[string]openai.ChatCompletionToolChoiceOptionUnionParam{
		"required": {OfAuto: openai.String("required")},
		"named":    {OfFunctionToolChoice: &openai.ChatCompletionNamedToolChoiceParam{Function: openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_time"}}},
	}
	for name, choice := range choices {
		for seed := range int64(3) {
			p := openai.ChatCompletionNewParams{Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the weather in Paris?")},
				Tools: tools, ToolChoice: choice, Temperature: openai.Float(1), Seed: openai.Int(seed), MaxCompletionTokens: openai.Int(120)}
			var calls []string
			for _, s := range []*served{col, tcp} {
				r, err := s.client.Chat.Completions.New(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				ch := r.Choices[0]
				if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 || ch.Message.Content != "" {
					t.Fatalf("%s seed %d: finish %q, %d calls, content %q", name, seed, ch.FinishReason, len(ch.Message.ToolCalls), ch.Message.Content)
				}
				tc := ch.Message.ToolCalls[0]
				if tc.Type != "function" || tc.ID == "" || !validArgs(tc.Function.Name, tc.Function.Arguments) || (name == "named" && tc.Function.Name != "get_time") {
					t.Fatalf("%s seed %d: call %+v", name, seed, tc)
				}
				calls = append(calls, tc.Function.Name+tc.Function.Arguments)

				st := s.client.Chat.Completions.NewStreaming(ctx, p)
				var acc openai.ChatCompletionAccumulator
				finished, heads, frags := 0, 0, 0
				for st.Next() {
					ch := st.Current()
					acc.AddChunk(ch)
					if _, ok := acc.JustFinishedToolCall(); ok {
						finished++
					}
					// OpenAI's shape: one chunk opens the call with its id,
					// type and name (and no arguments), the arguments
					// follow in fragments that carry neither.
					for _, c := range ch.Choices {
						for _, d := range c.Delta.ToolCalls {
							switch {
							case d.ID != "":
								heads++
								if d.Type != "function" || d.Function.Name == "" || d.Function.Arguments != "" || frags > 0 {
									t.Fatalf("%s seed %d: call opened with %+v after %d fragments", name, seed, d, frags)
								}
							case d.Function.Name != "" || d.Type != "":
								t.Fatalf("%s seed %d: an arguments fragment %+v names the call again", name, seed, d)
							default:
								frags++
							}
						}
					}
				}
				if err := st.Err(); err != nil {
					t.Fatal(err)
				}
				sc := acc.Choices[0]
				if sc.FinishReason != "tool_calls" || len(sc.Message.ToolCalls) != 1 || finished != 1 {
					t.Fatalf("%s seed %d streamed: finish %q, %d calls, %d finished", name, seed, sc.FinishReason, len(sc.Message.ToolCalls), finished)
				}
				// Token by token: several fragments, not the whole
				// arguments in one chunk at the end.
				if heads != 1 || frags < 3 {
					t.Fatalf("%s seed %d streamed: %d opening chunks, %d argument fragments; want 1 and one per generated token", name, seed, heads, frags)
				}
				stc := sc.Message.ToolCalls[0]
				if stc.ID == "" || !validArgs(stc.Function.Name, stc.Function.Arguments) {
					t.Fatalf("%s seed %d streamed: call %+v", name, seed, stc)
				}
				calls = append(calls, stc.Function.Name+stc.Function.Arguments)
			}
			for _, c := range calls[1:] {
				if c != calls[0] {
					t.Fatalf("%s seed %d: calls differ: %q", name, seed, calls)
				}
			}
			t.Logf("%s seed %d: %s", name, seed, calls[0])
		}
	}
	// auto: the random model writes text, which stays content.
	r, err := tcp.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, Tools: tools,
		Temperature: openai.Float(0), MaxCompletionTokens: openai.Int(8)})
	if err != nil {
		t.Fatal(err)
	}
	if ch := r.Choices[0]; len(ch.Message.ToolCalls) != 0 || ch.Message.Content == "" || ch.FinishReason == "tool_calls" {
		t.Fatalf("auto: %+v", ch)
	}
	// Multi-turn: the call and the tool's answer go back through the template.
	first, err := col.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather?")}, Tools: tools,
		ToolChoice: choices["required"], Seed: openai.Int(1), MaxCompletionTokens: openai.Int(120)})
	if err != nil {
		t.Fatal(err)
	}
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather?"), first.Choices[0].Message.ToParam(),
		openai.ToolMessage("18 C and sunny", first.Choices[0].Message.ToolCalls[0].ID)}
	second, err := col.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Messages: msgs, Tools: tools,
		ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("none")}, Temperature: openai.Float(0), MaxCompletionTokens: openai.Int(8)})
	if err != nil {
		t.Fatal(err)
	}
	if second.Choices[0].Message.Content == "" || second.Usage.PromptTokens <= first.Usage.PromptTokens {
		t.Fatalf("second turn: %+v usage %+v (first %+v)", second.Choices[0].Message, second.Usage, first.Usage)
	}
}
