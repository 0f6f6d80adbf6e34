package router

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/nikolalohinski/gonja/v2"
	"github.com/nikolalohinski/gonja/v2/exec"
)

// gonja 2.9.1's strip family and split differ from Python's, which
// Hugging Face templates are written for (and tested with, through
// jinja2): lstrip() and rstrip() without an argument failed the
// rendering (their default was a rune, not a string), strip() knew six
// whitespace characters where Python knows Unicode's, split() without a
// separator failed, split(sep, 1) did not split and split(sep, n) made n
// parts where Python makes n+1, and rsplit() without a separator or with
// a separator longer than a byte went wrong. chatMethods puts Python's
// in their place (testdata/templates/jinja2-cases.json holds jinja2's
// renderings they are checked against).

// gonjaStrMethods are the names of gonja's string methods (v2.9.1).
var gonjaStrMethods = []string{"capitalize", "capwords", "casefold", "center", "count", "encode", "endswith",
	"expandtabs", "find", "format", "format_map", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "islower",
	"isnumeric", "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip", "partition",
	"removeprefix", "removesuffix", "replace", "rfind", "rjust", "rpartition", "rsplit", "rstrip", "split",
	"splitlines", "startswith", "strip", "swapcase", "title", "upper", "zfill"}

// chatMethods are gonja's methods with Python's strip, lstrip, rstrip,
// split and rsplit.
var chatMethods = func() exec.Methods {
	m := gonja.DefaultEnvironment.Methods
	str := map[string]exec.Method[string]{}
	for _, name := range gonjaStrMethods {
		if f, ok := m.Str.Get(name); ok {
			str[name] = f
		}
	}
	str["strip"] = stripMethod(true, true)
	str["lstrip"] = stripMethod(true, false)
	str["rstrip"] = stripMethod(false, true)
	str["split"] = splitMethod(false)
	str["rsplit"] = splitMethod(true)
	m.Str = exec.NewMethodSet(str)
	return m
}()

// pyIsSpace is Python's str.isspace for one character: Unicode's white
// space and the four ASCII separators \x1c-\x1f.
func pyIsSpace(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f }

// optString is an optional string argument: absent or none is ok false.
func optString(v *exec.Value, method, name string) (string, bool, error) {
	if v == nil || v.IsNil() {
		return "", false, nil
	}
	if !v.IsString() {
		return "", false, fmt.Errorf("%s(): %s must be a string or none, not %s", method, name, kindOf(v))
	}
	return v.String(), true, nil
}

func stripMethod(left, right bool) exec.Method[string] {
	name := map[[2]bool]string{{true, true}: "strip", {true, false}: "lstrip", {false, true}: "rstrip"}[[2]bool{left, right}]
	return func(s string, _ *exec.Value, p *exec.VarArgs) (any, error) {
		if len(p.Args) > 1 || len(p.KwArgs) > 0 {
			return nil, fmt.Errorf("%s() takes at most one argument, the characters to strip", name)
		}
		cut := pyIsSpace
		if len(p.Args) == 1 {
			chars, ok, err := optString(p.Args[0], name, "chars")
			if err != nil {
				return nil, err
			}
			if ok {
				cut = func(r rune) bool { return strings.ContainsRune(chars, r) }
			}
		}
		if left {
			s = strings.TrimLeftFunc(s, cut)
		}
		if right {
			s = strings.TrimRightFunc(s, cut)
		}
		return s, nil
	}
}

// splitArgs reads (sep=None, maxsplit=-1) by position or keyword.
func splitArgs(name string, p *exec.VarArgs) (sep string, bySep bool, maxsplit int, err error) {
	maxsplit = -1
	if len(p.Args) > 2 {
		return "", false, 0, fmt.Errorf("%s() takes at most 2 arguments (sep, maxsplit)", name)
	}
	var sepV, maxV *exec.Value
	if len(p.Args) > 0 {
		sepV = p.Args[0]
	}
	if len(p.Args) > 1 {
		maxV = p.Args[1]
	}
	for k, v := range p.KwArgs {
		switch {
		case k == "sep" && sepV == nil:
			sepV = v
		case k == "maxsplit" && maxV == nil:
			maxV = v
		default:
			return "", false, 0, fmt.Errorf("%s(): unexpected argument %s", name, k)
		}
	}
	if sep, bySep, err = optString(sepV, name, "sep"); err != nil {
		return "", false, 0, err
	}
	if bySep && sep == "" {
		return "", false, 0, fmt.Errorf("%s(): empty separator", name)
	}
	if maxV != nil {
		if !maxV.IsInteger() {
			return "", false, 0, fmt.Errorf("%s(): maxsplit must be an integer, not %s", name, kindOf(maxV))
		}
		maxsplit = maxV.Integer()
	}
	return sep, bySep, maxsplit, nil
}

func splitMethod(fromRight bool) exec.Method[string] {
	name := "split"
	if fromRight {
		name = "rsplit"
	}
	return func(s string, _ *exec.Value, p *exec.VarArgs) (any, error) {
		sep, bySep, maxsplit, err := splitArgs(name, p)
		if err != nil {
			return nil, err
		}
		var parts []string
		switch {
		case !bySep && fromRight:
			parts = rsplitSpace(s, maxsplit)
		case !bySep:
			parts = splitSpace(s, maxsplit)
		case maxsplit < 0:
			parts = strings.Split(s, sep)
		case fromRight:
			parts = rsplitSep(s, sep, maxsplit)
		default:
			parts = strings.SplitN(s, sep, maxsplit+1)
		}
		out := make([]any, len(parts))
		for i, x := range parts {
			out[i] = x
		}
		return out, nil
	}
}

// splitSpace is Python's s.split(None, maxsplit): runs of white space
// separate, none at either end makes an empty part; after maxsplit
// splits the rest (from its first non-space character) is the last part.
func splitSpace(s string, maxsplit int) []string {
	var out []string
	for {
		s = strings.TrimLeftFunc(s, pyIsSpace)
		if s == "" {
			return out
		}
		if maxsplit == 0 {
			return append(out, s)
		}
		end := strings.IndexFunc(s, pyIsSpace)
		if end < 0 {
			return append(out, s)
		}
		out = append(out, s[:end])
		s = s[end:]
		maxsplit--
	}
}

// rsplitSpace is splitSpace from the right.
func rsplitSpace(s string, maxsplit int) []string {
	var out []string
	for {
		s = strings.TrimRightFunc(s, pyIsSpace)
		if s == "" {
			break
		}
		if maxsplit == 0 {
			out = append(out, s)
			break
		}
		start := strings.LastIndexFunc(s, pyIsSpace)
		if start < 0 {
			out = append(out, s)
			break
		}
		_, size := utf8.DecodeRuneInString(s[start:])
		out = append(out, s[start+size:])
		s = s[:start]
		maxsplit--
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// rsplitSep is Python's s.rsplit(sep, maxsplit) for maxsplit >= 0.
func rsplitSep(s, sep string, maxsplit int) []string {
	var out []string
	for ; maxsplit > 0; maxsplit-- {
		i := strings.LastIndex(s, sep)
		if i < 0 {
			break
		}
		out = append(out, s[i+len(sep):])
		s = s[:i]
	}
	out = append(out, s)
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// splitParts bounds the parts s.split(...)/rsplit(...) makes (what
// budgetStrMethod charges before it runs).
func splitParts(s string, p *exec.VarArgs) int64 {
	sep, bySep, maxsplit, err := splitArgs("split", p)
	if err != nil {
		return 0
	}
	n := int64(len(s)/2 + 1)
	if bySep {
		n = int64(strings.Count(s, sep) + 1)
	}
	if maxsplit >= 0 {
		n = min(n, int64(maxsplit)+1)
	}
	return n
}
