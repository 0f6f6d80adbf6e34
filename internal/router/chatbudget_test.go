package router

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"

	"sluice/internal/testenv"

	"github.com/nikolalohinski/gonja/v2"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
)

// budgetContent is the tenant's message in the blow-up shapes: 16 KiB of
// "x\n" lines, so that each shape below, unbounded, builds 64-512 MiB.
var budgetContent = strings.Repeat("x\n", 8192)

// Every value a rendering builds is counted, not only what it writes: a
// template that multiplies a message (by an operator, a filter, a string
// method, or text rendered into a macro's or a block's buffer) is refused
// with ErrRenderTooLarge (a 400) having allocated about its budget, where
// each of these shapes built 64 MiB to 2 GiB before (checked by running
// them unbounded: TotalAlloc grew by that much, or the shape panicked).
func TestChatTemplateBuildBounded(t *testing.T) {
	const budget = 1 << 20
	// A list of 16384 references to the message: cheap to build
	// (16 bytes a slot, under the budget), 256 MiB as text.
	const refs = "{% set ns = namespace(l=[messages[0].content]) %}{% for i in range(14) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{% set l = ns.l %}"
	for i, src := range []string{
		// operators
		"{{ messages[0].content * 16384 }}",
		"{{ 'x' * -1 }}{{ 'ab' * 9223372036854775807 }}",
		"{{ messages[0].content * 1125899906842624 }}", // 2^14 * 2^50 bytes: 0 in int64
		"{% set s = messages[0].content * 16384 %}{{ s|length }}",
		"{% set ns = namespace(s='') %}{% for i in range(512) %}{% set ns.s = ns.s ~ messages[0].content %}{% endfor %}{{ ns.s|length }}",
		"{% set ns = namespace(s='') %}{% for i in range(512) %}{% set ns.s = ns.s + messages[0].content %}{% endfor %}{{ ns.s|length }}",

		"{% set ns = namespace(l=[messages[0].content]) %}{% for i in range(22) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l|length }}",
		refs + "{{ l }}",
		refs + "{{ ('a' ~ l)|length }}",
		refs + "{{ ('a' + l|string)|length }}",
		// filters
		refs + "{% if l > 'a' %}y{% endif %}",
		refs + "{{ l|join|length }}",
		refs + "{{ l|tojson|length }}",
		refs + "{{ l|upper|length }}",
		refs + "{{ l|replace('x', 'y')|length }}",
		"{{ (messages[0].content|list)|join(messages[0].content)|length }}",
		"{{ messages[0].content|replace('x', messages[0].content)|length }}",
		"{{ messages[0].content|replace('', messages[0].content)|length }}",
		"{{ messages[0].content|center(268435456)|length }}",
		"{{ messages[0].content|indent(32768)|length }}",
		"{{ messages[0].content|indent(messages[0].content)|length }}",
		"{{ messages|tojson(indent=33554432)|length }}",
		// Hugging Face's tojson writes its separators once per item
		// and an indent given as text once per level per line.
		"{{ range(1024)|list|tojson(separators=(messages[0].content, ': '))|length }}",
		"{{ range(1024)|list|tojson(none, none, (',', messages[0].content))|length }}",
		"{{ range(1024)|list|tojson(indent=messages[0].content)|length }}",
		"{{ ('x ' * 8192)|wordwrap(100000)|length }}",
		"{{ messages|batch(3, fill_with='x')|length }}{{ messages|batch(16777216, fill_with='x')|length }}",
		"{{ messages|slice(16777216)|length }}",
		"{% for m in range(4096) %}{% set x = messages[0].content|upper %}{% endfor %}",
		// string methods
		"{{ messages[0].content.replace('x', messages[0].content, -1)|length }}",
		"{{ messages[0].content.join(messages[0].content|list)|length }}",
		"{{ messages[0].content.ljust(67108864, ' ')|length }}",
		"{{ messages[0].content.center(67108864, ' ')|length }}",
		"{{ messages[0].content.zfill(67108864)|length }}",
		"{{ '{:>67108864}'.format(messages[0].content)|length }}",
		// buffered bodies
		"{% macro m() %}{% for i in range(16384) %}{{ messages[0].content }}{% endfor %}{% endmacro %}{{ m()|length }}",
		"{% set x %}{% for i in range(16384) %}{{ messages[0].content }}{% endfor %}{% endset %}{{ x|length }}",
		"{% filter length %}{% for i in range(16384) %}{{ messages[0].content }}{% endfor %}{% endfilter %}",
		"{% macro m() %}{{ caller()|length }}{% endmacro %}{% call m() %}{% for i in range(16384) %}{{ messages[0].content }}{% endfor %}{% endcall %}",
		// a refusal a test turns into false still ends the rendering
		"{% if (messages[0].content * 16384) is defined %}a{% endif %}b",
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			ct, err := NewChatTemplate(src, "", "")
			if err != nil {
				t.Fatalf("%s: %v", src, err)
			}
			ct.maxBuilt = budget
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			out, err := ct.Render([]ChatMessage{{Role: "user", Content: budgetContent}})
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrRenderTooLarge) {
				t.Errorf("%s: %.40q, %v; want ErrRenderTooLarge", src, out, err)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 24<<20 {
				t.Errorf("%s: allocated %d MiB on a %d MiB budget", src, grew>>20, budget>>20)
			}
		})
	}
}

// The refusal is a 400 context_length_exceeded on messages, on both the
// chat route and /tokenize, with the default budget.
func TestChatTemplateBuildRefusedAs400(t *testing.T) {
	ct, err := NewChatTemplate("{% set s = messages[0].content * 1000000 %}{{ s|length }}", "", "")
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, 256, func(c *Config) { c.Chat = ct })
	body := `{"messages":[{"role":"user","content":"` + strings.Repeat("x", 1000) + `"}]}`
	for _, path := range []string{"/v1/chat/completions", "/tokenize"} {
		code, m := postJSON(t, h.ts.URL+path, "", body)
		e, _ := m["error"].(map[string]any)
		if code != 400 || e == nil || e["code"] != CodeContextLength || e["param"] != "messages" ||
			!strings.Contains(e["message"].(string), "builds more than") {
			t.Errorf("%s: %d %v, want 400 %s on messages", path, code, m, CodeContextLength)
		}
	}
}

// Counting changes no rendering: each case renders as jinja2 3.1.6
// (Python, trim_blocks, lstrip_blocks, the do extension) renders it with
// messages [{role: user, content: ab}], through the rewritten operators,
// the counted filters and string methods, and sluice's own {% set %} and
// {% filter %}; and as gonja itself, unrewritten, renders it (but for a
// negative repetition, which panicked in gonja).
func TestChatTemplateBuildRendersAsJinja(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{`{{ 'ab' * 3 }}`, `ababab`},
		{`{{ 'b' > 'a' }} {{ 2 >= 1.5 }} {{ 'a' <= messages[0].content }} {{ 'b' < 'a' }}`, `True True True False`},
		{`{{ messages[0].content * 2 }}`, `abab`},
		{`{{ 'x' * 0 }}|{{ 'x' * -2 }}`, `|`},
		{`{{ [1, 2] + [3] }}`, `[1, 2, 3]`},
		{`{{ 1 + 2 }} {{ 1.5 + 2 }} {{ 2 * 3 }} {{ 2.5 * 2 }} {{ -1 * 2 }}`, `3 3.5 6 5.0 -2`},
		{`{{ 'a' ~ 1 ~ [1, 'b'] }}`, `a1[1, 'b']`},
		{`{{ ['a', 'b']|join(', ') }}`, `a, b`},
		{`{{ 'a-b-c'.replace('-', '+', -1) }}`, `a+b+c`},
		{`{{ 'ab'.center(6, '*') }}`, `**ab**`},
		{`{{ ', '.join(['x', 'y']) }}`, `x, y`},
		{`{{ '{}-{}'.format(1, 'a') }}`, `1-a`},
		{`{{ 'ab'|center(6) }}|`, `  ab  |`},
		{"{{ 'a\\nb'|indent(2) }}", "a\n  b"},
		{`{{ 'x'|replace('x', 'yy') }}`, `yy`},
		{`{% set x %}in{{ 1 + 1 }}{% endset %}{{ x }}`, `in2`},
		{`{% filter upper %}ab{{ 'c' ~ 'd' }}{% endfilter %}`, `ABCD`},
		{`{% macro m(a, b='z') %}{{ a ~ b }}{% endmacro %}{{ m('y') }}{{ m('y', b='w') }}`, `yzyw`},
		{`{% macro m() %}[{{ caller() }}]{% endmacro %}{% call m() %}in{% endcall %}`, `[in]`},
		{`{% set ns = namespace(s='') %}{% for m in messages %}{% set ns.s = ns.s + m.content %}{% endfor %}{{ ns.s }}`, `ab`},
		{`{{ 'abc'[1:] ~ 'x' }}`, `bcx`},
		{`{{ (messages[0].content + '!')|upper }}`, `AB!`},
		{`{% set d = {'k': 'a' + 'b'} %}{{ d.k }}`, `ab`},
		{`{{ 'a' if messages else 'b' }}{{ ('a' ~ 'b') if true else 'c' }}`, `aab`},
		{`{{ messages[0]['content'].upper() }}`, `AB`},
		{`{% for x in [1, 2] + [3] %}{{ x }}{% endfor %}`, `123`},
		{`{% if 'a' ~ 'b' == 'ab' %}y{% endif %}`, `y`},
		{`{{ messages|map(attribute='content')|join }}`, `ab`},
		{`{{ {'a': 'b'} }}`, `{'a': 'b'}`},
		{`{{ 'a' + 'b' * 2 ~ 'c' }}`, `abbc`},
		{`{% set s = 'ab' ~ 'cd' %}{{ s.replace('bc', '-', 1) }}`, `a-d`},
		{`{{ '0'.zfill(3) }}{{ 'a'.ljust(3, '.') }}{{ 'a'.rjust(3, ' ') }}`, `000a..  a`},
		{`{{ '{:>4}'.format('a') }}`, `   a`},
		{`{{ messages[0].content|list|join('.') }}`, `a.b`},
		{`{% set ns = namespace(l=[]) %}{% for i in range(3) %}{% set ns.l = ns.l + [i * 2] %}{% endfor %}{{ ns.l }}`, `[0, 2, 4]`},
	} {
		ct, err := NewChatTemplate(c.src, "", "")
		if err != nil {
			t.Fatalf("%s: %v", c.src, err)
		}
		msgs := []ChatMessage{{Role: "user", Content: "ab"}}
		out, err := ct.Render(msgs)
		if err != nil || out != c.want {
			t.Errorf("%s: %q, %v; jinja2 renders %q", c.src, out, err, c.want)
		}
		if strings.Contains(c.src, "-2") {
			continue
		}
		raw, err := gonjaRender(c.src, msgs)
		if err != nil || raw != out {
			t.Errorf("%s: gonja unrewritten renders %q, %v; counted %q", c.src, raw, err, out)
		}
	}
}

// gonjaRender renders src with gonja as it comes (no rewriting, gonja's
// own filters and tags), Hugging Face's settings.
func gonjaRender(src string, msgs []ChatMessage) (string, error) {
	cfg := config.New()
	cfg.TrimBlocks, cfg.LeftStripBlocks = true, true
	loader, err := loaders.NewMemoryLoader(map[string]string{"/t": src})
	if err != nil {
		return "", err
	}
	tpl, err := exec.NewTemplate("/t", cfg, loader, gonja.DefaultEnvironment)
	if err != nil {
		return "", err
	}
	list := make([]any, len(msgs))
	for i, m := range msgs {
		list[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	return tpl.ExecuteToString(exec.NewContext(map[string]any{"messages": list}))
}

// Real templates build about their input, far under the budget: a
// 1.5 MB conversation of 100 turns through Qwen3's template (reasoning
// split off each assistant turn, a tool) builds 2.4x its input beside its
// output (every string method is charged its string's length: it strips
// and splits each assistant turn), Gemma 3's 1.0x; the test allows 4x.
func TestChatTemplateBuildOfRealTemplates(t *testing.T) {
	turn := strings.Repeat("word ", 2048) // 10 KiB
	msgs := []ChatMessage{{Role: "system", Content: turn}}
	for i := range 100 {
		if i%2 == 0 {
			msgs = append(msgs, ChatMessage{Role: "user", Content: turn})
		} else {
			msgs = append(msgs, ChatMessage{Role: "assistant", Content: "<think>\n" + turn + "</think>\n\n" + turn})
		}
	}
	msgs = append(msgs, ChatMessage{Role: "user", Content: turn})
	in := 0
	for _, m := range msgs {
		in += len(m.Content)
	}
	tools := []any{map[string]any{"type": "function", "function": map[string]any{"name": "f", "description": turn,
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"x": map[string]any{"type": "string"}}}}}}
	for _, c := range []struct {
		file, bos, eos string
		tools          []any
	}{
		{"Qwen-Qwen3-0.6B.jinja", "", "<|im_end|>", tools},
		{"google-gemma-3-it.jinja", "<bos>", "<eos>", nil},
	} {
		b, err := os.ReadFile(testenv.Shared(t, "templates/"+c.file))
		if err != nil {
			t.Fatal(err)
		}
		ct, err := NewChatTemplate(string(b), c.bos, c.eos)
		if err != nil {
			t.Fatal(err)
		}
		if c.file == "google-gemma-3-it.jinja" {
			in -= len(msgs[0].Content)
			msgs = msgs[1:] // Gemma 3 folds a system turn into the first user turn
		}
		out, built, err := ct.render(msgs, RenderOptions{Tools: c.tools})
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		t.Logf("%s: input %d bytes, output %d, built %d (%.2fx the input)", c.file, in, len(out), built, float64(built)/float64(in))
		if built > 4*int64(in) {
			t.Errorf("%s: built %d bytes for %d of input", c.file, built, in)
		}
	}
}

// A tag whose inside the counting cannot reach (gonja's {% with %} and
// {% trans %} keep their expressions private) is refused when the
// template is parsed, naming the tag, instead of rendering uncounted.
func TestChatTemplateRefusesUncountedTags(t *testing.T) {
	for _, tag := range []string{"with", "trans"} {
		src := "{% " + tag + " %}x{% end" + tag + " %}"
		if tag == "with" {
			src = "{% with a = messages[0].content * 1000 %}{{ a }}{% endwith %}"
		}
		_, err := NewChatTemplate(src, "", "")
		if err == nil || !strings.Contains(err.Error(), "{% "+tag+" %} is not available in a chat template") {
			t.Errorf("%s: %v, want refused naming the tag", src, err)
		}
	}
}
