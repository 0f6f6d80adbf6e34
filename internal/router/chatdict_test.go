package router

import (
	"errors"
	"strconv"
	"testing"
)

// bigTool is a tool-like value whose size is deep: one key at the top,
// n items below it (a tool's parameters).
func bigTool(n int) map[string]any {
	props := make(map[string]any, n)
	for i := range n {
		props["p"+strconv.Itoa(i)] = map[string]any{"type": "string"}
	}
	return map[string]any{"parameters": map[string]any{"properties": props}}
}

// d.items(), d.keys(), d.values(), d.get(k) and d.copy() copy the whole
// dict first (gonja's evaluator turns it into a Go map, nested values
// too): each is charged every item at every depth, so a template calling
// one on a large value once per message stops at the step bound. The
// dict here has one key at the top and 600 items below it: charged its
// top level only, 120 calls would fit.
func TestChatTemplateDictMethodsBounded(t *testing.T) {
	d := bigTool(300) // 1 + 1 + 300 + 300 items
	for _, call := range []string{"items()", "keys()", "values()", "get('parameters')", "copy()"} {
		ct, err := NewChatTemplate("{% for m in messages %}{% set _ = d."+call+" %}{% endfor %}x", "", "")
		if err != nil {
			t.Fatal(err)
		}
		ct.maxSteps = 10_000
		o := RenderOptions{Kwargs: map[string]any{"d": d}}
		for range 2 { // the count is each rendering's own
			if out, err := ct.RenderWith(make([]ChatMessage, 12), o); err != nil || out != "x" {
				t.Fatalf("d.%s 12 times: %q %v", call, out, err)
			}
		}
		if out, err := ct.RenderWith(make([]ChatMessage, 20), o); !errors.Is(err, ErrTemplateTooMuchWork) {
			t.Errorf("d.%s 20 times: %q %v, want ErrTemplateTooMuchWork", call, out, err)
		}
	}
}

// == and in compare two dicts or lists at every depth: charged every
// item compared, not the top level's count (one key here, 600 items
// below).
func TestChatTemplateNestedEqBounded(t *testing.T) {
	for _, c := range []struct{ name, src string }{
		{"==", "{% for m in messages %}{% if d == e %}{% endif %}{% endfor %}x"},
		{"!=", "{% for m in messages %}{% if d != e %}t{% endif %}{% endfor %}x"},
		{"in", "{% for m in messages %}{% if d in [e] %}{% endif %}{% endfor %}x"},
		{"list ==", "{% for m in messages %}{% if [d] == [e] %}{% endif %}{% endfor %}x"},
	} {
		ct, err := NewChatTemplate(c.src, "", "")
		if err != nil {
			t.Fatal(err)
		}
		ct.maxSteps = 10_000
		o := RenderOptions{Kwargs: map[string]any{"d": bigTool(300), "e": bigTool(300)}}
		if out, err := ct.RenderWith(make([]ChatMessage, 6), o); err != nil || out != "x" {
			t.Fatalf("%s 6 times: %q %v", c.name, out, err)
		}
		if out, err := ct.RenderWith(make([]ChatMessage, 20), o); !errors.Is(err, ErrTemplateTooMuchWork) {
			t.Errorf("%s 20 times: %q %v, want ErrTemplateTooMuchWork", c.name, out, err)
		}
	}
}

// The dict methods answer as gonja's own (the rewriting charges them,
// nothing else): on a list, copy() is the list's; a method a value does
// not have is an error, as before.
func TestChatTemplateDictMethodsAnswer(t *testing.T) {
	ct, err := NewChatTemplate("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{{ d.keys()|join(',') }}|{{ d.values()|length }}|{{ d.get('a') }}{{ d.get('z', 'none') }}|{{ [1, 2].copy() }}|{{ d.copy() == d }}", "", "")
	if err != nil {
		t.Fatal(err)
	}
	o := RenderOptions{Kwargs: map[string]any{"d": map[string]any{"b": []any{1, 2}, "a": 1}}}
	if out, err := ct.RenderWith(nil, o); err != nil || out != "a=1;b=[1, 2];a,b|2|1none|[1, 2]|True" {
		t.Fatalf("%q %v", out, err)
	}
	for _, src := range []string{"{{ 'ab'.items() }}", "{{ [1].keys() }}", "{{ x.items() }}"} {
		ct, err := NewChatTemplate(src, "", "")
		if err != nil {
			t.Fatal(err)
		}
		if out, err := ct.RenderWith(nil, o); err == nil {
			t.Errorf("%s: %q, want an error", src, out)
		}
	}
}
