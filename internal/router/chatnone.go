package router

import (
	"reflect"

	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// None. jinja2 tells Python's None from an undefined value: {{ none }},
// {{ d.get('k') }} and a request's JSON null print "None", an undefined
// name or a missing attribute prints nothing; none is defined, and
// none|default('x') stays None. gonja has one nil for both. So the
// none literal (rewritten into a read of noneVar) and a request's null
// (renderState.plain) are a typed nil pointer, *noneType: gonja's IsNil
// is true for it (every test, comparison and condition it makes of nil
// is unchanged), and the places that print or test it (isNone) tell it
// from undefined.

// noneType is None's type; only its nil pointer is made.
type noneType struct{}

// pyNone is Python's None as a template value.
var pyNone = (*noneType)(nil)

var typeNone = reflect.TypeFor[*noneType]()

// noneVar is the variable the rewritten tree reads for the none literal.
const noneVar = "__sluice_none"

// noneName is a read of noneVar where the template wrote none.
func noneName(at *tokens.Token) nodes.Expression {
	tok := &tokens.Token{Type: tokens.Name, Val: noneVar}
	if at != nil {
		tok.Line, tok.Col, tok.Pos = at.Line, at.Col, at.Pos
	}
	return &nodes.Name{Name: tok}
}

// isNone: v is None (not undefined).
func isNone(v *exec.Value) bool {
	return v != nil && v.Val.IsValid() && v.Val.Type() == typeNone
}

// noneText is v with None as the text jinja2 writes for it: a filter
// that works on its input's text (textFilters) or join's items.
func noneText(v *exec.Value) *exec.Value {
	if isNone(v) {
		return exec.AsValue("None")
	}
	return v
}

// textFilters make their input a string first, as jinja2's do
// (none|upper is "NONE").
var textFilters = map[string]bool{"capitalize": true, "center": true, "e": true, "escape": true, "forceescape": true,
	"indent": true, "lower": true, "upper": true, "title": true, "trim": true, "striptags": true, "truncate": true,
	"wordwrap": true, "wordcount": true, "replace": true, "urlize": true}

// noneItems is a list with each None item as its text, for join (the
// list itself when it holds none).
func noneItems(in *exec.Value) *exec.Value {
	if !in.IsList() {
		return in
	}
	n := in.Len()
	var out []any
	for i := range n {
		if isNone(in.Index(i)) {
			if out == nil {
				out = make([]any, n)
				for j := range i {
					out[j] = in.Index(j).Interface()
				}
			}
			out[i] = "None"
		} else if out != nil {
			out[i] = in.Index(i).Interface()
		}
	}
	if out == nil {
		return in
	}
	return exec.AsValue(out)
}

// noneDefined is the defined (undefined when negate) test: None is
// defined, as in jinja2.
func noneDefined(set *exec.TestSet, name string) func(*exec.Context, *exec.Value, *exec.VarArgs) (bool, error) {
	f, ok := set.Get(name)
	if !ok {
		panic("gonja has no test " + name)
	}
	base, ok := f.(func(*exec.Context, *exec.Value, *exec.VarArgs) (bool, error))
	if !ok {
		panic("gonja's test " + name + " has another signature")
	}
	return func(ctx *exec.Context, in *exec.Value, p *exec.VarArgs) (bool, error) {
		if isNone(in) {
			return name == "defined", nil
		}
		return base(ctx, in, p)
	}
}

// formatArgs is p with each None, list or dict argument as the text
// Python's format gives it (str(): "None", [1, 'a'], (1, 2),
// dict_items([...]); gonja's formatter refused them), its printing
// charged (reprText); p itself when it holds none.
func formatArgs(st *renderState, p *exec.VarArgs) (*exec.VarArgs, error) {
	text := func(a *exec.Value) bool { return isNone(a) || a.IsList() || a.IsDict() }
	has := false
	for _, a := range p.Args {
		has = has || text(a)
	}
	for _, a := range p.KwArgs {
		has = has || text(a)
	}
	if !has {
		return p, nil
	}
	conv := func(a *exec.Value) (*exec.Value, error) {
		if !text(a) {
			return a, nil
		}
		// Its size bound first (the sizer stops at the budget; the
		// printer would build up to it).
		n, err := textOf(st, a)
		if err != nil {
			return nil, err
		}
		s, err := reprText(st, a, n)
		return exec.AsValue(s), err
	}
	out := &exec.VarArgs{Args: make([]*exec.Value, len(p.Args)), KwArgs: make(map[string]*exec.Value, len(p.KwArgs))}
	for i, a := range p.Args {
		v, err := conv(a)
		if err != nil {
			return nil, err
		}
		out.Args[i] = v
	}
	for k, a := range p.KwArgs {
		v, err := conv(a)
		if err != nil {
			return nil, err
		}
		out.KwArgs[k] = v
	}
	return out, nil
}
