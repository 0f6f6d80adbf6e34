package router

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// A chat template is the operator's, its messages are the tenant's: a
// template that multiplies a message (content * 1000, a loop that joins
// the messages once per message, ' ' * n, |center(n)) must give a refused
// request, never take the router's memory. The output is bounded by
// MaxRenderBytes where it is written; every value a rendering builds on
// the way (strings and lists made by operators, filters and string
// methods, and the text macros, {% set %} blocks, {% filter %} blocks and
// caller() bodies render into a buffer) is counted against one budget per
// rendering, MaxBuildBytes, and checked before it is built where its size
// can be known first (repetition, padding, join, replace, format): the
// rendering stops with ErrRenderTooLarge, a 400.
//
// How: after parsing, the template's tree is rewritten (budgetTemplate):
// the + ~ * operators become calls of budgetAdd, budgetCat and budgetMul;
// each {{ }} of something that is not a string or a number goes through
// budgetOut (its text, a list's repr, is built before it is written);
// the string methods that can grow a string past its input go through
// budgetStrMethod; and each buffered body starts with budgetBody, which
// puts a budgetWriter in front of the body's buffer. Filters are wrapped
// in the template's environment (budgetFilters).

// MaxBuildBytes bounds the strings and lists one rendering builds, all
// counted (garbage too: the bound is on the work and the memory one
// request can make a template do). Real templates build about their input
// (TestChatTemplateBuildOfRealTemplates: Qwen3 2.4x, Gemma 3 1.0x); the
// request body is at most 1 MiB by default. Four times the output bound:
// a template that writes a 64 MiB prompt has room to build it.
const MaxBuildBytes = 4 * MaxRenderBytes

// elemBytes is what one list element costs: an interface slot.
const elemBytes = 16

// maxSizeDepth bounds how deep a value's size is looked for: deeper is
// treated as too large (a list that holds itself would never end, and
// printing it would overflow the stack).
const maxSizeDepth = 512

// errBuildTooLarge: a rendering's values passed its budget.
var errBuildTooLarge = errors.New("the chat template builds more text than a rendering may")

// charge counts n bytes built; past the budget the rendering is over for
// good (a template that tests an error away, `x is defined`, still ends
// refused: RenderWith looks at over).
func (st *renderState) charge(n int64) error {
	if st.over || n < 0 || n > st.maxBuilt-st.built {
		st.over = true
		return fmt.Errorf("%w (%d bytes)", errBuildTooLarge, st.maxBuilt)
	}
	st.built += n
	return nil
}

// left is what the rendering may still build.
func (st *renderState) left() int64 { return st.maxBuilt - st.built }

// stateOf is the rendering's own state, nil when a template shadowed it
// (then the budgeted operations refuse: fail closed).
func stateOf(c *exec.Context) *renderState {
	v, _ := c.Get(renderStateVar)
	st, _ := v.(*renderState)
	return st
}

var errNoRenderState = errors.New("the chat template replaced the server's own variable " + renderStateVar)

// budgetWriter is a buffered body's output (a macro's, a {% set %}
// block's...): each write is counted before it is made.
type budgetWriter struct {
	w  io.Writer
	st *renderState
}

func (b *budgetWriter) Write(p []byte) (int, error) {
	if err := b.st.charge(int64(len(p))); err != nil {
		return 0, err
	}
	return b.w.Write(p)
}

func (b *budgetWriter) WriteString(s string) (int, error) {
	if err := b.st.charge(int64(len(s))); err != nil {
		return 0, err
	}
	return io.WriteString(b.w, s)
}

// budgetBody is the first node of a buffered body: the renderer that runs
// the body's nodes (the one Execute is given) writes through a
// budgetWriter from here on. The rendering's own output, bounded where it
// is (cappedWriter), is left alone.
type budgetBody struct{ at *tokens.Token }

func (b budgetBody) Position() *tokens.Token { return b.at }

func (b budgetBody) String() string { return "budget" }

func (b budgetBody) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	switch r.Output.(type) {
	case *cappedWriter, *budgetWriter:
		return nil
	}
	st := stateOf(r.Environment.Context)
	if st == nil {
		return errNoRenderState
	}
	r.Output = &budgetWriter{w: r.Output, st: st}
	return nil
}

// sizer finds an upper bound of the length of a value's text (what gonja's
// Value.String gives: a list as ['a', 1], a dict as {'k': 'v'}), stopping
// as soon as it passes limit: a list holding the same long string a
// million times is a small list with a huge text.
type sizer struct {
	n, limit    int64
	nodes, deep int64
}

func (s *sizer) add(k int64) bool {
	s.n += k
	return s.n <= s.limit
}

// textSize is an upper bound of len(ToValue(x).String()), or more than
// limit.
func textSize(x any, limit int64) int64 {
	s := sizer{limit: limit}
	s.walk(reflect.ValueOf(x), 0)
	return s.n
}

var (
	typeValue = reflect.TypeFor[*exec.Value]()
	typeDict  = reflect.TypeFor[*exec.Dict]()
)

func (s *sizer) walk(v reflect.Value, depth int64) bool {
	if depth > maxSizeDepth {
		s.n = s.limit + 1
		return false
	}
	s.nodes++
	s.deep = max(s.deep, depth)
	for v.IsValid() && (v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer) {
		if v.IsNil() {
			return s.add(4)
		}
		switch v.Type() {
		case typeValue:
			return s.walk(v.Interface().(*exec.Value).Val, depth)
		case typeDict:
			d := v.Interface().(*exec.Dict)
			s.add(2)
			for _, p := range d.Pairs {
				if !s.add(4) || !s.walk(reflect.ValueOf(p.Key), depth+1) || !s.walk(reflect.ValueOf(p.Value), depth+1) {
					return false
				}
			}
			return s.n <= s.limit
		}
		v = v.Elem()
	}
	if !v.IsValid() {
		return s.add(4)
	}
	switch v.Kind() {
	case reflect.String:
		return s.add(int64(v.Len()) + 2) // quoted inside a list
	case reflect.Slice, reflect.Array:
		if !s.add(2) {
			return false
		}
		for i := range v.Len() {
			if !s.add(2) || !s.walk(v.Index(i), depth+1) {
				return false
			}
		}
		return true
	case reflect.Map:
		if !s.add(2) {
			return false
		}
		it := v.MapRange()
		for it.Next() {
			if !s.add(4) || !s.walk(it.Key(), depth+1) || !s.walk(it.Value(), depth+1) {
				return false
			}
		}
		return true
	case reflect.Struct:
		// A namespace() or another object: its fields' text.
		if !s.add(16) {
			return false
		}
		for i := range v.NumField() {
			if !s.add(4) || !s.walk(v.Field(i), depth+1) {
				return false
			}
		}
		return true
	default:
		return s.add(32) // numbers, booleans, functions
	}
}

// plain reports whether a value's text is no larger than the value
// itself: a string, a number, a boolean, none.
func plain(v *exec.Value) bool {
	return v == nil || v.IsString() || v.IsNumber() || v.IsBool() || v.IsNil()
}

// textOf charges the text of v about to be built (its String()) and
// returns its size bound; a plain value costs nothing: its text is
// itself, or small.
func textOf(st *renderState, v *exec.Value) (int64, error) {
	if v == nil {
		return 0, nil
	}
	if v.IsString() {
		return int64(len(v.String())), nil
	}
	if plain(v) {
		return 32, nil
	}
	n := textSize(v, st.left())
	return n, st.charge(n)
}

// evalState is the state of the rendering e evaluates for.
func evalState(e *exec.Evaluator) (*renderState, error) {
	if st := stateOf(e.Environment.Context); st != nil {
		return st, nil
	}
	return nil, errNoRenderState
}

func twoArgs(p *exec.VarArgs) (*exec.Value, *exec.Value) {
	if len(p.Args) != 2 {
		return exec.AsValue(nil), exec.AsValue(nil)
	}
	return p.Args[0], p.Args[1]
}

// budgetAdd is a + b as gonja evaluates it (lists concatenate, a string
// on either side concatenates as text, else numbers add), counted.
func budgetAdd(e *exec.Evaluator, p *exec.VarArgs) (*exec.Value, error) {
	st, err := evalState(e)
	if err != nil {
		return nil, err
	}
	l, r := twoArgs(p)
	switch {
	case numeric(l) && numeric(r):
		return arith(e, "+", l, r) // Python's exact integers (chatint.go)
	case isBigInt(l) || isBigInt(r):
		return nil, fmt.Errorf("unsupported operands for +: %s and %s", kindOf(l), kindOf(r))
	case l.IsList():
		if !r.IsList() {
			return nil, fmt.Errorf("unable to concatenate a list to %s", kindOf(r))
		}
		n, m := l.Len(), r.Len()
		if err := st.charge(int64(n+m) * elemBytes); err != nil {
			return nil, err
		}
		out := make([]any, 0, n+m)
		for i := range n {
			out = append(out, l.Index(i).Interface())
		}
		for i := range m {
			out = append(out, r.Index(i).Interface())
		}
		return exec.AsValue(out), nil
	case l.IsFloat() || r.IsFloat():
		return exec.AsValue(l.Float() + r.Float()), nil
	case l.IsString() || r.IsString():
		return concat(st, l, r)
	}
	return exec.AsValue(l.Integer() + r.Integer()), nil
}

// budgetCat is a ~ b: both as text, concatenated, counted.
func budgetCat(e *exec.Evaluator, p *exec.VarArgs) (*exec.Value, error) {
	st, err := evalState(e)
	if err != nil {
		return nil, err
	}
	l, r := twoArgs(p)
	return concat(st, l, r)
}

func concat(st *renderState, l, r *exec.Value) (*exec.Value, error) {
	a, err := textOf(st, l)
	if err != nil {
		return nil, err
	}
	b, err := textOf(st, r)
	if err != nil {
		return nil, err
	}
	if err := st.charge(a + b); err != nil {
		return nil, err
	}
	ls, err := reprText(st, l, a)
	if err != nil {
		return nil, err
	}
	rs, err := reprText(st, r, b)
	if err != nil {
		return nil, err
	}
	return exec.AsValue(ls + rs), nil
}

// budgetMul is a * b: a string repeated (Jinja's: none for a count below
// one; gonja's strings.Repeat panicked on a negative count), counted
// before it is built, else numbers multiplied.
func budgetMul(e *exec.Evaluator, p *exec.VarArgs) (*exec.Value, error) {
	st, err := evalState(e)
	if err != nil {
		return nil, err
	}
	l, r := twoArgs(p)
	switch {
	case numeric(l) && numeric(r):
		return arith(e, "*", l, r) // Python's exact integers (chatint.go)
	case l.IsString() && isBigInt(r):
		return nil, st.charge(st.left() + 1) // more repetitions than any budget
	case l.IsFloat() || r.IsFloat():
		return exec.AsValue(l.Float() * r.Float()), nil
	case l.IsString():
		// A string count is parsed (ParseFloat reads every digit).
		if err := chargeRead(e, r, readPasses); err != nil {
			return nil, err
		}
		s, n := l.String(), r.Integer()
		if n <= 0 || s == "" {
			return exec.AsValue(""), nil
		}
		if int64(n) > st.left()/int64(len(s)) {
			return nil, st.charge(st.left() + 1)
		}
		if err := st.charge(int64(len(s)) * int64(n)); err != nil {
			return nil, err
		}
		return exec.AsValue(strings.Repeat(s, n)), nil
	}
	return exec.AsValue(l.Integer() * r.Integer()), nil
}

// budgetOut is {{ x }} for an x whose text is built to be written (a list,
// a dict): that text counted first. A string or a number is x itself.
func budgetOut(e *exec.Evaluator, p *exec.VarArgs) (*exec.Value, error) {
	if len(p.Args) != 1 {
		return nil, errors.New("budgetOut: one argument")
	}
	v := p.Args[0]
	if isNone(v) {
		return exec.AsValue("None"), nil
	}
	if plain(v) {
		return v, nil
	}
	st, err := evalState(e)
	if err != nil {
		return nil, err
	}
	n, err := textOf(st, v)
	if err != nil {
		return nil, err
	}
	if v.IsDict() || v.IsList() {
		// As Python's str() writes it (chatrepr.go).
		s, err := reprText(st, v, n)
		if err != nil {
			return nil, err
		}
		return exec.AsValue(s), nil
	}
	return v, nil
}

func kindOf(v *exec.Value) string {
	switch {
	case v.IsString():
		return "a string"
	case v.IsList():
		return "a list"
	case v.IsDict():
		return "a dict"
	case v.IsNumber():
		return "a number"
	}
	return "a value"
}

// budgetStrMethods are the string methods charged before they run: the
// ones whose result can be larger than the string and its arguments
// together by a bound of their result, every other one (init below) by
// its string's length.
var budgetStrMethods = map[string]bool{
	"replace": true, "join": true, "center": true, "ljust": true, "rjust": true,
	"zfill": true, "expandtabs": true, "format": true, "format_map": true,
	// A list of up to len(s)/2+1 parts: a 1 MiB message split on
	// every character is 16 MiB of list.
	"split": true, "rsplit": true,
}

// Every other string method goes over its string (upper() copies it,
// startswith() and find() read it; in a loop of range(n) over a long
// message that was n times its length with nothing counted): it goes
// through budgetStrMethod too, charged its string's length.
func init() {
	for _, name := range gonjaStrMethods {
		if _, ok := budgetStrMethods[name]; !ok {
			budgetStrMethods[name] = true
		}
	}
}

// budgetStrMethod is s.name(args...) for a name in budgetStrMethods: its
// result's size bounded first, then gonja's own method.
func budgetStrMethod(e *exec.Evaluator, p *exec.VarArgs) (*exec.Value, error) {
	st, err := evalState(e)
	if err != nil {
		return nil, err
	}
	if len(p.Args) < 2 {
		return nil, errors.New("budgetStrMethod: name and self")
	}
	name, self := p.Args[0].String(), p.Args[1]
	args := &exec.VarArgs{Args: p.Args[2:], KwArgs: p.KwArgs}
	if name == "format" || name == "format_map" {
		// None, lists and dicts as Python's str() (chatnone.go).
		if args, err = formatArgs(st, args); err != nil {
			return nil, err
		}
	}
	if !self.IsString() {
		return nil, fmt.Errorf("unknown method '%s' for %s", name, kindOf(self))
	}
	m, ok := e.Environment.Methods.Str.Get(name)
	if !ok {
		return nil, fmt.Errorf("unknown method '%s' for a string", name)
	}
	s := self.String()
	n := int64(len(s))
	arg := func(i int, kw string) *exec.Value {
		if i < len(args.Args) {
			return args.Args[i]
		}
		if v, ok := args.KwArgs[kw]; ok {
			return v
		}
		return nil
	}
	switch name {
	case "replace":
		old, repl := arg(0, "old"), arg(1, "new")
		if old != nil && repl != nil {
			n = replaceSize(s, old.String(), repl.String())
		}
	case "join":
		if it := arg(0, "iterable"); it != nil {
			n = joinSize(it, n, st.left())
		}
	case "center", "ljust", "rjust":
		fill := int64(1)
		if f := arg(1, "fillchar"); f != nil {
			fill = int64(len(f.String()))
		}
		if w := arg(0, "width"); w != nil && w.IsInteger() {
			n += max(0, int64(w.Integer())) * max(fill, 1)
		}
	case "zfill":
		if w := arg(0, "width"); w != nil && w.IsInteger() {
			n += max(0, int64(w.Integer()))
		}
	case "expandtabs":
		tab := int64(8)
		if t := arg(0, "tabsize"); t != nil && t.IsInteger() {
			tab = max(0, int64(t.Integer()))
		}
		n += int64(strings.Count(s, "\t")) * tab
	case "format", "format_map":
		n = formatSize(s, '{', args, st.left())
	case "split", "rsplit":
		n = splitParts(s, args) * elemBytes
	}
	if err := st.charge(n); err != nil {
		return nil, err
	}
	out, err := m(s, self, args)
	if err != nil {
		return nil, err
	}
	return exec.AsValue(out), nil
}

// replaceSize bounds len(strings.ReplaceAll(s, old, repl)).
func replaceSize(s, old, repl string) int64 {
	if old == "" {
		return int64(len(s)) + int64(utf8.RuneCountInString(s)+1)*int64(len(repl))
	}
	return int64(len(s)) + int64(strings.Count(s, old))*int64(len(repl))
}

// joinSize bounds the text of list's items joined by a separator of sep
// bytes.
func joinSize(list *exec.Value, sep, limit int64) int64 {
	if list.IsString() {
		return int64(len(list.String())) * (1 + sep)
	}
	if !list.IsList() && !list.IsDict() {
		return textSize(list, limit)
	}
	n := int64(list.Len()) * sep
	if n > limit {
		return n
	}
	return n + textSize(list, limit-n)
}

// formatSize bounds the text of a format string filled with args: the
// arguments' text, the string, and every number in a field taken as a
// width ({:>1000000} or %1000000d pads that far).
func formatSize(f string, open byte, args *exec.VarArgs, limit int64) int64 {
	n := int64(len(f))
	for _, a := range args.Args {
		n += textSize(a, limit)
	}
	for _, a := range args.KwArgs {
		n += textSize(a, limit)
	}
	in := false
	for i := 0; i < len(f) && n <= limit; i++ {
		c := f[i]
		switch {
		case open == '{' && c == '{':
			in = true
		case open == '{' && c == '}':
			in = false
		case open == '%' && c == '%':
			in = true
		case open == '%' && in && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'):
			in = false
		case in && c == '*':
			n += 1_000_000 // Go takes the width from an argument, at most 10^6
		case in && c >= '0' && c <= '9':
			w := int64(0)
			for ; i < len(f) && f[i] >= '0' && f[i] <= '9' && w <= limit; i++ {
				w = w*10 + int64(f[i]-'0')
			}
			i--
			n += w
		}
	}
	return n
}

// budgetFilters are gonja's filters, each counted: the ones whose result
// can outgrow their input (filterCost) checked before they run, every
// other one that makes a new string or list charged its result after;
// one given a list or a dict where it takes text checks that text's size
// before building it.
func budgetFilters(base *exec.FilterSet) *exec.FilterSet {
	set := exec.NewFilterSet(map[string]exec.FilterFunction{}).Update(base)
	for _, name := range gonjaFilters {
		f, ok := set.Get(name)
		if !ok {
			continue
		}
		_ = set.Replace(name, budgetFilter(name, f))
	}
	return set
}

// gonjaFilters are the names of gonja's filters (v2.9.1's list).
var gonjaFilters = []string{"abs", "attr", "batch", "capitalize", "center", "default", "d", "dictsort", "e", "escape",
	"filesizeformat", "first", "float", "forceescape", "format", "groupby", "indent", "int", "join", "items", "last",
	"length", "count", "list", "lower", "map", "max", "min", "pprint", "random", "rejectattr", "reject", "replace",
	"reverse", "round", "safe", "selectattr", "select", "slice", "sort", "string", "striptags", "sum", "title",
	"tojson", "trim", "truncate", "unique", "upper", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr"}

// keepFilters make nothing new worth counting: their result is (part of)
// their input, or a number.
var keepFilters = map[string]bool{"abs": true, "attr": true, "default": true, "d": true, "first": true, "float": true,
	"int": true, "last": true, "length": true, "count": true, "max": true, "min": true, "random": true, "round": true,
	"safe": true, "sum": true, "wordcount": true, "filesizeformat": true}

// stepFilters go over all their input's items, charged as loop steps
// (chatloops.go). length, first, last, attr and default do not (Qwen3
// asks messages|length once a message).
var stepFilters = map[string]bool{"selectattr": true, "rejectattr": true, "select": true, "reject": true,
	"map": true, "unique": true, "sort": true, "dictsort": true, "max": true, "min": true, "sum": true,
	"groupby": true, "list": true, "reverse": true}

// listFilters take a list (or iterate a string) without making its text.
var listFilters = map[string]bool{"attr": true, "batch": true, "default": true, "d": true, "dictsort": true,
	"first": true, "groupby": true, "items": true, "join": true, "last": true, "length": true, "count": true,
	"list": true, "map": true, "max": true, "min": true, "random": true, "rejectattr": true, "reject": true,
	"reverse": true, "safe": true, "selectattr": true, "select": true, "slice": true, "sort": true, "sum": true,
	"unique": true, "tojson": true, "xmlattr": true}

func budgetFilter(name string, f exec.FilterFunction) exec.FilterFunction {
	return func(e *exec.Evaluator, in *exec.Value, p *exec.VarArgs) *exec.Value {
		if in.IsError() {
			return f(e, in, p)
		}
		st, err := evalState(e)
		if err != nil {
			return exec.AsValue(err)
		}
		// None is "None" to a filter of text and to join; default
		// keeps it unless asked for a true value (chatnone.go).
		switch {
		case textFilters[name]:
			in = noneText(in)
		case name == "format":
			if p, err = formatArgs(st, p); err != nil {
				return exec.AsValue(err)
			}
		case name == "join":
			in = noneItems(in)
		case (name == "default" || name == "d") && isNone(in):
			if b := param(p, 1, "boolean"); b == nil || !b.IsTrue() {
				return in
			}
		}
		if readFilters[name] {
			// It goes over a string's characters (chatread.go).
			if err := chargeRead(e, in, readPasses); err != nil {
				return exec.AsValue(err)
			}
		}
		if stepFilters[name] {
			// It goes over every item: the loop steps' budget, or
			// messages|selectattr(..)|first in a loop over the messages
			// is n*n steps with nothing built.
			if l := loopState(e); l == nil || !l.charge(itemCount(in)) {
				return exec.AsValue(fmt.Errorf("%w (more than %d loop steps)", ErrTemplateTooMuchWork, maxLoopSteps))
			}
			// The sorts, unique, max and min compare their items'
			// text too (chatread.go).
			if err := chargeCompare(e, name, in); err != nil {
				return exec.AsValue(err)
			}
		}
		// Charged on in; run on its keys (or items) in order when it
		// is a dict (chatorder.go).
		call := st.orderedFilterInput(name, in)
		if cost, ok := filterCost(name, in, p, st.left()); ok {
			if err := st.charge(cost); err != nil {
				return exec.AsValue(err)
			}
			return f(e, call, p)
		}
		if !listFilters[name] && !plain(in) {
			if _, err := textOf(st, in); err != nil {
				return exec.AsValue(err)
			}
		}
		out := f(e, call, p)
		if !keepFilters[name] && !out.IsError() {
			if err := st.charge(madeSize(out)); err != nil {
				return exec.AsValue(err)
			}
		}
		return out
	}
}

// madeSize is what a filter's new result costs: a string's bytes, a
// list's or a dict's slots (their items are the input's).
func madeSize(v *exec.Value) int64 {
	switch {
	case v.IsString():
		return int64(len(v.String()))
	case v.IsList() || v.IsDict():
		return int64(v.Len()) * elemBytes
	}
	return 0
}

// param is a filter's argument by position or keyword, nil when absent.
func param(p *exec.VarArgs, i int, kw string) *exec.Value {
	if i < len(p.Args) {
		return p.Args[i]
	}
	if v, ok := p.KwArgs[kw]; ok {
		return v
	}
	return nil
}

func intParam(p *exec.VarArgs, i int, kw string, def int64) int64 {
	if v := param(p, i, kw); v != nil && v.IsInteger() {
		return int64(v.Integer())
	}
	return def
}

// filterCost bounds the size of what the filters that can outgrow their
// input make, before they run; ok false for the others.
func filterCost(name string, in *exec.Value, p *exec.VarArgs, limit int64) (int64, bool) {
	text := func() int64 {
		if in.IsString() {
			return int64(len(in.String()))
		}
		return textSize(in, limit)
	}
	switch name {
	case "center":
		return text() + max(0, intParam(p, 0, "width", 80)), true
	case "indent":
		width := int64(4)
		if w := param(p, 0, "width"); w != nil {
			if w.IsString() {
				width = int64(len(w.String()))
			} else if w.IsInteger() {
				width = max(0, int64(w.Integer()))
			}
		}
		if !in.IsString() {
			return text(), true // refused by indent, after its message built the text
		}
		s := in.String()
		return int64(len(s)) + int64(strings.Count(s, "\n")+1)*width, true
	case "join":
		sep := int64(0)
		if d := param(p, 0, "d"); d != nil {
			sep = textSize(d, limit)
		}
		return joinSize(in, sep, limit), true
	case "replace":
		old, repl := param(p, 0, "old"), param(p, 1, "new")
		if old == nil || repl == nil {
			return text(), true
		}
		if !in.IsString() {
			return text() * (1 + int64(len(repl.String()))), true
		}
		return replaceSize(in.String(), old.String(), repl.String()), true
	case "format":
		if !in.IsString() {
			return text() + formatSize("", '%', p, limit), true
		}
		return formatSize(in.String(), '%', p, limit), true
	case "wordwrap":
		// Each word is added to its line by copying the line: the
		// work grows with the line's width.
		n := text()
		return n + n*min(max(1, intParam(p, 0, "width", 79)), n)/2, true
	case "tojson":
		// Escapes (\u00XX, ensure_ascii's \uXXXX\uXXXX for four
		// bytes) make a byte at most six; an indent adds itself once
		// per level per line, the separators themselves once per item
		// (templateToJSON: Hugging Face's tojson(ensure_ascii, indent,
		// separators, sort_keys)).
		s := sizer{limit: limit}
		s.walk(reflect.ValueOf(in), 0)
		n := 6 * s.n
		if s.nodes == 0 {
			return n, true
		}
		if sep := param(p, 2, "separators"); sep != nil && !sep.IsNil() {
			// Both sizes stop just past limit (MaxBuildBytes at
			// most): their product fits an int64.
			n += s.nodes * textSize(sep, limit)
		}
		ind := int64(0)
		if v := param(p, 1, "indent"); v != nil && v.IsInteger() {
			ind = max(0, int64(v.Integer()))
		} else if v != nil && v.IsString() {
			ind = int64(len(v.String()))
		}
		if ind > 0 {
			if ind > limit/s.nodes/(s.deep+1) {
				return limit + 1, true
			}
			n += s.nodes * (s.deep + 1) * (ind + 1)
		}
		return n, true
	case "batch":
		n := int64(in.Len())*elemBytes*2 + elemBytes
		if param(p, 1, "fill_with") != nil {
			n += max(0, intParam(p, 0, "linecount", 0)) * elemBytes
		}
		return n, true
	case "slice":
		return int64(in.Len())*elemBytes + max(0, intParam(p, 0, "slices", 0))*elemBytes*2, true
	}
	return 0, false
}
