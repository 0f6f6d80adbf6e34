package router

import (
	"regexp"
	"strings"
)

// markInlineTags returns src with a "+" after the "{%" or "{#" of each
// block or comment tag that does not start its line (only spaces or tabs
// before it since the last newline): lstrip_blocks leaves those alone.
//
// jinja2's lstrip_blocks strips the spaces and tabs before a tag only
// from the start of a line ("  {% if %}"). gonja 2.9.1 strips any run of
// them that is all the text since the previous tag, so "{{ x }} {% endfor %}"
// lost its space: a template looping "{{ name }} {% endfor %}" wrote the
// names run together where Hugging Face's rendering separates them. "{%+"
// is Jinja's own way to keep that whitespace, which gonja honours. Tags
// are found as gonja's lexer finds them: the text inside {{ }}, {% %} and
// {# #} (strings included) and inside {% raw %} is never changed.
func markInlineTags(src string) string {
	var b strings.Builder
	lineStart := true // only spaces or tabs since the last newline
	for i := 0; i < len(src); {
		c := src[i]
		if c != '{' || i+1 == len(src) || !strings.ContainsRune("{%#", rune(src[i+1])) {
			switch c {
			case '\n':
				lineStart = true
			case ' ', '\t':
			default:
				lineStart = false
			}
			b.WriteByte(c)
			i++
			continue
		}
		kind := src[i+1]
		end := tagEnd(src, i+2, kind)
		b.WriteString(src[i : i+2])
		if kind != '{' && !lineStart && (i+2 == len(src) || src[i+2] != '-' && src[i+2] != '+') {
			b.WriteByte('+')
		}
		if kind == '%' && isRawTag(src[i+2:end]) {
			// Its text runs to {% endraw %}, tags or not.
			if loc := rawEnd.FindStringIndex(src[end:]); loc != nil {
				end += loc[1]
			} else {
				end = len(src)
			}
		}
		b.WriteString(src[i+2 : end])
		lineStart = false
		i = end
	}
	return b.String()
}

// rawEnd ends a {% raw %} block (gonja's lexer's expression), through
// the tag's close.
var rawEnd = regexp.MustCompile(`\{%[-+]?\s*endraw\s*[-+]?%\}`)

// tagEnd is the end of the tag whose text starts at i ({{, {% or {# of
// kind before it): past its closing }}, %} or #}, skipping quoted strings
// inside {{ }} and {% %}; len(src) when it does not close.
func tagEnd(src string, i int, kind byte) int {
	closing := map[byte]string{'{': "}}", '%': "%}", '#': "#}"}[kind]
	var quote byte
	for ; i < len(src); i++ {
		c := src[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
		case kind != '#' && (c == '\'' || c == '"'):
			quote = c
		case strings.HasPrefix(src[i:], closing):
			return i + len(closing)
		}
	}
	return len(src)
}

// isRawTag reports whether a block tag's text (after "{%") is "raw".
func isRawTag(text string) bool {
	text = strings.TrimPrefix(strings.TrimPrefix(text, "-"), "+")
	text = strings.TrimSuffix(strings.TrimSuffix(text, "%}"), "-")
	text = strings.TrimSuffix(text, "+")
	return strings.TrimSpace(text) == "raw"
}
