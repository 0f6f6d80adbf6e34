package router

import (
	"fmt"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// budgetItemFunc is x[k] in the rewritten tree (chatbudget_tree.go).
const budgetItemFunc = "__sluice_item"

// budgetItem is x[k] with Python's (jinja2's) semantics where gonja
// 2.9.1 differs: an integer index from the end reaches the first item
// (x[-len(x)]; gonja checked len > -k, so messages[-1] of a one-message
// conversation and s.split(sep)[-1] of a string without sep were
// undefined, and Qwen3's template failed on a reply holding </think>
// without <think>), and a string's index counts characters, not bytes.
// Out of range either way is undefined (nil), as in jinja2; so is an
// integer key a dict does not hold (a dict from JSON holds none: its
// keys are strings) and an integer index of anything else. Every other
// key goes to gonja as its evaluator does (an item, else an attribute
// of that name, else undefined).
func budgetItem(e *exec.Evaluator, p *exec.VarArgs) (*exec.Value, error) {
	if len(p.Args) != 2 {
		return nil, fmt.Errorf("%s: two arguments", budgetItemFunc)
	}
	x, k := p.Args[0], p.Args[1]
	switch {
	case k.IsInteger() && x.IsString():
		// Its runes, all of them: a read of the string (chatread.go).
		if err := chargeRead(e, x, readPasses); err != nil {
			return nil, err
		}
		r := []rune(x.String())
		if i, ok := pyIndex(k.Integer(), len(r)); ok {
			return exec.AsValue(string(r[i])), nil
		}
		return exec.AsValue(nil), nil
	case k.IsInteger() && x.IsList():
		if i, ok := pyIndex(k.Integer(), x.Len()); ok {
			return x.Index(i), nil
		}
		return exec.AsValue(nil), nil
	case k.IsInteger():
		// A dict's item of that key (jinja2: d[0] is the key 0 when
		// present); anything else has no such item: undefined, as
		// jinja2 answers (gonja refused the index on a dict).
		if d, ok := x.Interface().(*exec.Dict); ok {
			for _, p := range d.Pairs {
				if p.Key.IsInteger() && p.Key.Integer() == k.Integer() {
					return p.Value, nil
				}
			}
		}
		return exec.AsValue(nil), nil
	case k.IsString():
		item, found := x.GetItem(k.String())
		if !found {
			item, found = x.GetAttribute(k.String())
		}
		if !found && item.IsError() {
			return nil, item
		}
		if !found {
			return exec.AsValue(nil), nil
		}
		return item, nil
	}
	return nil, fmt.Errorf("an index must be a string or an integer, not %s", kindOf(k))
}

// pyIndex is the position Python's x[i] reads in a sequence of n items.
func pyIndex(i, n int) (int, bool) {
	if i < 0 {
		i += n
	}
	return i, i >= 0 && i < n
}
