package router

import (
	"strings"
	"testing"
)

// none is a literal, as in jinja2 ("can't assign to 'const'"): a
// template cannot rebind it (the rewritten tree reads it from a server
// variable, chatnone.go).
func TestChatTemplateNoneNotAssignable(t *testing.T) {
	for _, src := range []string{"{% set none = 1 %}{{ none }}", "{% set none %}x{% endset %}{{ none }}"} {
		if _, err := NewChatTemplate(src, "", ""); err == nil || !strings.Contains(err.Error(), "cannot set none") {
			t.Errorf("%s: %v, want refused", src, err)
		}
	}
}
