package router

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

// jinja2Case is one case of testdata/templates/jinja2-cases.json: a
// template, its messages and extra variables, and what jinja2 makes of
// it as Hugging Face renders (scripts/jinja2-cases.py): the text, or the
// exception's class name.
type jinja2Case struct {
	Name     string           `json:"name"`
	Src      string           `json:"src"`
	Messages []map[string]any `json:"messages"`
	Vars     map[string]any   `json:"vars"`
	Want     *string          `json:"want"`
	Error    string           `json:"error"`
	// RefusedAtLoad marks a template jinja2 renders that sluice refuses
	// when it reads it (a mutating call in a branch not taken), and why.
	RefusedAtLoad string `json:"refused_at_load"`
}

// Templates render as jinja2 renders them, or are refused where jinja2
// refuses them: Python's strip()/lstrip()/rstrip() and split()/rsplit()
// (gonja's failed without an argument and split on the wrong counts),
// an integer index on a dict (the key, else undefined; gonja failed),
// and the methods that change a list or a dict in place (jinja2's
// sandbox refuses them; gonja did some and silently skipped others),
// which sluice refuses when it reads the template.
func TestChatTemplateAsJinja2(t *testing.T) {
	b, err := os.ReadFile("../../testdata/templates/jinja2-cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Generator string       `json:"generator"`
		Cases     []jinja2Case `json:"cases"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Cases) < 30 || !strings.Contains(doc.Generator, "jinja2") {
		t.Fatalf("%d cases from %q", len(doc.Cases), doc.Generator)
	}
	for _, c := range doc.Cases {
		msgs := []ChatMessage{{Role: "user", Content: "ab"}}
		if c.Messages != nil {
			msgs = msgs[:0]
			for _, m := range c.Messages {
				msgs = append(msgs, ChatMessage{Role: m["role"].(string), Content: m["content"].(string)})
			}
		}
		ct, loadErr := NewChatTemplate(c.Src, "", "")
		switch {
		case c.Error == "SecurityError" || c.RefusedAtLoad != "":
			// A call that changes a value in place: refused when read,
			// naming the method.
			if loadErr == nil || !strings.Contains(loadErr.Error(), "in place") {
				t.Errorf("%s: loads (%v); jinja2: %s%s, want refused at load", c.Name, loadErr, c.Error, c.RefusedAtLoad)
			}
			continue
		case loadErr != nil:
			t.Errorf("%s: %v", c.Name, loadErr)
			continue
		}
		out, err := ct.RenderWith(msgs, RenderOptions{Kwargs: c.Vars})
		switch {
		case c.Error != "" && err == nil:
			t.Errorf("%s: renders %q; jinja2 refuses it (%s)", c.Name, out, c.Error)
		case c.Want != nil && (err != nil || out != *c.Want):
			t.Errorf("%s: %q, %v; jinja2 renders %q", c.Name, out, err, *c.Want)
		}
	}
}

// split() makes a list of up to half its string's length: charged to the
// build budget before it is made (a 1 MiB message split on every
// character is 16 MiB of list, once per loop step).
func TestChatTemplateSplitCounted(t *testing.T) {
	ct, err := NewChatTemplate("{% for i in range(n) %}{% set _ = messages[0].content.split() %}{% set _ = messages[0].content.rsplit(' ') %}{% endfor %}x", "", "")
	if err != nil {
		t.Fatal(err)
	}
	ct.maxBuilt = 1 << 20
	msgs := []ChatMessage{{Role: "user", Content: strings.Repeat("a ", 1000)}} // 1,000 parts: 16,000 bytes a split
	if out, err := ct.RenderWith(msgs, RenderOptions{Kwargs: map[string]any{"n": 20}}); err != nil || out != "x" {
		t.Fatalf("40 splits: %q %v", out, err)
	}
	if out, err := ct.RenderWith(msgs, RenderOptions{Kwargs: map[string]any{"n": 40}}); !errors.Is(err, ErrRenderTooLarge) {
		t.Fatalf("80 splits: %q %v, want ErrRenderTooLarge", out, err)
	}
}

// Every string method is charged what it goes over before it runs:
// upper() copies its string, startswith() and find() read it; in a loop
// of range(n) over a long message they were n times its length with
// nothing counted (2,000 upper() of 256 KiB took 23 s).
func TestChatTemplateStrMethodsCounted(t *testing.T) {
	for _, call := range []string{"upper()", "startswith(messages[1].content)", "find('b')", "isspace()", "count('a')"} {
		ct, err := NewChatTemplate("{% for i in range(n) %}{% set _ = messages[0].content."+call+" %}{% endfor %}x", "", "")
		if err != nil {
			t.Fatal(err)
		}
		ct.maxBuilt = 1 << 20
		msgs := []ChatMessage{{Role: "user", Content: strings.Repeat("a", 16<<10)}, {Role: "user", Content: strings.Repeat("a", 16<<10)}}
		if out, err := ct.RenderWith(msgs, RenderOptions{Kwargs: map[string]any{"n": 40}}); err != nil || out != "x" {
			t.Fatalf("%s 40 times: %q %v", call, out, err)
		}
		if out, err := ct.RenderWith(msgs, RenderOptions{Kwargs: map[string]any{"n": 80}}); !errors.Is(err, ErrRenderTooLarge) {
			t.Errorf("%s 80 times: %q %v, want ErrRenderTooLarge", call, out, err)
		}
	}
}

// Every function the rewritten tree calls is a variable a request's
// chat_template_kwargs may not replace (a kwarg named __sluice_item
// replaced x[k] for the whole rendering).
func TestTemplateFuncsReserved(t *testing.T) {
	for name := range budgetFuncs {
		if !ReservedTemplateVars[name] {
			t.Errorf("%s is not in ReservedTemplateVars", name)
		}
		if _, e := parseTemplateKwargs([]byte(`{"` + name + `": 1}`)); e == nil {
			t.Errorf("chat_template_kwargs may set %s", name)
		}
	}
}
