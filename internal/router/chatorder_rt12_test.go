package router

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"
)

// TestToolCallArgumentsDepthBounded: a tool call's arguments are a JSON
// string of the tenant's, decoded in key order (decodeOrdered) apart
// from the body's own decode, whose nesting bound (encoding/json's
// 10,000) never saw them. Nested past maxOrderedDepth they stay a string,
// decoded no further: 800 KB of brackets took 128 MB of the router's
// goroutine stack and seconds of its CPU. At the bound they still decode
// (as the body's decode takes them).
func TestToolCallArgumentsDepthBounded(t *testing.T) {
	msgs := func(args string) []ChatMessage {
		t.Helper()
		a, _ := json.Marshal(args)
		raw := `[{"role":"user","content":"q"},{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":` + string(a) + `}}]}]`
		m, e := parseMessages(json.RawMessage(raw))
		if e != nil {
			t.Fatalf("refused: %v", e)
		}
		return m
	}
	arguments := func(m []ChatMessage) any {
		fn := m[1].ToolCalls[0].(*jsonObject).vals["function"].(*jsonObject)
		return fn.vals["arguments"]
	}
	nested := func(depth int) string {
		return `{"a":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + `}`
	}
	if _, ok := arguments(msgs(nested(maxOrderedDepth))).(*jsonObject); !ok {
		t.Fatalf("arguments nested %d deep (the bound) are not an object", maxOrderedDepth)
	}
	deep := nested(400000)
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	got := arguments(msgs(deep))
	runtime.ReadMemStats(&m1)
	if s, ok := got.(string); !ok || s != deep {
		t.Fatalf("arguments nested 400,000 deep reached the template as %T, want the string", got)
	}
	if grew := int64(m1.StackInuse) - int64(m0.StackInuse); grew > 16<<20 {
		t.Errorf("decoding arguments nested 400,000 deep grew the stacks by %d MB", grew>>20)
	}
	if _, err := decodeOrdered([]byte(nested(maxOrderedDepth + 1))); err == nil {
		t.Error("decodeOrdered took a value nested past maxOrderedDepth")
	}
}
