package router

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/exec"
)

// Printing a value. jinja2 writes a dict or a list two ways: {{ x }},
// x|string and 'text' ~ x as Python's str() does (its items' repr:
// reprText), and tojson as json.dumps does (templateToJSON). Both walk
// the value alike (dicts in their order: orderedPairs; nesting bounded
// by maxSizeDepth) and differ only in how they write its leaves and its
// keys: one walker (pyPrinter), two leaf writers (pyRepr, pyJSON).
//
// What is printed is charged (room): a string's repr can be four times
// its bytes (\x01 for a control byte), more than the sizer's bound the
// caller charged before printing, so the printer stops as soon as its
// text passes what the caller charged plus what the rendering has left,
// and the caller charges the rest (printed).

// pyLeaves writes the leaves of a printed value.
type pyLeaves interface {
	none() string
	boolean(bool) string
	float(float64) string
	// quote is the quote s is written in.
	quote(s string) byte
	// char writes r of a string quoted in q; invalid a byte that is
	// not UTF-8.
	char(b *strings.Builder, r rune, q byte)
	invalid(b *strings.Builder, c byte)
	// key writes a dict's key.
	key(p *pyPrinter, k any, depth int) error
	// cannot is the error for a value of kind k.
	cannot(k reflect.Kind) error
	// seq is how a sequence of n items of kind k opens and closes, ok
	// false when it cannot be written.
	seq(k seqKind, n int) (open, close string, ok bool)
}

// seqKind is what a sequence is to Python.
type seqKind int

const (
	seqList seqKind = iota
	seqTuple
	seqItems
	seqKeys
	seqValues
)

var seqNames = [...]string{"list", "tuple", "dict_items", "dict_keys", "dict_values"}

// pyTuple is a tuple: a template's (a, b), a dict's item in d.items()
// and d|items. A list to gonja (and to tojson); printed (a, b), (a,).
type pyTuple []any

// dictItems, dictKeys and dictValues are what d.items(), d.keys() and
// d.values() give: lists to gonja, printed as Python prints a dict's
// views: dict_items([('a', 1)]), dict_keys(['a']), dict_values([1]).
// json.dumps refuses them, as Python's does.
type (
	dictItems  []any
	dictKeys   []any
	dictValues []any
)

var seqTypes = map[reflect.Type]seqKind{
	reflect.TypeFor[pyTuple](): seqTuple, gonjaTuple: seqTuple,
	reflect.TypeFor[dictItems](): seqItems, reflect.TypeFor[dictKeys](): seqKeys, reflect.TypeFor[dictValues](): seqValues,
}

// gonjaTuple is the type of the pairs gonja's dictsort and items filters
// make (unexported: taken from what its items filter gives).
var gonjaTuple = func() reflect.Type {
	f, ok := builtins.Filters.Get("items")
	if !ok {
		panic("gonja has no items filter")
	}
	out := f(nil, exec.AsValue(map[string]any{"k": 1}), &exec.VarArgs{})
	if !out.IsList() || out.Len() != 1 {
		panic(fmt.Sprintf("gonja's items filter gave %v", out))
	}
	return out.Val.Index(0).Type()
}()

// pyPrinter walks a value and writes it with its leaves' writer.
type pyPrinter struct {
	st     *renderState
	b      strings.Builder
	leaves pyLeaves
	// sortKeys, indented, indent, itemSep, keySep: json.dumps's layout
	// (Python's str() is ", " and ": " on one line).
	sortKeys, indented      bool
	indent, itemSep, keySep string
	// room is how long the text may grow; < 0: no bound (its size was
	// charged in full before, as tojson's is).
	room int64
}

// strCheck is how many bytes of a string are written between two looks
// at the room left.
const strCheck = 64 << 10

// full fails once the text has grown past room, ending the rendering
// (charge past what is left).
func (p *pyPrinter) full() error {
	if p.room >= 0 && int64(p.b.Len()) > p.room {
		return p.st.charge(p.st.left() + 1)
	}
	return nil
}

func (p *pyPrinter) newline(depth int) {
	if p.indented {
		p.b.WriteByte('\n')
		for range depth {
			p.b.WriteString(p.indent)
		}
	}
}

func (p *pyPrinter) value(v reflect.Value, depth int) error {
	if depth > maxSizeDepth {
		return errors.New("nested too deep")
	}
	if err := p.full(); err != nil {
		return err
	}
	for v.IsValid() && (v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer) {
		if v.IsNil() {
			p.b.WriteString(p.leaves.none())
			return nil
		}
		if v.CanInterface() {
			switch x := v.Interface().(type) {
			case *exec.Value:
				return p.value(x.Val, depth)
			case *exec.Dict:
				return p.dict(exec.AsValue(x), depth)
			}
		}
		v = v.Elem()
	}
	if !v.IsValid() {
		p.b.WriteString(p.leaves.none())
		return nil
	}
	if v.CanInterface() {
		switch x := v.Interface().(type) {
		case pyBigInt:
			p.b.WriteString(string(x))
			return nil
		case exec.Dict:
			return p.dict(exec.AsValue(&x), depth)
		}
	}
	switch v.Kind() {
	case reflect.Bool:
		p.b.WriteString(p.leaves.boolean(v.Bool()))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		p.b.WriteString(strconv.FormatInt(v.Int(), 10))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		p.b.WriteString(strconv.FormatUint(v.Uint(), 10))
	case reflect.Float32, reflect.Float64:
		p.b.WriteString(p.leaves.float(v.Float()))
	case reflect.String:
		return p.str(v.String())
	case reflect.Slice, reflect.Array:
		kind, n := seqTypes[v.Type()], v.Len()
		open, close, ok := p.leaves.seq(kind, n)
		if !ok {
			return fmt.Errorf("a %s cannot be written here", seqNames[kind])
		}
		p.b.WriteString(open)
		if n == 0 {
			p.b.WriteString(close)
			return nil
		}
		for i := range n {
			if i > 0 {
				p.b.WriteString(p.itemSep)
			}
			p.newline(depth + 1)
			if err := p.value(v.Index(i), depth+1); err != nil {
				return err
			}
		}
		p.newline(depth)
		p.b.WriteString(close)
	case reflect.Map:
		return p.dict(exec.ToValue(v), depth)
	default:
		return p.leaves.cannot(v.Kind())
	}
	return nil
}

// str writes s quoted, looking at the room left every strCheck bytes.
func (p *pyPrinter) str(s string) error {
	q := p.leaves.quote(s)
	p.b.WriteByte(q)
	for i, next := 0, strCheck; i < len(s); {
		if i >= next {
			if err := p.full(); err != nil {
				return err
			}
			next = i + strCheck
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			p.leaves.invalid(&p.b, s[i])
		} else {
			p.leaves.char(&p.b, r, q)
		}
		i += size
	}
	p.b.WriteByte(q)
	return nil
}

func (p *pyPrinter) dict(d *exec.Value, depth int) error {
	pairs := p.st.dictPairs(d)
	if p.sortKeys {
		sort.SliceStable(pairs, func(i, j int) bool { return jsonKey(pairs[i].k) < jsonKey(pairs[j].k) })
	}
	if len(pairs) == 0 {
		p.b.WriteString("{}")
		return nil
	}
	p.b.WriteByte('{')
	for i, e := range pairs {
		if i > 0 {
			p.b.WriteString(p.itemSep)
		}
		p.newline(depth + 1)
		if err := p.leaves.key(p, e.k, depth+1); err != nil {
			return err
		}
		p.b.WriteString(p.keySep)
		if err := p.value(reflect.ValueOf(e.v), depth+1); err != nil {
			return err
		}
	}
	p.newline(depth)
	p.b.WriteByte('}')
	return nil
}

// pyRepr writes leaves as Python's repr does: None, True, 1e+20, inf,
// 'it' or "it's"; a key as any other value.
type pyRepr struct{}

func (pyRepr) none() string { return "None" }

func (pyRepr) boolean(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

func (pyRepr) float(f float64) string { return pyFloatRepr(f) }

func (pyRepr) key(p *pyPrinter, k any, depth int) error { return p.value(reflect.ValueOf(k), depth) }

func (pyRepr) cannot(k reflect.Kind) error { return fmt.Errorf("a %s has no text", k) }

func (pyRepr) seq(k seqKind, n int) (string, string, bool) {
	switch k {
	case seqTuple:
		if n == 1 {
			return "(", ",)", true
		}
		return "(", ")", true
	case seqItems, seqKeys, seqValues:
		return seqNames[k] + "([", "])", true
	}
	return "[", "]", true
}

// Python's repr quotes a string in single quotes, or double when it
// holds a single quote and no double one; backslash, the quote, \t, \n
// and \r escaped, other unprintable characters as \xhh, \uhhhh or
// \Uhhhhhhhh; everything printable (non-ASCII included) as it is. Bytes
// that are not UTF-8 are written as they are.
func (pyRepr) quote(s string) byte {
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		return '"'
	}
	return '\''
}

func (pyRepr) invalid(b *strings.Builder, c byte) { b.WriteByte(c) }

func (pyRepr) char(b *strings.Builder, r rune, q byte) {
	switch {
	case r == rune(q) || r == '\\':
		b.WriteByte('\\')
		b.WriteRune(r)
	case r == '\t':
		b.WriteString(`\t`)
	case r == '\n':
		b.WriteString(`\n`)
	case r == '\r':
		b.WriteString(`\r`)
	case r < 0x80 && r >= 0x20 && r < 0x7f, r >= 0x80 && unicode.IsPrint(r):
		b.WriteRune(r)
	case r <= 0xff:
		hexEscape(b, 'x', r, 2)
	case r <= 0xffff:
		hexEscape(b, 'u', r, 4)
	default:
		hexEscape(b, 'U', r, 8)
	}
}

// hexEscape writes \ c and r's n lower-case hex digits.
func hexEscape(b *strings.Builder, c byte, r rune, n int) {
	const hex = "0123456789abcdef"
	b.WriteByte('\\')
	b.WriteByte(c)
	for sh := 4 * (n - 1); sh >= 0; sh -= 4 {
		b.WriteByte(hex[(r>>sh)&0xf])
	}
}

// pyJSON writes leaves as Python's json.dumps does: null, true, 1e+20,
// Infinity, "text" escaped (ascii: ensure_ascii); a key as its text
// (jsonKey), quoted.
type pyJSON struct{ ascii bool }

func (pyJSON) none() string { return "null" }

func (pyJSON) boolean(b bool) string { return strconv.FormatBool(b) }

func (pyJSON) float(f float64) string { return pyFloat(f) }

func (pyJSON) key(p *pyPrinter, k any, _ int) error { return p.str(jsonKey(k)) }

func (pyJSON) cannot(k reflect.Kind) error { return fmt.Errorf("a %s is not JSON serializable", k) }

func (pyJSON) seq(k seqKind, _ int) (string, string, bool) {
	return "[", "]", k == seqList || k == seqTuple
}

// json.dumps quotes a string in double quotes and escapes ", \ and the
// control characters always (\n, \r, \t, \b, \f, else \u00XX), and
// with ensure_ascii everything outside ASCII's printable range as \uXXXX
// (UTF-16 surrogate pairs past U+FFFF). A byte that is not UTF-8 is
// U+FFFD.
func (pyJSON) quote(string) byte { return '"' }

func (j pyJSON) invalid(b *strings.Builder, _ byte) { j.char(b, utf8.RuneError, '"') }

func (j pyJSON) char(b *strings.Builder, r rune, _ byte) {
	switch r {
	case '"':
		b.WriteString(`\"`)
	case '\\':
		b.WriteString(`\\`)
	case '\n':
		b.WriteString(`\n`)
	case '\r':
		b.WriteString(`\r`)
	case '\t':
		b.WriteString(`\t`)
	case '\b':
		b.WriteString(`\b`)
	case '\f':
		b.WriteString(`\f`)
	default:
		switch {
		case r < 0x20:
			hexEscape(b, 'u', r, 4)
		case !j.ascii || r < 0x7f:
			b.WriteRune(r)
		case r > 0xffff:
			r -= 0x10000
			hexEscape(b, 'u', 0xd800|(r>>10)&0x3ff, 4)
			hexEscape(b, 'u', 0xdc00|r&0x3ff, 4)
		default:
			hexEscape(b, 'u', r, 4)
		}
	}
}

// tupleFunc makes a template's tuple literal (the rewritten tree calls it
// for (a, b)).
const tupleFunc = "__sluice_tuple"

func makeTuple(_ *exec.Evaluator, p *exec.VarArgs) (*exec.Value, error) {
	out := make(pyTuple, len(p.Args))
	for i, a := range p.Args {
		out[i] = a.Interface()
	}
	return exec.AsValue(out), nil
}
