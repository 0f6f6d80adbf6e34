package router

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// range() in a chat template is Jinja's: each expected output is what
// jinja2 3.1.6 (Python) renders for the same template with messages
// ['a','b','c'] (the last two read the list whole, which gonja's own
// range, a channel, answered 0 and false).
func TestChatTemplateRangeAsJinja(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"{% for i in range(3) %}{{ i }},{% endfor %}", "0,1,2,"},
		{"{% for i in range(1, 5, 2) %}{{ i }},{% endfor %}", "1,3,"},
		{"{% for i in range(5, 0, -2) %}{{ i }},{% endfor %}", "5,3,1,"},
		{"{% for i in range(-3, 3, 4) %}{{ i }},{% endfor %}", "-3,1,"},
		{"[{% for i in range(0) %}{{ i }}{% endfor %}]", "[]"},
		{"[{% for i in range(3, 1) %}{{ i }}{% endfor %}]", "[]"},
		{"{% for i in range(messages|length - 1, -1, -1) %}{{ messages[i]['content'] }}{% endfor %}", "cba"},
		{"{{ range(3)|length }}", "3"},
		{"{% if range(2) %}y{% else %}n{% endif %}{% if range(0) %}y{% else %}n{% endif %}", "yn"},
	} {
		ct, err := NewChatTemplate(c.src, "", "")
		if err != nil {
			t.Fatal(err)
		}
		out, err := ct.Render([]ChatMessage{{Role: "user", Content: "a"}, {Role: "assistant", Content: "b"}, {Role: "user", Content: "c"}})
		if err != nil || out != c.want {
			t.Errorf("%s: %q, %v; jinja2 renders %q", c.src, out, err, c.want)
		}
	}
}

// A range the template does not read to its end leaks nothing: gonja's
// own fed its numbers from a goroutine left blocked forever, one per
// request rendered.
func TestChatTemplateRangeLeaksNoGoroutine(t *testing.T) {
	ct, err := NewChatTemplate("{% if range(3) %}{{ range(5)|length }}{% endif %}{{ messages[0]['content'] }}", "", "")
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if _, err := ct.Render([]ChatMessage{{Role: "user", Content: "a"}}); err != nil {
			t.Fatal(err)
		}
	}
	goleak.VerifyNone(t)
}

// A range longer than any template counts is refused at once instead of
// building a list of 10^12 numbers (or spinning), the bound's edge and
// the extremes of int included.
func TestChatTemplateRangeBounded(t *testing.T) {
	for _, c := range []struct {
		args string
		ok   bool
	}{
		{"1048576", true}, {"1048577", false}, {"1000000000000", false},
		{"-9223372036854775807 - 1, 9223372036854775807", false},
		{"9223372036854775807, -9223372036854775807 - 1, -1", false},
		{"0, 9223372036854775807, 9223372036854775807", true},
		{"-9223372036854775807 - 1, 9223372036854775807, 9223372036854775807", true},
		{"9223372036854775807, -9223372036854775807 - 1, -9223372036854775807 - 1", true},
		{"0, 3, 0", false},
	} {
		ct, err := NewChatTemplate("{{ range("+c.args+")|length }}", "", "")
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = ct.Render(nil)
		if (err == nil) != c.ok || time.Since(start) > 5*time.Second {
			t.Errorf("range(%s): %v after %v; want ok=%v", c.args, err, time.Since(start), c.ok)
		}
	}
}

// A template that multiplies its input (the messages inside a loop over
// them) stops at the rendering bound with ErrRenderTooLarge, a 400
// context_length_exceeded on /v1/chat/completions and /tokenize, instead
// of growing the router's memory with it; under the bound it renders.
func TestChatTemplateRenderBounded(t *testing.T) {
	ct, err := NewChatTemplate("{% for a in messages %}{% for b in messages %}{{ b['content'] }}{% endfor %}{% endfor %}", "", "")
	if err != nil {
		t.Fatal(err)
	}
	ct.maxBytes = 1000
	msgs := func(n int) []ChatMessage {
		m := make([]ChatMessage, n)
		for i := range m {
			m[i] = ChatMessage{Role: "user", Content: "0123456789"}
		}
		return m
	}
	if out, err := ct.Render(msgs(10)); err != nil || len(out) != 1000 {
		t.Fatalf("at the bound: %d bytes, %v", len(out), err)
	}
	if _, err := ct.Render(msgs(11)); !errors.Is(err, ErrRenderTooLarge) {
		t.Fatalf("past the bound (1210 bytes): %v, want ErrRenderTooLarge", err)
	}
	h := newHarness(t, 256, func(c *Config) { c.Chat = ct })
	body := `{"messages":[` + strings.Repeat(`{"role":"user","content":"0123456789"},`, 10) + `{"role":"user","content":"0123456789"}]`
	for _, path := range []string{"/v1/chat/completions", "/tokenize"} {
		code, m := postJSON(t, h.ts.URL+path, "", body+`}`)
		e, _ := m["error"].(map[string]any)
		if code != 400 || e == nil || e["code"] != CodeContextLength || e["param"] != "messages" {
			t.Errorf("%s past the bound: %d %v, want 400 %s on messages", path, code, m, CodeContextLength)
		}
	}
}

// Renderings share no state: a template that sets variables and reads
// one a previous rendering set sees only its own request's messages,
// under concurrent requests.
func TestChatTemplateRendersShareNothing(t *testing.T) {
	ct, err := NewChatTemplate("{% set ns = namespace(seen='') %}{% for m in messages %}{% set ns.seen = ns.seen + m['content'] %}{% endfor %}"+
		"{{ ns.seen }}{% if last is defined %}LEAK{{ last }}{% endif %}{% set last = messages[0]['content'] %}", "", "")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := strings.Repeat(string(rune('a'+i)), 3)
			for range 20 {
				if out, err := ct.Render([]ChatMessage{{Role: "user", Content: c}}); err != nil || out != c {
					t.Errorf("%q, %v; want %q", out, err, c)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// A macro that recurses without end is an error the rendering returns
// (a Go stack overflow killed the process, every tenant's requests with
// it); one that recurses within maxMacroDepth renders as Jinja does, each
// rendering with its own depth count; a template cannot include (itself,
// to the same end) or import.
func TestChatTemplateMacroRecursionBounded(t *testing.T) {
	ct, err := NewChatTemplate("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{% if messages|length > 1 %}{{ f(0) }}{% endif %}x", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := ct.Render([]ChatMessage{{Role: "user", Content: "a"}}); err != nil || out != "x" {
		t.Fatalf("without the recursion: %q %v", out, err)
	}
	if _, err := ct.Render([]ChatMessage{{Role: "user", Content: "a"}, {Role: "user", Content: "b"}}); err == nil || !strings.Contains(err.Error(), "nested deeper than") {
		t.Fatalf("endless recursion: %v, want the depth error", err)
	}
	down, err := NewChatTemplate("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{{ n }},{% endmacro %}{{ f(messages|length) }}", "", "")
	if err != nil {
		t.Fatal(err)
	}
	msgs := func(n int) []ChatMessage { return make([]ChatMessage, n) }
	for range 3 { // the depth is each rendering's own
		out, err := down.Render(msgs(maxMacroDepth - 1)) // maxMacroDepth calls deep
		if err != nil || !strings.HasPrefix(out, "0,1,2,") || !strings.HasSuffix(out, ",254,255,") {
			t.Fatalf("%d calls deep: %.40q... %v", maxMacroDepth, out, err)
		}
	}
	if _, err := down.Render(msgs(maxMacroDepth)); err == nil {
		t.Fatalf("%d calls deep rendered", maxMacroDepth+1)
	}
	// Calls one after another do not add up: depth, not count.
	seq, err := NewChatTemplate("{% macro g() %}y{% endmacro %}{% for i in range(1000) %}{{ g() }}{% endfor %}", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := seq.Render(nil); err != nil || out != strings.Repeat("y", 1000) {
		t.Fatalf("1000 calls in a row: %d bytes, %v", len(out), err)
	}
	// A macro calling itself twice: 2^40 calls within the depth bound,
	// stopped by the count (lowered here from maxMacroCalls).
	tree, err := NewChatTemplate("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(40) }}", "", "")
	if err != nil {
		t.Fatal(err)
	}
	tree.maxCalls = 1 << 12
	start := time.Now()
	if _, err := tree.Render(nil); err == nil || !strings.Contains(err.Error(), "macro calls in one rendering") || time.Since(start) > time.Minute {
		t.Fatalf("2^40 calls: %v after %v, want the count's error", err, time.Since(start))
	}
	for _, src := range []string{
		`{% if messages|length > 1 %}{% include "/chat" %}{% endif %}x`,
		`{% import "/chat" as c %}x`, `{% from "/chat" import f %}x`, `{% extends "/chat" %}x`,
	} {
		if _, err := NewChatTemplate(src, "", ""); err == nil {
			t.Errorf("%s: parsed", src)
		}
	}
}

// A chat template's text is bounded (MaxTemplateBytes), wherever it came
// from (a model file's metadata, --chat-template): at the bound it
// parses, past it it is refused saying the size.
func TestChatTemplateSourceBounded(t *testing.T) {
	src := func(n int) string {
		return "{{ messages|length }}" + strings.Repeat("x", n-len("{{ messages|length }}"))
	}
	ct, err := NewChatTemplate(src(MaxTemplateBytes), "", "")
	if err != nil {
		t.Fatalf("a template of %d bytes: %v", MaxTemplateBytes, err)
	}
	if out, err := ct.Render(nil); err != nil || out != "0"+strings.Repeat("x", MaxTemplateBytes-len("{{ messages|length }}")) {
		t.Fatalf("a template of %d bytes renders %d bytes, %v", MaxTemplateBytes, len(out), err)
	}
	if _, err := NewChatTemplate(src(MaxTemplateBytes+1), "", ""); err == nil || !strings.Contains(err.Error(), "is 1048577 bytes, more than the 1048576 (1 MiB)") {
		t.Fatalf("a template of %d bytes: %v, want refused with its size", MaxTemplateBytes+1, err)
	}
}
