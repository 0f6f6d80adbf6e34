package router

import (
	"os"
	"testing"

	"sluice/internal/testenv"
)

// The real chat templates of Qwen3 and Gemma 3 (testdata/templates; see
// testdata/README.md) render through gonja as Hugging Face's
// apply_chat_template renders them: Qwen3's namespace(), reversed slice,
// string methods and </think> splitting; Gemma 3's system prefix folded
// into the first user turn, the "model" role, trim and the alternation
// check.
func TestChatTemplateQwen3AndGemma3(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(testenv.Shared(t, "templates/"+name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	cases := []struct {
		file, bos, eos string
		msgs           []ChatMessage
		want           string
		raised         bool
	}{
		{"Qwen-Qwen3-0.6B.jinja", "", "<|im_end|>", []ChatMessage{{Role: "user", Content: "Hi there"}},
			"<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n", false},
		// An earlier assistant turn loses its reasoning: only the text
		// after </think> is kept, left-stripped of newlines.
		{"Qwen-Qwen3-0.6B.jinja", "", "<|im_end|>", []ChatMessage{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "a"}, {Role: "assistant", Content: "<think>\nmull\n</think>\n\nb"}, {Role: "user", Content: "c"}},
			"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nb<|im_end|>\n<|im_start|>user\nc<|im_end|>\n<|im_start|>assistant\n", false},
		{"google-gemma-3-it.jinja", "<bos>", "<eos>", []ChatMessage{{Role: "user", Content: "Hi there "}},
			"<bos><start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n", false},
		{"google-gemma-3-it.jinja", "<bos>", "<eos>", []ChatMessage{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "a"}, {Role: "assistant", Content: "b"}, {Role: "user", Content: "c"}},
			"<bos><start_of_turn>user\nBe brief.\n\na<end_of_turn>\n<start_of_turn>model\nb<end_of_turn>\n<start_of_turn>user\nc<end_of_turn>\n<start_of_turn>model\n", false},
		{"google-gemma-3-it.jinja", "<bos>", "<eos>", []ChatMessage{{Role: "user", Content: "a"}, {Role: "user", Content: "b"}}, "", true},
	}
	for _, c := range cases {
		ct, err := NewChatTemplate(read(c.file), c.bos, c.eos)
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		got, err := ct.Render(c.msgs)
		if c.raised {
			if err == nil {
				t.Errorf("%s %v: rendered %q, want the template's own exception", c.file, c.msgs, got)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s %v: %v", c.file, c.msgs, err)
		}
		if got != c.want {
			t.Errorf("%s %v:\ngot  %q\nwant %q", c.file, c.msgs, got, c.want)
		}
	}
}

// TestParenConditionals: parenthesised conditional expressions render as
// Jinja renders them (gonja alone refuses them), nested and in set tags;
// "if" inside strings, names and plain parentheses are left alone.
func TestParenConditionals(t *testing.T) {
	cases := []struct{ src, want string }{
		{`{{ 'a' + (x if t else 'n') }}`, "aX"},
		{`{{ 'a' + (x if f else 'n') }}`, "an"},
		{`{{ 'a' + (x if '' else 'n') + (x if [1] else 'n') }}`, "anX"},
		{`{{ ((x if f else 'y') if t else 'z') + ('(if)' if none else "else") }}`, "yelse"},
		{`{% set v = (x ~ '!' if t else 'q') %}{{ v }}`, "X!"},
		{`{{ (diff) ~ ('if x else y') ~ ([1, 2]|length) }}`, "Dif x else y2"},
	}
	for _, c := range cases {
		ct, err := NewChatTemplate(`{% set x = 'X' %}{% set t = true %}{% set f = false %}{% set diff = 'D' %}`+c.src, "", "")
		if err != nil {
			t.Fatalf("%s: %v", c.src, err)
		}
		got, err := ct.Render(nil)
		if err != nil {
			t.Fatalf("%s: %v", c.src, err)
		}
		if got != c.want {
			t.Errorf("%s: got %q, want %q", c.src, got, c.want)
		}
	}
}
