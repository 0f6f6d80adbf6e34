package router

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// jinja2ToolsCase is one case of testdata/templates/jinja2-tools-cases.json:
// a template (a file of testdata/templates or its text), a request body
// as a client writes it, and what Hugging Face's apply_chat_template
// renders of it (scripts/jinja2-tools-cases.py).
type jinja2ToolsCase struct {
	Name     string  `json:"name"`
	Template string  `json:"template"`
	Src      string  `json:"src"`
	Body     string  `json:"body"`
	Want     *string `json:"want"`
	Error    string  `json:"error"`
}

// A request's tools, tool calls and template variables reach the
// template in the order the client wrote their keys, and tojson writes
// them as Hugging Face's does (json.dumps: ", " and ": ", no ASCII or
// HTML escaping, Python's numbers: 1.0 stays 1.0, 1e21 is 1e+21, a
// 20-digit integer keeps its digits): the real templates (Qwen3 with
// tools and multi-turn tool calls, Gemma 3) and templates walking
// .items(), .keys(), .values() and "for k in d" render byte for byte as
// jinja2 does. Each case goes through the request parsing a chat
// request goes through.
func TestChatTemplateToolsAsHF(t *testing.T) {
	b, err := os.ReadFile("../../testdata/templates/jinja2-tools-cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Generator string            `json:"generator"`
		Cases     []jinja2ToolsCase `json:"cases"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Cases) < 8 || !strings.Contains(doc.Generator, "jinja2") {
		t.Fatalf("%d cases from %q", len(doc.Cases), doc.Generator)
	}
	for _, c := range doc.Cases {
		src := c.Src
		if c.Template != "" {
			b, err := os.ReadFile("../../testdata/templates/" + c.Template)
			if err != nil {
				t.Fatal(err)
			}
			src = string(b)
		}
		var req struct {
			Messages json.RawMessage `json:"messages"`
			Tools    json.RawMessage `json:"tools"`
			Kwargs   json.RawMessage `json:"chat_template_kwargs"`
		}
		if err := json.Unmarshal([]byte(c.Body), &req); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		msgs, e := parseMessages(req.Messages)
		if e != nil {
			t.Fatalf("%s: messages: %v", c.Name, e)
		}
		tools, _, e := parseTools(req.Tools, nil, schemaCheck{})
		if e != nil {
			t.Fatalf("%s: tools: %v", c.Name, e)
		}
		kw, e := parseTemplateKwargs(req.Kwargs)
		if e != nil {
			t.Fatalf("%s: kwargs: %v", c.Name, e)
		}
		ct, err := NewChatTemplate(src, "", "")
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		out, err := ct.RenderWith(msgs, RenderOptions{Tools: tools.render, Kwargs: kw})
		switch {
		case c.Error != "" && err == nil:
			t.Errorf("%s: renders %q; jinja2 refuses it (%s)", c.Name, out, c.Error)
		case c.Want != nil && err != nil:
			t.Errorf("%s: %v", c.Name, err)
		case c.Want != nil && out != *c.Want:
			t.Errorf("%s:\n%s", c.Name, lineDiff(*c.Want, out))
		}
	}
}

// lineDiff shows the first lines where got differs from want.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < max(len(w), len(g)) && shown < 6; i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			shown++
			fmt.Fprintf(&b, "line %d:\n  jinja2: %s\n  sluice: %s\n", i+1, wl, gl)
		}
	}
	return b.String()
}

// bigOrderedTool is bigTool as a request's tool reaches the template: a
// JSON object decoded in order, n properties below one key.
func bigOrderedTool(t *testing.T, n int) any {
	t.Helper()
	var b strings.Builder
	b.WriteString(`{"parameters": {"properties": {`)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, `"p%d": {"type": "string"}`, i)
	}
	b.WriteString(`}}}`)
	v, err := decodeOrdered([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A request's dicts keep their order and every charge of a map: the
// dict methods (every item at every depth), a loop over a dict's keys
// (its items), tojson (its text, before it is written). A template doing
// one of them on a large tool once per message stops at the step bound
// or the build bound, as with the maps gonja sorts.
func TestChatTemplateOrderedDictsBounded(t *testing.T) {
	for _, c := range []struct {
		body string
		n    int
	}{
		{"{% set _ = d.items() %}", 300}, {"{% set _ = d.keys() %}", 300}, {"{% set _ = d.values() %}", 300},
		{"{% set _ = d.get('parameters') %}", 300}, {"{% set _ = d.copy() %}", 300},
		{"{% for k in d.parameters.properties %}{% endfor %}", 600},
		{"{% for k, v in d.parameters.properties.items() %}{% endfor %}", 200},
	} {
		ct, err := NewChatTemplate("{% set d = tools[0] %}{% for m in messages %}"+c.body+"{% endfor %}x", "", "")
		if err != nil {
			t.Fatal(err)
		}
		ct.maxSteps = 10_000
		o := RenderOptions{Tools: []any{bigOrderedTool(t, c.n)}}
		if out, err := ct.RenderWith(make([]ChatMessage, 12), o); err != nil || out != "x" {
			t.Fatalf("%s 12 times: %q %v", c.body, out, err)
		}
		if out, err := ct.RenderWith(make([]ChatMessage, 20), o); !errors.Is(err, ErrTemplateTooMuchWork) {
			t.Errorf("%s 20 times: %q %v, want ErrTemplateTooMuchWork", c.body, out, err)
		}
	}
	ct, err := NewChatTemplate("{% for m in messages %}{% set _ = tools[0]|tojson %}{% endfor %}x", "", "")
	if err != nil {
		t.Fatal(err)
	}
	ct.maxBuilt = 1 << 20
	o := RenderOptions{Tools: []any{bigOrderedTool(t, 2000)}} // about 60 KiB of text, charged 6 times
	if out, err := ct.RenderWith(make([]ChatMessage, 2), o); err != nil || out != "x" {
		t.Fatalf("tojson twice: %q %v", out, err)
	}
	if out, err := ct.RenderWith(make([]ChatMessage, 20), o); !errors.Is(err, ErrRenderTooLarge) {
		t.Errorf("tojson 20 times: %q %v, want ErrRenderTooLarge", out, err)
	}
}

// decodeOrdered reads JSON as Python's json.loads does: keys in their
// order (a repeated key keeps its first place and takes its last value),
// integers as int, digits past int64 kept, other numbers as float64.
func TestDecodeOrdered(t *testing.T) {
	v, err := decodeOrdered([]byte(`{"b": 1, "a": [1.0, 1E2, 12345678901234567890, -0], "b": {"z": null, "y": true}}`))
	if err != nil {
		t.Fatal(err)
	}
	o, ok := v.(*jsonObject)
	if !ok || strings.Join(o.keys, ",") != "b,a" {
		t.Fatalf("%#v", v)
	}
	if b, ok := o.vals["b"].(*jsonObject); !ok || strings.Join(b.keys, ",") != "z,y" {
		t.Errorf("b = %#v, want the last value {z, y}", o.vals["b"])
	}
	want := []any{1.0, 100.0, pyBigInt("12345678901234567890"), 0}
	if got := o.vals["a"].([]any); fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", want) {
		t.Errorf("a = %#v, want %#v", got, want)
	}
	for _, bad := range []string{`{"a": 1`, `{"a": 1} x`, `[1,]`} {
		if _, err := decodeOrdered([]byte(bad)); err == nil {
			t.Errorf("%s: decoded", bad)
		}
	}
}
