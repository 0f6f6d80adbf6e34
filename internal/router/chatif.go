package router

import (
	"strings"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// gonja parses Jinja's conditional expression "A if B else C" only as the
// whole of a {{ }} output, not inside parentheses, where Hugging Face
// templates put it: Gemma 3's has
//
//	{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
//
// and gonja refuses it ("Unbalanced parenthesis"). Before parsing, every
// parenthesised "A if B else C" inside a tag becomes a call of
// ifElseFunc, ifElseFunc(B, A, C), which picks A when B is true by Jinja's
// rules and C otherwise. Both branches are evaluated (Jinja evaluates one);
// in a chat template a branch is a value, so the difference is never seen.
const ifElseFunc = "__sluice_if_else"

func ifElse(args *exec.VarArgs) *exec.Value {
	if len(args.Args) != 3 {
		return exec.AsValue(nil)
	}
	if args.Args[0].IsTrue() {
		return args.Args[1]
	}
	return args.Args[2]
}

// rewriteParenConditionals returns src with each "(A if B else C)" inside
// a Jinja tag rewritten to "(__sluice_if_else(B, A, C))", innermost first.
func rewriteParenConditionals(src string) string {
	for n := 0; n < 1000; n++ {
		o, c, a, b, e, ok := findParenConditional(src)
		if !ok {
			return src
		}
		src = src[:o+1] + ifElseFunc + "((" + strings.TrimSpace(b) + "), (" + strings.TrimSpace(a) + "), (" + strings.TrimSpace(e) + "))" + src[c:]
	}
	return src
}

// findParenConditional finds the first innermost parenthesis pair (o, c)
// inside a tag whose content is "A if B else C" at its own nesting level.
func findParenConditional(src string) (o, c int, a, b, e string, ok bool) {
	var stack []int
	inTag := false
	var quote byte
	for i := 0; i < len(src); i++ {
		ch := src[i]
		if !inTag {
			if ch == '{' && i+1 < len(src) && (src[i+1] == '{' || src[i+1] == '%') {
				inTag, stack = true, stack[:0]
				i++
			}
			continue
		}
		if quote != 0 {
			if ch == '\\' {
				i++
			} else if ch == quote {
				quote = 0
			}
			continue
		}
		switch ch {
		case '\'', '"':
			quote = ch
		case '}', '%':
			if i+1 < len(src) && src[i+1] == '}' && (ch == '%' || ch == '}') {
				inTag = false
				i++
			}
		case '(':
			stack = append(stack, i)
		case ')':
			if len(stack) == 0 {
				continue
			}
			open := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			inner := src[open+1 : i]
			if ia, ie, found := splitConditional(inner); found {
				return open, i, inner[:ia], inner[ia+2 : ie], inner[ie+4:], true
			}
		}
	}
	return 0, 0, "", "", "", false
}

// splitConditional finds the "if" and "else" keywords of s at its top
// level (outside strings and brackets), in that order.
func splitConditional(s string) (ifAt, elseAt int, ok bool) {
	depth := 0
	var quote byte
	ifAt = -1
	word := func(i int, w string) bool {
		if !strings.HasPrefix(s[i:], w) {
			return false
		}
		before := i == 0 || !isIdent(s[i-1])
		after := i+len(w) == len(s) || !isIdent(s[i+len(w)])
		return before && after
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if quote != 0 {
			if ch == '\\' {
				i++
			} else if ch == quote {
				quote = 0
			}
			continue
		}
		switch {
		case ch == '\'' || ch == '"':
			quote = ch
		case ch == '(' || ch == '[' || ch == '{':
			depth++
		case ch == ')' || ch == ']' || ch == '}':
			depth--
		case depth == 0 && ifAt < 0 && i > 0 && word(i, "if"):
			ifAt = i
		case depth == 0 && ifAt >= 0 && word(i, "else"):
			return ifAt, i, true
		}
	}
	return 0, 0, false
}

func isIdent(c byte) bool {
	return c == '_' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
