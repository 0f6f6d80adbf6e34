package router

import (
	"errors"
	"fmt"
	"math/bits"
	"strings"

	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/nodes"
)

// A string's length, a character of it, a slice of it, its first or
// last character, its words, its number, whether it is lower case:
// gonja finds each by going over the whole string (Value.Len, Index and
// Slice turn it into runes first, 4 bytes a character; wordcount splits
// it; `is lower` lowers a copy), and nothing counted that. In a loop it
// was the loop's steps times the string's length: a template asking
// s|length 1,000 times of a 1 MiB message took 20 s of a core (s[::-1]
// 155 s; Intel Xeon family 6 model 167, load 20, 2026-12-07), and the
// loop steps allow 2^20. Each such read is charged to the loop steps as
// `in` is (inTest): a step per inBytesPerStep bytes of the string, times
// the passes gonja makes over it (stringPasses).

// budgetReadFunc is a sliced value in the rewritten tree
// (chatbudget_tree.go): x[a:b] -> __sluice_read(x, passes)[a:b].
const budgetReadFunc = "__sluice_read"

// The passes over a string gonja makes (each a conversion to runes or a
// copy): one for a read (length, an index), three for a slice (Len
// twice, then the runes it slices), eight for a slice with a step (the
// runes, then each appended one by one to a new string: measured 7.7
// times a read).
const (
	readPasses         = 1
	slicePasses        = 3
	steppedSlicePasses = 8
)

// listItemsPerStep is how many items of a list sliced with a step
// (gonja copies them one by one) cost a loop step, about what they take:
// 2.3 us an item of the messages against 10.8 us a step of a loop over
// them (Intel Xeon family 6 model 167, load 22, 2026-12-07). Qwen3's
// messages[::-1] costs it 0.2 steps a message.
const listItemsPerStep = 5

// readFilters go over a string input's characters (the others either
// are charged as they build, or do not read a string): the number
// filters parse it (ParseFloat reads every digit), truncate turns it
// into runes whatever the length it keeps.
var readFilters = map[string]bool{"length": true, "count": true, "first": true, "last": true, "random": true,
	"wordcount": true, "int": true, "float": true, "abs": true, "round": true, "filesizeformat": true, "truncate": true}

// chargeRead charges passes reads of v to the loop steps when v is a
// string: a step per inBytesPerStep bytes each.
func chargeRead(e *exec.Evaluator, v *exec.Value, passes int) error {
	if v == nil || !v.IsString() {
		return nil
	}
	l := loopState(e)
	if l == nil || !l.charge(passes*(len(v.String())/inBytesPerStep)) {
		return fmt.Errorf("%w (more than %d loop steps)", ErrTemplateTooMuchWork, maxLoopSteps)
	}
	return nil
}

// budgetRead is budgetReadFunc(x, passes): x unchanged, once a string
// x's passes are charged (chargeRead) or, for a slice with a step of a
// list (gonja copies its items one by one), a step per listItemsPerStep
// items.
func budgetRead(e *exec.Evaluator, p *exec.VarArgs) (*exec.Value, error) {
	if len(p.Args) != 2 || !p.Args[1].IsInteger() {
		return nil, errors.New(budgetReadFunc + ": a value and its passes")
	}
	x, passes := p.Args[0], p.Args[1].Integer()
	if x.IsList() && passes == steppedSlicePasses {
		if l := loopState(e); l == nil || !l.charge(itemCount(x)/listItemsPerStep) {
			return nil, fmt.Errorf("%w (more than %d loop steps)", ErrTemplateTooMuchWork, maxLoopSteps)
		}
	}
	if err := chargeRead(e, x, passes); err != nil {
		return nil, err
	}
	return x, nil
}

// sliceRead is a slice's target wrapped in budgetReadFunc.
func sliceRead(n *nodes.GetSlice, x nodes.Expression) nodes.Expression {
	passes := slicePasses
	if n.Step != nil {
		passes = steppedSlicePasses
	}
	return call(budgetReadFunc, n.Location, x, &nodes.Integer{Location: n.Location, Val: passes})
}

// caseTest is `is lower` (upper false) or `is upper`: gonja's, with
// the string's read charged first (it lowers a copy).
func caseTest(upper bool) func(*exec.Evaluator, *exec.Value, *exec.VarArgs) (bool, error) {
	return func(e *exec.Evaluator, in *exec.Value, _ *exec.VarArgs) (bool, error) {
		if !in.IsString() {
			return false, nil
		}
		if err := chargeRead(e, in, readPasses); err != nil {
			return false, err
		}
		s := in.String()
		if upper {
			return strings.ToUpper(s) == s, nil
		}
		return strings.ToLower(s) == s, nil
	}
}

// compareFilters compare or hash their items' text: unique, max and min
// once each, the sorts (sort, dictsort, groupby) about log2(n) times each
// (0 here). Two long strings with a common prefix compare byte by byte,
// so charging the items' count alone let a loop over 500 messages of 2 KB
// sorting their contents take 63 s of a core inside the step bound
// (Intel Xeon family 6 model 167, load 21, 2026-12-07).
var compareFilters = map[string]int{"unique": 1, "max": 1, "min": 1, "sort": 0, "dictsort": 0, "groupby": 0}

// chargeCompare charges filter name's comparisons of in's items to the
// loop steps: their text (textSize, a bound) a step per inBytesPerStep
// bytes, times the passes compareFilters gives.
func chargeCompare(e *exec.Evaluator, name string, in *exec.Value) error {
	passes, ok := compareFilters[name]
	if !ok {
		return nil
	}
	if passes == 0 {
		passes = max(1, bits.Len(uint(itemCount(in))))
	}
	l := loopState(e)
	if l == nil {
		return errNoRenderState
	}
	left := int64(max(0, l.max-l.steps))
	steps := textSize(in, left*inBytesPerStep) / inBytesPerStep * int64(passes)
	if !l.charge(int(min(steps, left+1))) {
		return fmt.Errorf("%w (more than %d loop steps)", ErrTemplateTooMuchWork, maxLoopSteps)
	}
	return nil
}

// divisibleTest is `is divisibleby(n)`: gonja's, with a string's read
// charged first (its number is parsed: every digit read), either side.
func divisibleTest(e *exec.Evaluator, in *exec.Value, p *exec.VarArgs) (bool, error) {
	param := p.First()
	for _, v := range []*exec.Value{in, param} {
		if err := chargeRead(e, v, readPasses); err != nil {
			return false, err
		}
	}
	if param.Integer() == 0 {
		return false, nil
	}
	return in.Integer()%param.Integer() == 0, nil
}
