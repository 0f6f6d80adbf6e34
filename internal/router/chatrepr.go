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

// A dict or a list as text. jinja2 prints one with Python's str(), its
// repr: {'a': 1, 'b': [1, 2], 'c': None} with the dict's keys in their
// order (chatorder.go), strings quoted as repr quotes them ("it's"),
// True, False, None, 1e+20, inf. gonja's text sorted a dict's keys,
// quoted strings with no escaping, printed None as nothing and a big
// integer as a quoted string. {{ x }} (budgetOut), x|string
// (templateString) and 'text' ~ x (concat) write pyRepr's text instead.
//
// A big integer of a request's JSON (pyBigInt) is a number to the
// number and integer tests and not a string, as jinja2 has it; it prints
// as its digits. Arithmetic and comparisons on one still see its digits
// as text (gonja's), a corner no chat template is known to reach.

// reprText is v as jinja2 prints it: pyRepr's text for a dict or a list,
// gonja's for anything else.
func reprText(st *renderState, v *exec.Value) (string, error) {
	if isNone(v) {
		return "None", nil
	}
	if !v.IsDict() && !v.IsList() {
		return v.String(), nil
	}
	w := pyRepr{st: st}
	if err := w.value(reflect.ValueOf(v), 0); err != nil {
		return "", err
	}
	return w.b.String(), nil
}

// templateString is jinja2's string filter: a dict or a list as Python's
// str() writes it (reprText), anything else as gonja's.
func templateString(e *exec.Evaluator, in *exec.Value, p *exec.VarArgs) *exec.Value {
	if isNone(in) && len(p.Args) == 0 && len(p.KwArgs) == 0 {
		return exec.AsValue("None")
	}
	if in.IsError() || !in.IsDict() && !in.IsList() {
		return gonjaString(e, in, p)
	}
	if len(p.Args) > 0 || len(p.KwArgs) > 0 {
		return exec.AsValue(errors.New("string takes no arguments"))
	}
	st, err := evalState(e)
	if err != nil {
		return exec.AsValue(err)
	}
	s, err := reprText(st, in)
	if err != nil {
		return exec.AsValue(fmt.Errorf("string: %w", err))
	}
	return exec.AsValue(s)
}

// gonjaString is gonja's own string filter.
var gonjaString = func() exec.FilterFunction {
	f, ok := builtins.Filters.Get("string")
	if !ok {
		panic("gonja has no string filter")
	}
	return f
}()

// pyRepr writes a value as Python's repr does.
type pyRepr struct {
	st *renderState
	b  strings.Builder
}

func (w *pyRepr) value(v reflect.Value, depth int) error {
	if depth > maxSizeDepth {
		return errors.New("nested too deep")
	}
	for v.IsValid() && (v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer) {
		if v.IsNil() {
			w.b.WriteString("None")
			return nil
		}
		if v.CanInterface() {
			switch x := v.Interface().(type) {
			case *exec.Value:
				return w.value(x.Val, depth)
			case *exec.Dict:
				return w.dict(exec.AsValue(x), depth)
			}
		}
		v = v.Elem()
	}
	if !v.IsValid() {
		w.b.WriteString("None")
		return nil
	}
	if v.CanInterface() {
		switch x := v.Interface().(type) {
		case pyBigInt:
			w.b.WriteString(string(x))
			return nil
		case exec.Dict:
			return w.dict(exec.AsValue(&x), depth)
		}
	}
	switch v.Kind() {
	case reflect.Bool:
		if v.Bool() {
			w.b.WriteString("True")
		} else {
			w.b.WriteString("False")
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		w.b.WriteString(strconv.FormatInt(v.Int(), 10))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		w.b.WriteString(strconv.FormatUint(v.Uint(), 10))
	case reflect.Float32, reflect.Float64:
		w.b.WriteString(pyFloatRepr(v.Float()))
	case reflect.String:
		w.str(v.String())
	case reflect.Slice, reflect.Array:
		w.b.WriteByte('[')
		for i := range v.Len() {
			if i > 0 {
				w.b.WriteString(", ")
			}
			if err := w.value(v.Index(i), depth+1); err != nil {
				return err
			}
		}
		w.b.WriteByte(']')
	case reflect.Map:
		return w.dict(exec.ToValue(v), depth)
	default:
		return fmt.Errorf("a %s has no text", v.Kind())
	}
	return nil
}

func (w *pyRepr) dict(d *exec.Value, depth int) error {
	pairs, ok := w.st.orderedPairs(d)
	if !ok {
		// A map the server built: its keys sorted, as gonja has them.
		for _, k := range d.Keys() {
			v, _ := d.GetItem(k.Interface())
			pairs = append(pairs, dictEntry{k.Interface(), v})
		}
		sort.SliceStable(pairs, func(i, j int) bool { return jsonKey(pairs[i].k) < jsonKey(pairs[j].k) })
	}
	w.b.WriteByte('{')
	for i, p := range pairs {
		if i > 0 {
			w.b.WriteString(", ")
		}
		if err := w.value(reflect.ValueOf(p.k), depth+1); err != nil {
			return err
		}
		w.b.WriteString(": ")
		if err := w.value(reflect.ValueOf(p.v), depth+1); err != nil {
			return err
		}
	}
	w.b.WriteByte('}')
	return nil
}

// str writes s quoted as Python's repr quotes it: in single quotes, or
// double when s holds a single quote and no double one; backslash, the
// quote, \t, \n and \r escaped, other unprintable characters as \xhh,
// \uhhhh or \Uhhhhhhhh; everything printable (non-ASCII included) as it
// is. Bytes that are not UTF-8 are written as they are.
func (w *pyRepr) str(s string) {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	w.b.WriteByte(q)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			w.b.WriteByte(s[i])
			i++
			continue
		}
		i += size
		switch {
		case r == rune(q) || r == '\\':
			w.b.WriteByte('\\')
			w.b.WriteRune(r)
		case r == '\t':
			w.b.WriteString(`\t`)
		case r == '\n':
			w.b.WriteString(`\n`)
		case r == '\r':
			w.b.WriteString(`\r`)
		case r < 0x80 && r >= 0x20 && r < 0x7f, r >= 0x80 && unicode.IsPrint(r):
			w.b.WriteRune(r)
		case r <= 0xff:
			fmt.Fprintf(&w.b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&w.b, `\u%04x`, r)
		default:
			fmt.Fprintf(&w.b, `\U%08x`, r)
		}
	}
	w.b.WriteByte(q)
}

// pyFloatRepr is Python's repr of a float: pyFloat's, with inf, -inf
// and nan as Python writes them (json.dumps writes Infinity).
func pyFloatRepr(f float64) string {
	switch s := pyFloat(f); s {
	case "NaN":
		return "nan"
	case "Infinity":
		return "inf"
	case "-Infinity":
		return "-inf"
	default:
		return s
	}
}

// isBigInt: v is an integer of a request's JSON too large for an int.
func isBigInt(v *exec.Value) bool {
	if v == nil || !v.Val.IsValid() || !v.Val.CanInterface() {
		return false
	}
	_, ok := v.Val.Interface().(pyBigInt)
	return ok
}

// bigIntTest is gonja's test name with a big integer (isBigInt) taken as
// jinja2 takes it: is is the answer for one, the test's own for anything
// else.
func bigIntTest(set *exec.TestSet, name string, is bool) func(*exec.Context, *exec.Value, *exec.VarArgs) (bool, error) {
	f, ok := set.Get(name)
	if !ok {
		panic("gonja has no test " + name)
	}
	base, ok := f.(func(*exec.Context, *exec.Value, *exec.VarArgs) (bool, error))
	if !ok {
		panic(fmt.Sprintf("gonja's test %s is a %T", name, f))
	}
	return func(ctx *exec.Context, in *exec.Value, p *exec.VarArgs) (bool, error) {
		if isBigInt(in) {
			return is, nil
		}
		return base(ctx, in, p)
	}
}
