package router

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/nikolalohinski/gonja/v2/builtins"
	controlStructures "github.com/nikolalohinski/gonja/v2/builtins/control_structures"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/parser"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// A chat template's {% for %} loops are the operator's, what they go over
// (messages, tools, a message's text) is the tenant's. Two shapes wrote
// little or nothing, so no output or build bound saw them:
//
//   - a loop over the messages inside a loop over the messages (a
//     template looking for each message's tool answer, or the last user
//     turn, per message) does n*n steps: 35,000 one-character messages
//     fit a 1 MiB body, 1.2e9 steps, minutes of a core per request;
//   - a recursive loop ({% for m in messages recursive %} calling
//     loop(...)) that recursed without end behind a condition on the
//     messages passed the start-up check and then killed the whole
//     process on the first matching request (a Go stack overflow is
//     fatal, not an error), like the unbounded macros before
//     maxMacroDepth. gonja's loop(x) starts each level from the loop's
//     own context, so no variable can count the depth: a recursive loop
//     does not parse (no chat template we know has one; a macro, whose
//     depth is bounded, does the same work).
//
// So every loop charges what it goes over to a per-rendering step budget
// (maxLoopSteps) before it starts, filtered-out items included (the loop
// evaluates its if-condition on each): past it the rendering ends with
// ErrTemplateTooMuchWork (400).

// maxLoopSteps bounds the items one rendering's loops go over. Real
// templates go over the messages two or three times and over the tools
// and their parameters: Qwen3's and Gemma 3's go over a 1 MiB body of
// one-character messages (about 35,000) in under 100,000 steps.
const maxLoopSteps = 1 << 20

// ErrTemplateTooMuchWork: a rendering's loops went over more items than
// maxLoopSteps.
var ErrTemplateTooMuchWork = errors.New("the chat template does more work on these messages than a rendering may")

// loopStepsFunc is the function every loop calls (chatForLoops), in
// every template's context.
const loopStepsFunc = "__sluice_loop_items"

// loopSteps counts one rendering's loop steps (in renderState).
type loopSteps struct{ steps, max int }

// charge counts n steps; false past the bound.
func (l *loopSteps) charge(n int) bool {
	if n < 0 || n > l.max-l.steps {
		l.steps = l.max + 1 // over for good
		return false
	}
	l.steps += n
	return true
}

// chatForLoops wraps gonja's {% for %} parser: the loop's expression
// becomes loopStepsFunc(expression), which charges the items before the
// loop goes over them; the node stays gonja's ForControlStructure. A
// recursive loop is refused.
func chatForLoops(parse parser.ControlStructureParser) parser.ControlStructureParser {
	return func(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
		cs, err := parse(p, args)
		fcs, ok := cs.(*controlStructures.ForControlStructure)
		if err != nil || !ok {
			return cs, err
		}
		at := fcs.BodyWrapper.Location
		if fcs.Recursive {
			return nil, fmt.Errorf("line %d: a recursive {%% for %%} loop is not available in a chat template (its depth has no bound); write a macro", at.Line)
		}
		fcs.ObjectEvaluator = callNode(at, loopStepsFunc, fcs.ObjectEvaluator)
		return fcs, nil
	}
}

// callNode is the expression fn(args...) at a template position.
func callNode(at *tokens.Token, fn string, args ...nodes.Expression) *nodes.Call {
	name := &tokens.Token{Type: tokens.Name, Val: fn, Line: at.Line, Col: at.Col, Pos: at.Pos}
	return &nodes.Call{Location: at, Func: &nodes.Name{Name: name}, Args: args, Kwargs: map[string]nodes.Expression{}}
}

// loopState is the rendering's step count, nil when the template
// replaced the server's variable (then loops refuse: fail closed).
func loopState(e *exec.Evaluator) *loopSteps {
	v, _ := e.Environment.Context.Get(renderStateVar)
	if st, ok := v.(*renderState); ok && st.loops.max > 0 {
		return &st.loops
	}
	return nil
}

// loopItems is loopStepsFunc: x unchanged, once its items (and one for
// the loop) are charged.
func loopItems(e *exec.Evaluator, p *exec.VarArgs) (*exec.Value, error) {
	if len(p.Args) != 1 {
		return nil, errors.New("for: the loop's items are missing")
	}
	l := loopState(e)
	if l == nil || !l.charge(1+itemCount(p.Args[0])) {
		return nil, fmt.Errorf("%w (more than %d loop steps)", ErrTemplateTooMuchWork, maxLoopSteps)
	}
	// A dict with an order goes over its keys in that order, as
	// jinja2's does (chatorder.go); gonja sorts a map's.
	if st, err := evalState(e); err == nil {
		if pairs, ok := st.orderedPairs(p.Args[0]); ok {
			keys := make([]any, len(pairs))
			for i, entry := range pairs {
				keys[i] = entry.k
			}
			return exec.AsValue(keys), nil
		}
	}
	return p.Args[0], nil
}

// itemCount is how many items a loop over v goes over, at most: a
// string's bytes (it goes over its characters), a list's or a map's
// entries; 0 for what a loop does not go over.
func itemCount(v *exec.Value) int {
	if v == nil {
		return 0
	}
	x := v.Val
	for x.IsValid() && (x.Kind() == reflect.Interface || x.Kind() == reflect.Pointer) {
		if x.IsNil() {
			return 0
		}
		if x.CanInterface() {
			switch w := x.Interface().(type) {
			case *exec.Dict:
				return len(w.Pairs)
			case *exec.Value:
				return itemCount(w)
			}
		}
		x = x.Elem()
	}
	switch x.Kind() {
	case reflect.String, reflect.Slice, reflect.Array, reflect.Map:
		return x.Len()
	}
	return 0
}

// loopSteps is the rendering's loop step bound.
func (c *ChatTemplate) loopSteps() int {
	if c.maxSteps > 0 {
		return c.maxSteps
	}
	return maxLoopSteps
}

// inBytesPerStep is how many bytes of a string `in` looks through for
// one loop step: a search through text is far cheaper than a loop's
// step, and Qwen3's template asks '</think>' in each assistant message
// (a 1 MiB reply is 65,536 steps, well inside maxLoopSteps).
const inBytesPerStep = 16

// chatTests are gonja's tests with `in` counted (inTest), and a big
// integer a number (bigIntTest).
var chatTests = func() *exec.TestSet {
	set := exec.NewTestSet(map[string]exec.TestFunction{}).Update(builtins.Tests)
	_ = set.Replace("in", inTest)
	for _, name := range []string{"==", "eq", "equalto"} {
		_ = set.Replace(name, eqTest(false))
	}
	for _, name := range []string{"!=", "ne"} {
		_ = set.Replace(name, eqTest(true))
	}
	_ = set.Replace("lower", caseTest(false))
	_ = set.Replace("upper", caseTest(true))
	_ = set.Replace("divisibleby", divisibleTest)
	// A request's big integers are numbers, not strings (chatrepr.go).
	for name, is := range map[string]bool{"number": true, "integer": true, "string": false, "iterable": false, "sequence": false} {
		_ = set.Replace(name, bigIntTest(set, name, is))
	}
	// None is defined, and undefined is not None (chatnone.go).
	_ = set.Replace("defined", noneDefined(set, "defined"))
	_ = set.Replace("undefined", noneDefined(set, "undefined"))
	_ = set.Replace("none", func(_ *exec.Context, in *exec.Value, _ *exec.VarArgs) (bool, error) { return isNone(in), nil })
	return set
}()

// eqTest is Jinja's x == y (and !=, which the tree rewrites into these
// tests: chatbudget_tree.go) and the eq/equalto/ne tests: two lists or
// two dicts of one length are compared item by item, at every depth,
// two strings of one length byte by byte, so that is charged to the
// loop steps first ({% for m in messages %}{% if messages == x %} is
// n*n; a loop of range(n) comparing two long equal strings is n times
// their length; comparing a tool with itself goes over all its
// parameters). Other pairs are told apart at once.
func eqTest(negate bool) func(*exec.Evaluator, *exec.Value, *exec.VarArgs) (bool, error) {
	return func(e *exec.Evaluator, in *exec.Value, p *exec.VarArgs) (bool, error) {
		if in.IsError() {
			return false, in // as the operator: a failed operand fails the comparison
		}
		other := p.First()
		l := loopState(e)
		if l == nil || !l.charge(eqSteps(in, other, l.max-l.steps)) {
			return false, fmt.Errorf("%w (more than %d loop steps)", ErrTemplateTooMuchWork, maxLoopSteps)
		}
		if in.IsNil() && other.IsNil() && isNone(in) != isNone(other) {
			return negate, nil // None is not undefined (chatnone.go)
		}
		return in.EqualValueTo(other) != negate, nil
	}
}

// budgetCmpSide is a side of <, >, <= or >=, unchanged once a string's
// bytes are charged to the loop steps (a step per inBytesPerStep): two
// strings compare byte by byte, and a range(n) loop comparing two long
// strings read n times their length uncounted.
func budgetCmpSide(e *exec.Evaluator, p *exec.VarArgs) (*exec.Value, error) {
	if len(p.Args) != 1 {
		return nil, errors.New("budgetCmpSide: one argument")
	}
	v := p.Args[0]
	if isBigInt(v) {
		// Compared as a float (as gonja compares an int with a
		// float): exact ordering past 2^53 is not kept.
		f, err := floatOf(e, v)
		return exec.AsValue(f), err
	}
	if v.IsString() {
		if l := loopState(e); l == nil || !l.charge(len(v.String())/inBytesPerStep) {
			return nil, fmt.Errorf("%w (more than %d loop steps)", ErrTemplateTooMuchWork, maxLoopSteps)
		}
	}
	return v, nil
}

// eqSteps bounds what comparing a and b for equality goes over
// (gonja's Value.EqualValueTo), or is more than limit: two lists or two
// dicts of one length, their items, and what comparing each pair of
// items goes over, at every depth (two dicts' keys are listed whatever
// their lengths); two strings of one length, their
// bytes (a step per inBytesPerStep); else nothing. It walks no further
// than limit, so looking costs no more than what it charges.
func eqSteps(a, b *exec.Value, limit int) int {
	return eqWalk(a, b, limit, 0)
}

func eqWalk(a, b *exec.Value, limit, depth int) int {
	if depth > maxSizeDepth {
		return limit + 1
	}
	switch {
	case a == nil || b == nil, a.IsNumber() && b.IsNumber(), a.IsNil() || b.IsNil():
		return 0
	case a.IsString() && b.IsString():
		if n := len(a.String()); n == len(b.String()) {
			return n / inBytesPerStep
		}
	case a.IsList() && b.IsList():
		items := a.Len()
		if items != b.Len() {
			return 0
		}
		n := items
		for i := 0; i < items && n <= limit; i++ {
			n += eqWalk(a.Index(i), b.Index(i), limit-n, depth+1)
		}
		return n
	case a.IsDict() && b.IsDict():
		// Both dicts' keys are listed (and sorted) first, whatever
		// their lengths.
		ka, kb := itemCount(a), itemCount(b)
		n := ka + kb
		if ka != kb || n > limit {
			return n
		}
		for _, k := range a.Keys() {
			if n > limit {
				break
			}
			x, okA := a.GetItem(k.Interface())
			y, okB := b.GetItem(k.Interface())
			if okA && okB {
				n += eqWalk(x, y, limit-n, depth+1)
			}
		}
		return n
	}
	return 0
}

// inTest is Jinja's x in y (and x not in y, x is in y, select('in', y)):
// it goes over y's items (a list's, each compared with x as == compares,
// at every depth; a dict's keys) or its text, so its cost is charged to
// the loop steps first ({% for m in messages %}{% if m in messages %} is
// n*n steps with nothing built and nothing written); a string costs a
// step per whole inBytesPerStep bytes.
// Past the bound the test is an error and the rendering refused
// (ErrTemplateTooMuchWork), whatever the template makes of the error.
func inTest(e *exec.Evaluator, in *exec.Value, p *exec.VarArgs) (bool, error) {
	seq := p.First()
	l := loopState(e)
	if l == nil {
		return false, fmt.Errorf("%w (more than %d loop steps)", ErrTemplateTooMuchWork, maxLoopSteps)
	}
	n := itemCount(seq)
	switch {
	case seq.IsString():
		n /= inBytesPerStep // shorter is less than a step: whatever repeats it (a loop, a filter, a macro) is charged
		if !plain(in) {
			// A list's text is built to be looked for.
			st, err := evalState(e)
			if err != nil {
				return false, err
			}
			if _, err := textOf(st, in); err != nil {
				return false, err
			}
		}
	case seq.IsList():
		for i, limit := 0, l.max-l.steps; i < seq.Len() && n <= limit; i++ {
			n += eqSteps(in, seq.Index(i), limit-n)
		}
	}
	if !l.charge(n) {
		return false, fmt.Errorf("%w (more than %d loop steps)", ErrTemplateTooMuchWork, maxLoopSteps)
	}
	return seq.Contains(in), nil
}
