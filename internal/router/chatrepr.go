package router

import (
	"errors"
	"fmt"
	"reflect"

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
// as its digits. Arithmetic on one is Python's, exact (chatint.go);
// <, >, <= and >= compare it as a float.

// reprText is v as jinja2 prints it: pyRepr's text for a dict or a list,
// gonja's for anything else. charged is what the caller charged for the
// text (the sizer's bound, textOf); the text past it is charged here, and
// the printing stops once it would pass what the rendering has left.
func reprText(st *renderState, v *exec.Value, charged int64) (string, error) {
	if isNone(v) {
		return "None", nil
	}
	if !v.IsDict() && !v.IsList() {
		return v.String(), nil
	}
	p := pyPrinter{st: st, leaves: pyRepr{}, itemSep: ", ", keySep: ": ", room: charged + st.left()}
	if err := p.value(reflect.ValueOf(v), 0); err != nil {
		return "", err
	}
	if extra := int64(p.b.Len()) - charged; extra > 0 {
		if err := st.charge(extra); err != nil {
			return "", err
		}
	}
	return p.b.String(), nil
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
	// budgetFilter charged the text's bound (textOf) before this ran.
	s, err := reprText(st, in, textSize(in, st.left()))
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
