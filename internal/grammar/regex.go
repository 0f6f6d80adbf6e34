package grammar

import (
	"fmt"
	"regexp/syntax"
	"unicode"
	"unicode/utf8"
)

// regex compiles a pattern to the items of a JSON string's content: each
// character the pattern matches is written as JSON needs it ('"', '\' and
// controls escaped). A JSON Schema pattern is not anchored: unless it
// starts with ^ (ends with $) any text may come before (after) a match.
// The pattern is parsed by Go's regexp/syntax (RE2: no backreferences or
// lookaround, so no exponential pattern exists), which also bounds
// nesting and repetition counts; the grammar budget bounds the rest.
func (c *compiler) regex(pattern string, anchored bool) ([]item, *Error) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		if e, ok := err.(*syntax.Error); ok && (e.Code == syntax.ErrNestingDepth || e.Code == syntax.ErrLarge || e.Code == syntax.ErrInvalidRepeatSize) {
			return nil, errLimit("pattern_too_complex", "the pattern %q is too complex: %v", pattern, err)
		}
		return nil, &Error{Code: "invalid_schema", Msg: fmt.Sprintf("the pattern %q is not a valid regular expression: %v", pattern, err)}
	}
	subs, begin, end := splitAnchors(re, anchored)
	var out []item
	if !begin {
		out = append(out, c.b.star([]item{c.stringChar()}))
	}
	for _, s := range subs {
		x, e := c.re(s)
		if e != nil {
			return nil, e
		}
		out = append(out, x...)
	}
	if !end {
		out = append(out, c.b.star([]item{c.stringChar()}))
	}
	if c.failed() {
		return nil, c.err
	}
	return out, nil
}

// splitAnchors is a parsed pattern's parts without its leading ^ and
// trailing $, and whether it has each (or anchored says both apply).
func splitAnchors(re *syntax.Regexp, anchored bool) (subs []*syntax.Regexp, begin, end bool) {
	subs = []*syntax.Regexp{re}
	if re.Op == syntax.OpConcat {
		subs = re.Sub
	}
	begin, end = anchored, anchored
	if len(subs) > 0 && (subs[0].Op == syntax.OpBeginText || subs[0].Op == syntax.OpBeginLine) {
		begin, subs = true, subs[1:]
	}
	if len(subs) > 0 && (subs[len(subs)-1].Op == syntax.OpEndText || subs[len(subs)-1].Op == syntax.OpEndLine) {
		end, subs = true, subs[:len(subs)-1]
	}
	return subs, begin, end
}

func (c *compiler) re(r *syntax.Regexp) ([]item, *Error) {
	if c.failed() {
		return nil, c.err
	}
	switch r.Op {
	case syntax.OpEmptyMatch:
		return nil, nil
	case syntax.OpLiteral:
		var out []item
		for _, ch := range r.Rune {
			if r.Flags&syntax.FoldCase != 0 {
				var cls []rune
				for f := ch; ; {
					cls = append(cls, f, f)
					if f = unicode.SimpleFold(f); f == ch {
						break
					}
				}
				out = append(out, c.charClass(cls)...)
			} else {
				out = append(out, c.charClass([]rune{ch, ch})...)
			}
		}
		return out, nil
	case syntax.OpCharClass:
		if len(r.Rune) == 0 {
			return nil, &Error{Code: "invalid_schema", Msg: "the pattern has a character class that matches nothing"}
		}
		return c.charClass(r.Rune), nil
	case syntax.OpAnyCharNotNL:
		return c.charClass([]rune{0, '\n' - 1, '\n' + 1, unicode.MaxRune}), nil
	case syntax.OpAnyChar:
		return c.charClass([]rune{0, unicode.MaxRune}), nil
	case syntax.OpCapture:
		return c.re(r.Sub[0])
	case syntax.OpConcat:
		var out []item
		for _, s := range r.Sub {
			x, e := c.re(s)
			if e != nil {
				return nil, e
			}
			out = append(out, x...)
		}
		return out, nil
	case syntax.OpAlternate:
		var alts [][]item
		for _, s := range r.Sub {
			x, e := c.re(s)
			if e != nil {
				return nil, e
			}
			alts = append(alts, x)
		}
		return []item{ref(c.b.rule(alts...))}, nil
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		x, e := c.re(r.Sub[0])
		if e != nil {
			return nil, e
		}
		// A repeated sub-pattern becomes one rule, so x{5} costs five
		// references, not five copies.
		if len(x) > 1 {
			x = []item{ref(c.b.rule(x))}
		}
		lo, hi := 0, -1
		switch r.Op {
		case syntax.OpPlus:
			lo = 1
		case syntax.OpQuest:
			hi = 1
		case syntax.OpRepeat:
			lo, hi = r.Min, r.Max
		}
		out := c.b.repeat(x, lo, hi)
		if c.failed() {
			return nil, &Error{Code: "pattern_too_complex", Msg: "the pattern's repetitions expand beyond the allowed grammar size"}
		}
		return out, nil
	}
	return nil, &Error{Code: "unsupported_schema", Msg: fmt.Sprintf("the pattern construct %q is not supported (anchors only at the ends; no word boundaries)", r.String())}
}

// charClass is one character of the class given as rune range pairs,
// written as it appears inside a JSON string.
func (c *compiler) charClass(ranges []rune) []item {
	var alts [][]item
	var ascii byteSet
	for i := 0; i+1 < len(ranges); i += 2 {
		lo, hi := ranges[i], ranges[i+1]
		for ch := lo; ch <= min(hi, 0x7f); ch++ {
			switch {
			case ch == '"' || ch == '\\':
				alts = append(alts, c.b.lit(`\`+string(ch)))
			case ch < 0x20:
				alts = append(alts, c.b.lit(escapeControl(ch)))
			default:
				ascii.add(byte(ch))
			}
		}
		if hi >= 0x80 {
			utf8Ranges(max(lo, 0x80), hi, func(l, h []byte) {
				var a []item
				for j := range l {
					a = append(a, c.b.class(digitClass(l[j], h[j])))
				}
				alts = append(alts, a)
			})
		}
	}
	if ascii.count() > 0 {
		alts = append([][]item{{c.b.class(ascii)}}, alts...)
	}
	if len(alts) == 1 {
		return alts[0]
	}
	return []item{ref(c.b.rule(alts...))}
}

func escapeControl(ch rune) string {
	switch ch {
	case '\b':
		return `\b`
	case '\f':
		return `\f`
	case '\n':
		return `\n`
	case '\r':
		return `\r`
	case '\t':
		return `\t`
	}
	return fmt.Sprintf(`\u%04x`, ch)
}

// utf8Ranges calls emit with byte-range sequences (lo[i]..hi[i] at each
// position) whose union is the UTF-8 encodings of the runes lo..hi,
// surrogates excluded (Russ Cox's utf8-ranges construction).
func utf8Ranges(lo, hi rune, emit func(lo, hi []byte)) {
	if lo > hi {
		return
	}
	if lo < 0xD800 && hi > 0xDFFF {
		utf8Ranges(lo, 0xD7FF, emit)
		utf8Ranges(0xE000, hi, emit)
		return
	}
	if lo >= 0xD800 && lo <= 0xDFFF {
		utf8Ranges(0xE000, hi, emit)
		return
	}
	if hi >= 0xD800 && hi <= 0xDFFF {
		utf8Ranges(lo, 0xD7FF, emit)
		return
	}
	for _, m := range []rune{0x7F, 0x7FF, 0xFFFF} {
		if lo <= m && hi > m {
			utf8Ranges(lo, m, emit)
			utf8Ranges(m+1, hi, emit)
			return
		}
	}
	if hi <= 0x7F {
		emit([]byte{byte(lo)}, []byte{byte(hi)})
		return
	}
	for i := 1; i < 4; i++ {
		m := rune(1)<<(6*i) - 1
		if lo&^m != hi&^m {
			if lo&m != 0 {
				utf8Ranges(lo, lo|m, emit)
				utf8Ranges((lo|m)+1, hi, emit)
				return
			}
			if hi&m != m {
				utf8Ranges(lo, (hi&^m)-1, emit)
				utf8Ranges(hi&^m, hi, emit)
				return
			}
		}
	}
	a := make([]byte, 4)
	b := make([]byte, 4)
	n := utf8.EncodeRune(a, lo)
	utf8.EncodeRune(b, hi)
	emit(a[:n], b[:n])
}
