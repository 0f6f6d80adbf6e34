package router

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	controlStructures "github.com/nikolalohinski/gonja/v2/builtins/control_structures"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/parser"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// The names the rewritten tree calls (chatbudget.go), set in each
// template's context beside raise_exception.
const (
	budgetAddFunc    = "__sluice_add"
	budgetCatFunc    = "__sluice_cat"
	budgetMulFunc    = "__sluice_mul"
	budgetOutFunc    = "__sluice_out"
	budgetMethodFunc = "__sluice_str_method"
	budgetCmpFunc    = "__sluice_cmp_side"
)

// budgetFuncs are the rewritten tree's functions, and None (chatnone.go).
var budgetFuncs = map[string]any{
	budgetAddFunc: budgetAdd, budgetCatFunc: budgetCat, budgetMulFunc: budgetMul,
	budgetOutFunc: budgetOut, budgetMethodFunc: budgetStrMethod, budgetItemFunc: budgetItem,
	budgetCmpFunc: budgetCmpSide, budgetDictMethodFunc: budgetDictMethod, budgetReadFunc: budgetRead,
	noneVar: pyNone, tupleFunc: makeTuple, budgetArithFunc: pyArith,
}

// budgetTree rewrites a parsed template so that what it builds is
// counted (see chatbudget.go). A tag it does not know the inside of is
// refused (the tags a chat template cannot have are refused at parse
// time already: chatControlStructures).
type budgetTree struct {
	// done maps each expression node rewritten to its rewriting: gonja
	// shares a method call's receiver between two fields of the call.
	done map[nodes.Node]nodes.Expression
	// err is the first construct refused (mutatingMethods).
	err error
}

func budgetTemplate(root *nodes.Template) error {
	t := budgetTree{done: map[nodes.Node]nodes.Expression{}}
	if err := t.nodes(root.Nodes); err != nil {
		return err
	}
	return t.err
}

// mutatingMethods change a list or a dict in place (Python's list, dict
// and set methods that do). Hugging Face renders templates in jinja2's
// ImmutableSandboxedEnvironment, which refuses each of them
// (SecurityError), and gonja did them for some values and silently not
// for others (x.append(y) on a namespace's list or d.update(...) left
// the value as it was: the template rendered as if the call never ran).
// A template calling one is refused when it is read, naming the call.
var mutatingMethods = map[string]bool{"append": true, "extend": true, "insert": true, "remove": true, "sort": true,
	"reverse": true, "pop": true, "clear": true, "update": true, "setdefault": true, "popitem": true, "add": true,
	"discard": true, "difference_update": true, "intersection_update": true, "symmetric_difference_update": true}

func (t *budgetTree) nodes(list []nodes.Node) error {
	for _, n := range list {
		if err := t.node(n); err != nil {
			return err
		}
	}
	return nil
}

// body rewrites a buffered body and makes it count what it writes.
func (t *budgetTree) body(w *nodes.Wrapper) error {
	if w == nil {
		return nil
	}
	w.Nodes = append([]nodes.Node{&nodes.ControlStructureBlock{Location: w.Location, Name: "budget",
		ControlStructure: budgetBody{at: w.Location}}}, w.Nodes...)
	return t.nodes(w.Nodes[1:])
}

func (t *budgetTree) wrapper(w *nodes.Wrapper) error {
	if w == nil {
		return nil
	}
	return t.nodes(w.Nodes)
}

func (t *budgetTree) node(n nodes.Node) error {
	switch n := n.(type) {
	case *nodes.Data, *nodes.Comment:
		return nil
	case *nodes.Output:
		n.Expression = t.out(t.expr(n.Expression))
		n.Condition, n.Alternative = t.expr(n.Condition), t.out(t.expr(n.Alternative))
		return nil
	case *nodes.ControlStructureBlock:
		return t.control(n)
	case *nodes.Wrapper:
		return t.wrapper(n)
	}
	return fmt.Errorf("a chat template cannot hold %T", n)
}

func (t *budgetTree) control(b *nodes.ControlStructureBlock) error {
	switch cs := b.ControlStructure.(type) {
	case *controlStructures.IfControlStructure:
		for i := range cs.Conditions {
			cs.Conditions[i] = t.expr(cs.Conditions[i])
		}
		for _, w := range cs.Wrappers {
			if err := t.wrapper(w); err != nil {
				return err
			}
		}
		return nil
	case *controlStructures.ForControlStructure:
		cs.ObjectEvaluator, cs.IfCondition = t.expr(cs.ObjectEvaluator), t.expr(cs.IfCondition)
		if err := t.wrapper(cs.BodyWrapper); err != nil {
			return err
		}
		return t.wrapper(cs.EmptyWrapper)
	case boundedMacro:
		for _, kw := range cs.Kwargs {
			kw.Value = t.expr(kw.Value)
		}
		return t.body(cs.Wrapper)
	case *chatSet:
		cs.expr, cs.cond, cs.alt = t.expr(cs.expr), t.expr(cs.cond), t.expr(cs.alt)
		if n, ok := cs.target.(*nodes.Name); ok && n.Name.Val == "none" {
			return fmt.Errorf("line %d: cannot set none (a literal, as in jinja2)", n.Name.Line)
		}
		if it, ok := cs.target.(*nodes.GetItem); ok {
			// The target stays an item to set, its parts rewritten.
			t.itemParts(it)
		} else {
			cs.target = t.expr(cs.target)
		}
		return t.body(cs.body)
	case *chatFilterBlock:
		for _, fc := range cs.chain {
			t.filterCall(fc)
		}
		return t.body(cs.body)
	case *controlStructures.CallControlStructure:
		if c, ok := t.expr(cs.Call).(*nodes.Call); ok {
			cs.Call = c
		} else {
			return fmt.Errorf("{%% call %%} of %s: not a macro call", cs.Call)
		}
		return t.body(cs.Body)
	case *controlStructures.DoControlStructure:
		cs.Expression = t.expr(cs.Expression)
		return nil
	case *controlStructures.AutoescapeControlStructure:
		return t.wrapper(cs.Wrapper)
	case *controlStructures.BreakControlStructure, *controlStructures.ContinueControlStructure, *controlStructures.RawControlStructure:
		return nil
	}
	return fmt.Errorf("{%% %s %%} is not available in a chat template", b.Name)
}

func (t *budgetTree) filterCall(fc *nodes.FilterCall) {
	for i := range fc.Args {
		fc.Args[i] = t.expr(fc.Args[i])
	}
	for k, v := range fc.Kwargs {
		fc.Kwargs[k] = t.expr(v)
	}
}

// itemParts rewrites an item access's object and key.
func (t *budgetTree) itemParts(n *nodes.GetItem) {
	if x, ok := n.Node.(nodes.Expression); ok {
		n.Node = t.expr(x)
	}
	if x, ok := n.Arg.(nodes.Expression); ok {
		n.Arg = t.expr(x)
	}
}

// call is a call of one of budgetFuncs at a template position (callNode),
// the template's start when the node has none.
func call(fn string, at *tokens.Token, args ...nodes.Expression) *nodes.Call {
	if at == nil {
		at = &tokens.Token{}
	}
	return callNode(at, fn, args...)
}

// cmpSide wraps a side of <, >, <=, >= in budgetCmpSide.
func (t *budgetTree) cmpSide(e nodes.Expression) nodes.Expression {
	switch e.(type) {
	case nil, *nodes.String, *nodes.Integer, *nodes.Float, *nodes.Bool, *nodes.None:
		return e
	}
	return call(budgetCmpFunc, e.Position(), e)
}

// out wraps an output's expression in budgetOut.
func (t *budgetTree) out(e nodes.Expression) nodes.Expression {
	switch e.(type) {
	case nil, *nodes.String, *nodes.Integer, *nodes.Float, *nodes.Bool, *nodes.None:
		return e
	}
	return call(budgetOutFunc, e.Position(), e)
}

func (t *budgetTree) expr(e nodes.Expression) nodes.Expression {
	if e == nil {
		return nil
	}
	if r, ok := t.done[e]; ok {
		return r
	}
	r := t.rewrite(e)
	t.done[e] = r
	return r
}

func (t *budgetTree) rewrite(e nodes.Expression) nodes.Expression {
	switch n := e.(type) {
	case *nodes.None:
		// None, not undefined (chatnone.go).
		return noneName(n.Location)
	case *nodes.Name:
		if n.Name.Val == "none" {
			return noneName(n.Name) // jinja2's lower-case literal; gonja's is a name
		}
	case *nodes.BinaryExpression:
		n.Left, n.Right = t.expr(n.Left), t.expr(n.Right)
		switch n.Operator.Token.Type {
		case tokens.Addition:
			return call(budgetAddFunc, n.Operator.Token, n.Left, n.Right)
		case tokens.Tilde:
			return call(budgetCatFunc, n.Operator.Token, n.Left, n.Right)
		case tokens.Multiply:
			return call(budgetMulFunc, n.Operator.Token, n.Left, n.Right)
		case tokens.Subtraction, tokens.Division, tokens.FloorDivision, tokens.Modulo, tokens.Power:
			// Python's arithmetic (chatint.go).
			return call(budgetArithFunc, n.Operator.Token, opName(n.Operator.Token), n.Left, n.Right)
		case tokens.Equals, tokens.Ne:
			// a == b is the test a is == b: the same comparison, its
			// work counted (eqTest).
			name := "=="
			if n.Operator.Token.Type == tokens.Ne {
				name = "!="
			}
			return &nodes.TestExpression{Expression: n.Left, Test: &nodes.TestCall{Token: n.Operator.Token, Name: name,
				Args: []nodes.Expression{n.Right}, Kwargs: map[string]nodes.Expression{}}}
		case tokens.LowerThan, tokens.GreaterThan, tokens.LowerThanOrEqual, tokens.GreaterThanOrEqual:
			// Against a string, gonja compares the other side's text:
			// a list's, built first.
			n.Left, n.Right = t.out(n.Left), t.out(n.Right)
			// Two strings compare byte by byte: each side's length
			// charged (budgetCmpSide).
			n.Left, n.Right = t.cmpSide(n.Left), t.cmpSide(n.Right)
		}
	case *nodes.UnaryExpression:
		n.Term = t.expr(n.Term)
		if n.Negative {
			neg := &tokens.Token{Type: tokens.String, Val: "neg"}
			return call(budgetArithFunc, n.Operator, &nodes.String{Location: neg, Val: "neg"}, n.Term)
		}
	case *nodes.Negation:
		n.Term = t.expr(n.Term)
	case *nodes.FilteredExpression:
		n.Expression = t.expr(n.Expression)
		for _, fc := range n.Filters {
			t.filterCall(fc)
		}
	case *nodes.TestExpression:
		n.Expression = t.expr(n.Expression)
		if n.Test != nil {
			for i := range n.Test.Args {
				n.Test.Args[i] = t.expr(n.Test.Args[i])
			}
			for k, v := range n.Test.Kwargs {
				n.Test.Kwargs[k] = t.expr(v)
			}
		}
	case *nodes.Call:
		if ga, ok := n.Func.(*nodes.GetAttribute); ok && mutatingMethods[ga.Attribute] && t.err == nil {
			line := 0
			if n.Location != nil {
				line = n.Location.Line
			}
			t.err = fmt.Errorf("line %d: .%s() changes a list or dict in place, which a chat template cannot do "+
				"(Hugging Face's renderer, jinja2's immutable sandbox, refuses it too); build a new value instead, "+
				"as in {%% set ns.items = ns.items + [item] %%}", line, ga.Attribute)
		}
		for i := range n.Args {
			n.Args[i] = t.expr(n.Args[i])
		}
		for k, v := range n.Kwargs {
			n.Kwargs[k] = t.expr(v)
		}
		if ga, ok := n.Func.(*nodes.GetAttribute); ok && n.Parent != nil && budgetStrMethods[ga.Attribute] {
			// s.replace(a, b) -> __sluice_str_method('replace', s, a, b)
			self := t.expr(ga.Node)
			c := call(budgetMethodFunc, n.Location, append([]nodes.Expression{&nodes.String{Location: &tokens.Token{Type: tokens.String, Val: ga.Attribute}, Val: ga.Attribute}, self}, n.Args...)...)
			c.Kwargs = n.Kwargs
			return c
		}
		if ga, ok := n.Func.(*nodes.GetAttribute); ok && n.Parent != nil && budgetDictMethods[ga.Attribute] {
			// d.items() -> __sluice_dict_method('items', d)
			self := t.expr(ga.Node)
			c := call(budgetDictMethodFunc, n.Location, append([]nodes.Expression{&nodes.String{Location: &tokens.Token{Type: tokens.String, Val: ga.Attribute}, Val: ga.Attribute}, self}, n.Args...)...)
			c.Kwargs = n.Kwargs
			return c
		}
		if f, ok := n.Func.(nodes.Expression); ok {
			n.Func = t.expr(f)
		}
		if p, ok := n.Parent.(nodes.Expression); ok {
			n.Parent = t.expr(p)
		}
	case *nodes.GetItem:
		t.itemParts(n)
		x, ok1 := n.Node.(nodes.Expression)
		k, ok2 := n.Arg.(nodes.Expression)
		if ok1 && ok2 {
			// Python's indexing (chatitem.go), not gonja's.
			return call(budgetItemFunc, n.Location, x, k)
		}
	case *nodes.GetAttribute:
		if x, ok := n.Node.(nodes.Expression); ok {
			n.Node = t.expr(x)
		}
	case *nodes.GetSlice:
		if x, ok := n.Node.(nodes.Expression); ok {
			n.Node = sliceRead(n, t.expr(x))
		}
		n.Start, n.End, n.Step = t.expr(n.Start), t.expr(n.End), t.expr(n.Step)
	case *nodes.List:
		for i := range n.Val {
			n.Val[i] = t.expr(n.Val[i])
		}
	case *nodes.Tuple:
		for i := range n.Val {
			n.Val[i] = t.expr(n.Val[i])
		}
		// A tuple, not gonja's list (chatprint.go).
		return call(tupleFunc, n.Location, n.Val...)
	case *nodes.Dict:
		for _, p := range n.Pairs {
			p.Key, p.Value = t.expr(p.Key), t.expr(p.Value)
		}
	case *nodes.Pair:
		n.Key, n.Value = t.expr(n.Key), t.expr(n.Value)
	}
	return e
}

// chatSet is Jinja's {% set %}: "set x = expr [if cond else alt]", on a
// name, a namespace's attribute or an item, or the block form "set x"
// ... "endset" whose body's text is the value. gonja's own keeps its
// expressions and body out of reach, and both must be counted.
type chatSet struct {
	at              *tokens.Token
	target          nodes.Expression
	expr, cond, alt nodes.Expression
	body            *nodes.Wrapper
}

func (s *chatSet) Position() *tokens.Token { return s.at }
func (s *chatSet) String() string {
	return fmt.Sprintf("set (line %d col %d)", s.at.Line, s.at.Col)
}

func parseChatSet(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
	s := &chatSet{at: p.Current()}
	target, err := args.ParseVariableOrLiteral()
	if err != nil {
		return nil, err
	}
	switch target.(type) {
	case *nodes.Name, *nodes.GetAttribute, *nodes.GetItem:
		s.target = target
	default:
		return nil, args.Error(fmt.Sprintf("cannot set %s", target), nil)
	}
	if args.Match(tokens.Assign) == nil {
		if !args.End() {
			return nil, args.Error("expected '=' or the end of the tag (a {% set %} block)", args.Current())
		}
		body, end, err := p.WrapUntil("endset")
		if err != nil {
			return nil, err
		}
		if !end.End() {
			return nil, end.Error("endset takes no arguments", nil)
		}
		s.body = body
		return s, nil
	}
	if s.expr, err = args.ParseExpression(); err != nil {
		return nil, err
	}
	if s.cond, s.alt, err = args.ParseCondition(); err != nil {
		return nil, err
	}
	if s.cond != nil && s.alt == nil {
		return nil, args.Error("a conditional {% set %} needs its else", args.Current())
	}
	if !args.End() {
		return nil, args.Error("malformed {% set %}", args.Current())
	}
	return s, nil
}

func (s *chatSet) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	var value *exec.Value
	switch {
	case s.body != nil:
		var buf bytes.Buffer
		sub := r.Inherit()
		sub.Output = &buf
		if err := sub.ExecuteWrapper(s.body); err != nil {
			return err
		}
		value = exec.AsSafeValue(buf.String())
	case s.cond != nil:
		if c := r.Eval(s.cond); c.IsError() {
			return c
		} else if c.IsTrue() {
			value = r.Eval(s.expr)
		} else {
			value = r.Eval(s.alt)
		}
	default:
		value = r.Eval(s.expr)
	}
	if value.IsError() {
		return value
	}
	switch n := s.target.(type) {
	case *nodes.Name:
		r.Environment.Context.Set(n.Name.Val, value.Interface())
		return nil
	case *nodes.GetAttribute:
		target := r.Eval(n.Node)
		if target.IsError() {
			return target
		}
		return target.Set(exec.AsValue(n.Attribute), value.Interface())
	case *nodes.GetItem:
		target := r.Eval(n.Node)
		if target.IsError() {
			return target
		}
		key := r.Eval(n.Arg)
		if key.IsError() {
			return key
		}
		return target.Set(key, value.Interface())
	}
	return fmt.Errorf("cannot set %s", s.target)
}

// chatFilterBlock is Jinja's {% filter f | g %} ... {% endfilter %}: the
// body's text through the filters, written.
type chatFilterBlock struct {
	at    *tokens.Token
	body  *nodes.Wrapper
	chain []*nodes.FilterCall
}

func (f *chatFilterBlock) Position() *tokens.Token { return f.at }
func (f *chatFilterBlock) String() string {
	return fmt.Sprintf("filter (line %d col %d)", f.at.Line, f.at.Col)
}

func parseChatFilterBlock(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
	f := &chatFilterBlock{at: p.Current()}
	body, _, err := p.WrapUntil("endfilter")
	if err != nil {
		return nil, err
	}
	f.body = body
	for !args.End() {
		fc, err := args.ParseFilter()
		if err != nil {
			return nil, err
		}
		f.chain = append(f.chain, fc)
		if args.Match(tokens.Pipe) == nil {
			break
		}
	}
	if !args.End() || len(f.chain) == 0 {
		return nil, args.Error("malformed {% filter %}: give filters, as in {% filter upper | trim %}", nil)
	}
	return f, nil
}

func (f *chatFilterBlock) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	var out strings.Builder
	sub := r.Inherit()
	sub.Output = &out
	if err := sub.ExecuteWrapper(f.body); err != nil {
		return err
	}
	value := exec.AsValue(out.String())
	for _, fc := range f.chain {
		if value = r.Evaluator().ExecuteFilter(fc, value); value.IsError() {
			return value
		}
	}
	_, err := io.WriteString(r.Output, value.String())
	return err
}

// opName is an arithmetic operator's text as a string node, for pyArith.
func opName(op *tokens.Token) *nodes.String {
	return &nodes.String{Location: &tokens.Token{Type: tokens.String, Val: op.Val, Line: op.Line, Col: op.Col, Pos: op.Pos}, Val: op.Val}
}
