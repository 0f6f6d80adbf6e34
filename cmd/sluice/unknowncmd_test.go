package main

import (
	"strings"
	"testing"
)

// A first word that is a model (llama-server's habit) or another tool's
// verb (ollama's pull and run) is answered with the command to type, not
// the bare list of commands.
func TestUnknownCommandHints(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"qwen3-0.6b-q8_0.gguf", "--port", "8000"}, "'sluice serve qwen3-0.6b-q8_0.gguf --port 8000'"},
		{[]string{"hf://Qwen/Qwen3-0.6B-GGUF:Q8_0"}, "'sluice serve hf://Qwen/Qwen3-0.6B-GGUF:Q8_0'"},
		{[]string{"pull", "x"}, "'sluice serve --model hf://ORG/REPO:QUANT'"},
		{[]string{"run"}, "'sluice generate --model FILE --prompt TEXT'"},
		{[]string{"frob"}, ""},
	} {
		if got := unknownCommandHint(c.args); c.want == "" && got != "" || !strings.Contains(got, c.want) {
			t.Errorf("%q: hint %q, want %q", c.args, got, c.want)
		}
	}
}
