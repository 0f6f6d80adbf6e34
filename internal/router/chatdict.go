package router

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// budgetDictMethodFunc is d.name(args...) for a name in
// budgetDictMethods in the rewritten tree (chatbudget_tree.go).
const budgetDictMethodFunc = "__sluice_dict_method"

// budgetDictMethods are the dict (and list) methods gonja 2.9.1 runs on
// a copy of the whole value: before the method, its evaluator turns the
// dict into a Go map item by item, nested lists and dicts included
// (exec.Evaluator.evalMethod, Value.ToGoSimpleType). So d.items(),
// d.keys(), d.values(), d.get(k) and d.copy() each go over every item of
// d at every depth; in a loop over the messages, a tool's
// parameters.items() (or a kwarg's) was n times the tool's size with
// nothing counted. Each is charged to the loop steps first, as a loop
// over the same items is (chatloops.go).
var budgetDictMethods = map[string]bool{"items": true, "keys": true, "values": true, "get": true, "copy": true}

// budgetDictMethod is x.name(args...) for a name in budgetDictMethods:
// x's items at every depth charged to the loop steps (one step for the
// call), then gonja's own method on x's copy, as its evaluator runs it.
func budgetDictMethod(e *exec.Evaluator, p *exec.VarArgs) (*exec.Value, error) {
	if len(p.Args) < 2 {
		return nil, errors.New("budgetDictMethod: name and self")
	}
	name, self := p.Args[0].String(), p.Args[1]
	args := &exec.VarArgs{Args: p.Args[2:], KwArgs: p.KwArgs}
	if self.IsError() {
		return nil, self
	}
	var run func(any) (any, error)
	switch {
	case self.IsDict():
		if m, ok := e.Environment.Methods.Dict.Get(name); ok {
			run = func(x any) (any, error) {
				d, ok := x.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("%s(): a dict whose keys are not all strings", name)
				}
				return m(d, self, args)
			}
		}
	case self.IsList():
		if m, ok := e.Environment.Methods.List.Get(name); ok {
			run = func(x any) (any, error) {
				l, ok := x.([]any)
				if !ok {
					return nil, fmt.Errorf("%s(): not a list", name)
				}
				return m(l, self, args)
			}
		}
	}
	if run == nil {
		return nil, fmt.Errorf("unknown method '%s' for %s", name, kindOf(self))
	}
	l := loopState(e)
	if l == nil || !l.charge(1+deepItems(self, l.max-l.steps)) {
		return nil, fmt.Errorf("%w (more than %d loop steps)", ErrTemplateTooMuchWork, maxLoopSteps)
	}
	if st, err := evalState(e); err == nil {
		// A dict with an order (a request's object, a dict literal):
		// in that order, on its own values (chatorder.go).
		if out, ok, err := st.orderedDictMethod(name, self, args); ok {
			return out, err
		}
	}
	x := self.ToGoSimpleType(false)
	if err, ok := x.(error); ok {
		return nil, fmt.Errorf("%s(): %w", name, err)
	}
	out, err := run(x)
	if err != nil {
		return nil, err
	}
	if out == nil && name == "get" {
		return exec.AsValue(pyNone), nil // Python's get: None when absent
	}
	return exec.AsValue(out), nil
}

// deepItems is how many items v holds at every depth (a list's or a
// dict's entries, their entries, and so on), or more than limit: what a
// copy of v item by item, or a comparison of v with a value of its
// shape, goes over. A string is one item whatever its length (neither
// copies its bytes).
func deepItems(v *exec.Value, limit int) int {
	w := itemWalk{limit: limit}
	w.walk(reflect.ValueOf(v), 0)
	return w.n
}

type itemWalk struct{ n, limit int }

func (w *itemWalk) walk(x reflect.Value, depth int) bool {
	if depth > maxSizeDepth {
		w.n = w.limit + 1
		return false
	}
	for x.IsValid() && (x.Kind() == reflect.Interface || x.Kind() == reflect.Pointer) {
		if x.IsNil() {
			return true
		}
		switch {
		case !x.CanInterface():
		case x.Type() == typeValue:
			return w.walk(x.Interface().(*exec.Value).Val, depth)
		case x.Type() == typeDict:
			return w.pairs(x.Interface().(*exec.Dict).Pairs, depth)
		}
		x = x.Elem()
	}
	if !x.IsValid() {
		return true
	}
	switch x.Kind() {
	case reflect.Slice, reflect.Array:
		if w.n += x.Len(); w.n > w.limit {
			return false
		}
		for i := range x.Len() {
			if !w.walk(x.Index(i), depth+1) {
				return false
			}
		}
	case reflect.Map:
		if w.n += x.Len(); w.n > w.limit {
			return false
		}
		it := x.MapRange()
		for it.Next() {
			if !w.walk(it.Value(), depth+1) {
				return false
			}
		}
	case reflect.Struct:
		if x.CanInterface() {
			if d, ok := x.Interface().(exec.Dict); ok {
				return w.pairs(d.Pairs, depth)
			}
		}
	}
	return w.n <= w.limit
}

func (w *itemWalk) pairs(ps []*exec.Pair, depth int) bool {
	if w.n += len(ps); w.n > w.limit {
		return false
	}
	for _, p := range ps {
		if p != nil && !w.walk(reflect.ValueOf(p.Value), depth+1) {
			return false
		}
	}
	return true
}
