package router

import (
	"os"
	"testing"

	"sluice/internal/testenv"
)

// x[i] indexes as Python does (jinja2): -len(x) is the first item, a
// string counts characters, and out of range both ways is undefined.
// gonja 2.9.1 left x[-len(x)] undefined (so messages[-1] of one message
// and s.split(sep)[-1] when sep is absent) and counted a string's bytes.
// Each want is jinja2 3.1.6's rendering of the case (messages is one
// user message "ab"), made with ImmutableSandboxedEnvironment(
// trim_blocks=True, lstrip_blocks=True) as Hugging Face renders.
func TestChatTemplateItemAsPython(t *testing.T) {
	rendersAsJinja(t, []jinjaCase{
		{`{{ [1,2,3][-3] }}`, `1`},
		{`{{ 'héllo'[1] }}`, `é`},
		{`{{ 'héllo'[-1] }}`, `o`},
		{`{{ [][-1] }}|`, `|`},
		{`{{ messages[-1].content }}`, `ab`},
		{`{{ [1,2,3][3] }}|{{ [1,2,3][-4] }}|`, `||`},
		{`{{ 'héllo'[5] }}|{{ 'héllo'[-6] }}|{{ 'héllo'[-5] }}`, `||h`},
		{`{{ ['x'][-1] }}`, `x`},
		{`{{ 'x'.split('<think>')[-1].lstrip('\n') }}`, `x`},
		{`{{ messages[0]['content'] }}{{ messages[-1]['role'] }}`, `abuser`},
		{`{{ 'héllo'[1:3] }}|{{ 'héllo'[-2:] }}|{{ [1,2,3][-5:] }}|{{ 'héllo'[:-4] }}`, `él|lo|[1, 2, 3]|h`},
		{`{% if [][-1] is defined %}d{% else %}u{% endif %}{% if [1][-2] is undefined %}U{% endif %}`, `uU`},
		{`{% set d = {'k': 'v'} %}{{ d['k'] }}{{ d.k }}`, `vv`},
		{`{% set ns = namespace(l=[1]) %}{% set ns.l = ns.l + [2] %}{{ ns.l[-2] }}{{ ns['l'][-1] }}`, `12`},
	})
}

// Qwen3's template reads an assistant message's answer as
// content.split('</think>')[-1].lstrip('\n') and its reasoning as
// content.split('</think>')[0].rstrip().split('<think>')[-1]: a reply
// with </think> but no <think> (what Qwen3's thinking variants write
// when the prompt opened the block) failed the rendering (a 500). want
// is jinja2 3.1.6's rendering (ImmutableSandboxedEnvironment(
// trim_blocks=True, lstrip_blocks=True), add_generation_prompt=True,
// eos_token '<|im_end|>').
func TestQwen3ThinkCloseWithoutOpen(t *testing.T) {
	b, err := os.ReadFile(testenv.Shared(t, "templates/Qwen-Qwen3-0.6B.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	ct, err := NewChatTemplate(string(b), "", "<|im_end|>")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ct.Render([]ChatMessage{{Role: "user", Content: "Hi"}, {Role: "assistant", Content: "Okay.\n</think>\n\nHi"}, {Role: "user", Content: "More"}})
	want := "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHi<|im_end|>\n<|im_start|>user\nMore<|im_end|>\n<|im_start|>assistant\n"
	if err != nil || got != want {
		t.Errorf("got  %q (%v)\nwant %q", got, err, want)
	}
}

// jinjaCase is a template and jinja2 3.1.6's rendering of it.
type jinjaCase struct{ src, want string }

// rendersAsJinja renders each case over one user message "ab" and wants
// jinja2's rendering (ImmutableSandboxedEnvironment(trim_blocks=True,
// lstrip_blocks=True), as Hugging Face renders).
func rendersAsJinja(t *testing.T, cases []jinjaCase) {
	t.Helper()
	for _, c := range cases {
		ct, err := NewChatTemplate(c.src, "", "")
		if err != nil {
			t.Fatalf("%s: %v", c.src, err)
		}
		out, err := ct.Render([]ChatMessage{{Role: "user", Content: "ab"}})
		if err != nil || out != c.want {
			t.Errorf("%s: %q, %v; jinja2 renders %q", c.src, out, err, c.want)
		}
	}
}
