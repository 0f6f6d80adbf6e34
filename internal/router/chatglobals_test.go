package router

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

// range(n) builds a list of n numbers before any loop charges them: a
// template asking range(1048576)|length once per message built 8 MiB a
// message with nothing counted (35,000 messages fit a 1 MiB body). The
// list is charged to the values a rendering builds, so the rendering is
// refused once the budget is gone, after a bounded amount of work.
func TestChatTemplateRangeCharged(t *testing.T) {
	ct, err := NewChatTemplate("{% for m in messages %}{% if range(1048576)|length == 0 %}no{% endif %}{% endfor %}x", "", "")
	if err != nil {
		t.Fatal(err)
	}
	ct.maxBuilt = 40 << 20 // two ranges of 2^20 numbers (16 bytes a slot)
	if out, err := ct.Render(make([]ChatMessage, 2)); err != nil || out != "x" {
		t.Fatalf("two ranges: %q %v", out, err)
	}
	start := time.Now()
	if out, err := ct.Render(make([]ChatMessage, 200)); !errors.Is(err, ErrRenderTooLarge) {
		t.Errorf("200 ranges of 2^20 numbers: %q %v (%v), want ErrRenderTooLarge", out, err, time.Since(start))
	}
	// A real template's range over the messages stays well inside.
	ct, err = NewChatTemplate("{% for i in range(messages|length - 1, -1, -1) %}{{ i }}{% endfor %}", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := ct.Render(make([]ChatMessage, 3)); err != nil || out != "210" {
		t.Errorf("range over the messages: %q %v", out, err)
	}
}

// lipsum(n, html, min, max) wrote n paragraphs of max-min words whatever
// n and max were, before anything counted them (lipsum(1, false, 0,
// 10**9) is gigabytes: the router's memory, every tenant's requests). Its
// words are charged to the loop steps and its text to the values built
// before it is made (max-min and n at their extremes too).
func TestChatTemplateLipsumBounded(t *testing.T) {
	for _, call := range []string{"lipsum(1, false, 0, 3000000)", "lipsum(3000000, false, 5, 5)", "lipsum(1, false, -3000000, 0)",
		"lipsum(n=1, html=false, min=0, max=3000000)", "lipsum(1, false, -9000000000000000000, 9000000000000000000)",
		"lipsum(1, false, -9223372036854775807 - 1, 9223372036854775807)", "lipsum(9223372036854775807, false, 0, 1)",
		"lipsum(1, false, 0, 80000) ~ lipsum(1, false, 0, 80000)"} {
		ct, err := NewChatTemplate("{% if messages|length > 1 %}{% set _ = "+call+" %}{% endif %}x", "", "")
		if err != nil {
			t.Fatal(err)
		}
		ct.maxBuilt = 4 << 20
		if out, err := ct.Render(make([]ChatMessage, 1)); err != nil || out != "x" {
			t.Fatalf("%s not called: %q %v", call, out, err)
		}
		start := time.Now()
		if out, err := ct.Render(make([]ChatMessage, 2)); !errors.Is(err, ErrRenderTooLarge) && !errors.Is(err, ErrTemplateTooMuchWork) {
			t.Errorf("%s: %q %v (%v), want ErrRenderTooLarge or ErrTemplateTooMuchWork", call, out, err, time.Since(start))
		}
	}
	// Within the budget it is Jinja's lipsum.
	ct, err := NewChatTemplate("{{ lipsum(2, false, 3, 6)|wordcount }}", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := ct.Render(nil); err != nil || out != "6" {
		t.Errorf("lipsum(2, false, 3, 6)|wordcount: %q %v, want 6", out, err)
	}
}

// lipsum() writes the same text in every rendering (jinja2's and gonja's
// drew from the process's random source: a template calling it made a
// new prompt each time, which no replay or prefix cache could match):
// the same call the same text, whatever the template around it.
func TestChatTemplateLipsumDeterministic(t *testing.T) {
	render := func(src string) string {
		t.Helper()
		ct, err := NewChatTemplate(src, "", "")
		if err != nil {
			t.Fatal(err)
		}
		out, err := ct.Render(nil)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	a := render("{{ lipsum(3, false, 5, 40) }}")
	if b := render("{{ lipsum(3, false, 5, 40) }}"); a != b || strings.Count(a, "\n\n") != 2 {
		t.Errorf("two renderings of lipsum(3, false, 5, 40):\n%s\n%s", a, b)
	}
	if b := render("x{{ lipsum(n=3, html=false, min=5, max=40) }}"); b != "x"+a {
		t.Errorf("by name: %q, want %q", b, "x"+a)
	}
	if h := render("{{ lipsum(2, true, 5, 40) }}"); !strings.HasPrefix(h, "<p>") || !strings.HasSuffix(h, "</p>") || strings.Count(h, "</p>\n<p>") != 1 {
		t.Errorf("html: %q", h)
	}
}

// A word of lipsum costs about a microsecond (gonja title-cases each), a
// byte of the build budget far less: its words count as loop steps too,
// so 1,200,000 of them end the rendering even with bytes to spare.
func TestChatTemplateLipsumSteps(t *testing.T) {
	ct, err := NewChatTemplate("{% if lipsum(3, false, 0, 400000)|length == 0 %}no{% endif %}x", "", "")
	if err != nil {
		t.Fatal(err)
	}
	ct.maxBuilt = 1 << 40
	if out, err := ct.Render(nil); !errors.Is(err, ErrTemplateTooMuchWork) {
		t.Errorf("1,200,000 words: %q %v, want ErrTemplateTooMuchWork", out, err)
	}
}

// A string's length, a character, a slice, its first or last character,
// its words, its number and `is lower` each go over the whole string:
// in a loop that was the steps times the string's length, uncounted.
// Each is charged to the loop steps (a step per inBytesPerStep bytes,
// times gonja's passes), so a loop reading a long string many times is
// refused while reading it a few times is not.
func TestChatTemplateStringReadsCharged(t *testing.T) {
	// 1,024 steps a pass (digits: parsed to the end; |int of more
	// than 4,300 digits is refused, as Python's int() refuses it, so it
	// reads them with an x after).
	s := strings.Repeat("1", 16<<10)
	for _, op := range []string{"s|length", "s|count", "s|first", "s|last", "s|wordcount", "(s ~ 'x')|int", "s|float",
		"s|random", "s|abs", "s|round", "s|filesizeformat", "s|truncate(5)", "'-' * s", "s is divisibleby 3", "7 is divisibleby s", "s[0]", "s[-1]", "s[:1]", "s[1:]", "s[::-1]", "s is lower", "s is upper"} {
		ct, err := NewChatTemplate("{% for m in messages %}{% set _ = "+op+" %}{% endfor %}x", "", "")
		if err != nil {
			t.Fatal(err)
		}
		ct.maxSteps = 50_000
		o := RenderOptions{Kwargs: map[string]any{"s": s}}
		if out, err := ct.RenderWith(make([]ChatMessage, 4), o); err != nil || out != "x" {
			t.Errorf("%s 4 times: %q %v", op, out, err)
		}
		if out, err := ct.RenderWith(make([]ChatMessage, 60), o); !errors.Is(err, ErrTemplateTooMuchWork) {
			t.Errorf("%s 60 times: %q %v, want ErrTemplateTooMuchWork", op, out, err)
		}
	}
	// A list sliced with a step is copied item by item: charged its
	// items; without a step it is not copied.
	ct, err := NewChatTemplate("{% for m in messages %}{% if messages[::-1] is none %}no{% endif %}{% endfor %}x", "", "")
	if err != nil {
		t.Fatal(err)
	}
	ct.maxSteps = 10_000
	if out, err := ct.Render(make([]ChatMessage, 100)); err != nil || out != "x" { // 100 + 100*20 steps
		t.Errorf("messages[::-1] 100 times: %q %v", out, err)
	}
	if out, err := ct.Render(make([]ChatMessage, 240)); !errors.Is(err, ErrTemplateTooMuchWork) { // 240 + 240*48
		t.Errorf("messages[::-1] 240 times: %q %v, want ErrTemplateTooMuchWork", out, err)
	}
	// What they answer is unchanged.
	ct, err = NewChatTemplate("{{ s|length }} {{ s[1] }} {{ s[-1] }} {{ s[1:3] }} {{ s[::-1] }} {{ s is lower }} {{ s is upper }} {{ s|first }} {{ s|wordcount }}", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := ct.RenderWith(nil, RenderOptions{Kwargs: map[string]any{"s": "héllo"}}); err != nil || out != "5 é o él olléh True False h 1" {
		t.Errorf("answers: %q %v", out, err)
	}
}

// The rewritten tree calls the server's functions by name: a template
// that set one of those names to another function replaced the bound
// (here every loop's step count, making a loop over the messages in a
// loop over the messages free again). A template naming them does not
// parse.
func TestChatTemplateServerNamesRefused(t *testing.T) {
	for _, src := range []string{
		"{% set " + loopStepsFunc + " = " + budgetCmpFunc + " %}{% for a in messages %}{% for b in messages %}{% endfor %}{% endfor %}x",
		"{% macro " + budgetMulFunc + "(a, b) %}{% endmacro %}{{ 'a' * 3 }}",
		"{% for " + renderStateVar + " in [1] %}{% endfor %}",
		"{% set ns = namespace(x=" + budgetItemFunc + ") %}",
		"{# " + budgetReadFunc + " #}",
	} {
		ct, err := NewChatTemplate(src, "", "")
		if err == nil {
			ct.maxSteps = 10_000
			out, err := ct.Render(make([]ChatMessage, 200))
			t.Errorf("%s parsed (rendering 200 messages: %q %v), want refused", src, out, err)
			continue
		}
		if !strings.Contains(err.Error(), serverNames) {
			t.Errorf("%s: %v, want the error to name %s", src, err, serverNames)
		}
	}
}

// sort, dictsort, groupby, unique, max and min compare or hash their
// items: two long strings with a common prefix compare byte by byte, a
// sort about log2(n) times each. They were charged their item count
// only: a loop over 500 messages of 2 KB sorting their contents took 63 s
// of a core (Intel Xeon family 6 model 167, load 21, 2026-12-07) inside
// the step bound. Their items' text is charged too (16 bytes a step, a
// sort's log2(n) times).
func TestChatTemplateSortCharged(t *testing.T) {
	msgs := make([]ChatMessage, 40)
	for i := range msgs {
		msgs[i] = ChatMessage{Role: "user", Content: strings.Repeat("x", 1600) + string(rune('a'+i%26))}
	}
	// A pass over the contents is 4,000 steps and more; a sort of 40
	// items makes 6.
	for _, c := range []struct {
		f            string
		within, over int
	}{
		{"map(attribute='content')|sort", 1, 5}, {"sort(attribute='content')", 1, 5}, {"groupby('content')", 1, 5},
		{"map(attribute='content')|sort(reverse=true)", 1, 5},
		{"map(attribute='content')|unique", 5, 30}, {"map(attribute='content')|max", 5, 30}, {"map(attribute='content')|min", 5, 30},
	} {
		ct, err := NewChatTemplate("{% for m in messages %}{% if loop.index <= n %}{% set _ = messages|"+c.f+"|list %}{% endif %}{% endfor %}x", "", "")
		if err != nil {
			t.Fatal(err)
		}
		ct.maxSteps = 100_000
		if out, err := ct.RenderWith(msgs, RenderOptions{Kwargs: map[string]any{"n": c.within}}); err != nil || out != "x" {
			t.Errorf("|%s %d times: %q %v", c.f, c.within, out, err)
		}
		if out, err := ct.RenderWith(msgs, RenderOptions{Kwargs: map[string]any{"n": c.over}}); !errors.Is(err, ErrTemplateTooMuchWork) {
			t.Errorf("|%s %d times: %q %v, want ErrTemplateTooMuchWork", c.f, c.over, out, err)
		}
	}
	// dictsort compares the keys of a dict.
	keys := map[string]any{}
	for i := range 40 {
		keys[strings.Repeat("k", 1600)+strconv.Itoa(i)] = i
	}
	ct, err := NewChatTemplate("{% for m in messages %}{% set _ = d|dictsort %}{% endfor %}x", "", "")
	if err != nil {
		t.Fatal(err)
	}
	ct.maxSteps = 100_000
	if out, err := ct.RenderWith(msgs[:1], RenderOptions{Kwargs: map[string]any{"d": keys}}); err != nil || out != "x" {
		t.Errorf("dictsort once: %q %v", out, err)
	}
	if out, err := ct.RenderWith(msgs[:5], RenderOptions{Kwargs: map[string]any{"d": keys}}); !errors.Is(err, ErrTemplateTooMuchWork) {
		t.Errorf("dictsort 5 times: %q %v, want ErrTemplateTooMuchWork", out, err)
	}
}
