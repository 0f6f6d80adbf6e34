package router

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unsafe"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// Key order. Hugging Face renders a chat template with jinja2, whose
// dicts are Python's: their keys in the order they were written. A
// client's tools reach the template as json.loads made them, so
// {{ tool | tojson }} writes a function's parameters in the order the
// client declared them ("type" before "properties", the properties in
// their order), and a template walking properties.items() lists them so.
// gonja sorts a Go map's keys wherever it goes over them, and a Go map
// has no order to keep: the model saw a prompt it was not trained on.
//
// So a request's JSON objects (tools, tool call arguments) are decoded in
// order (decodeOrdered, as *jsonObject), and each rendering turns them
// into the maps gonja's budgets and lookups expect while recording every
// map's key order (renderState.plain). What goes over a dict's keys in
// order reads it there (orderedPairs): {% for %} (loopItems), the dict
// methods (budgetDictMethod) and tojson (templateToJSON). A map the
// request did not write (a message's fields) keeps gonja's sorted order.

// jsonObject is a JSON object of a request, its keys in the order the
// client wrote them.
type jsonObject struct {
	keys []string
	vals map[string]any
}

// set puts k last unless o holds it (a repeated key keeps its place and
// takes the new value, as in a Python dict).
func (o *jsonObject) set(k string, v any) {
	if o.vals == nil {
		o.vals = map[string]any{}
	}
	if _, seen := o.vals[k]; !seen {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = v
}

// pyBigInt is an integer of a request's JSON that does not fit an int:
// its digits. Python's json.loads keeps any integer exactly and tojson
// writes it back digit for digit; a float64 would round it.
type pyBigInt string

// maxOrderedDepth bounds how deeply decodeOrdered nests, as
// encoding/json's Unmarshal does (10,000): a tool call's arguments are a
// string of the tenant's that no body decode has bounded, and each level
// is a frame of orderedScanner.value (and of every walk after it), so 1 MB
// of "[" took 128 MB of goroutine stack and seconds of the router's CPU
// (rt12). Deeper: an error (the arguments stay a string).
const maxOrderedDepth = 10000

// pyNumber is a JSON number as Python's json.loads reads it: an int
// when it has no fraction and no exponent, else a float.
func pyNumber(s string) any {
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return int(i)
		}
		return pyBigInt(s)
	}
	f, _ := strconv.ParseFloat(s, 64) // ±Inf past the range, as Python's float()
	return f
}

// plain is v as the template sees it: each *jsonObject a map (gonja's
// lookups and every budget of chatbudget*.go know maps), whose key order
// st records. A copy per rendering, of what the request holds.
func (st *renderState) plain(v any) any {
	switch x := v.(type) {
	case *jsonObject:
		m := make(map[string]any, len(x.keys))
		for _, k := range x.keys {
			m[k] = st.plain(x.vals[k])
		}
		if st.order == nil {
			st.order = map[unsafe.Pointer][]string{}
		}
		st.order[reflect.ValueOf(m).UnsafePointer()] = x.keys
		return m
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = st.plain(e)
		}
		return out
	case map[string]any:
		// A map the server built (no order to record), its nulls None.
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = st.plain(e)
		}
		return m
	case nil:
		return pyNone // JSON's null: None, not undefined (chatnone.go)
	}
	return v
}

// dictEntry is one entry of a dict.
type dictEntry struct{ k, v any }

// orderedPairs is d's entries in the order a Python dict holds them: a
// request's object in the client's order, a template's dict literal in
// its own; ok false for any other value (a map the server built, whose
// keys gonja sorts). A recorded map the template has since changed
// ({% set d['k'] = v %}) lists its recorded keys first, the others after
// in sorted order.
func (st *renderState) orderedPairs(d *exec.Value) ([]dictEntry, bool) {
	x := d.Val
	for x.IsValid() && (x.Kind() == reflect.Interface || x.Kind() == reflect.Pointer) {
		if x.IsNil() {
			return nil, false
		}
		if x.CanInterface() {
			switch w := x.Interface().(type) {
			case *exec.Value:
				return st.orderedPairs(w)
			case *exec.Dict:
				out := make([]dictEntry, len(w.Pairs))
				for i, p := range w.Pairs {
					out[i] = dictEntry{p.Key, p.Value}
				}
				return out, true
			}
		}
		x = x.Elem()
	}
	if st == nil || !x.IsValid() || x.Kind() != reflect.Map || x.Type().Key().Kind() != reflect.String {
		return nil, false
	}
	keys, ok := st.order[x.UnsafePointer()]
	if !ok {
		return nil, false
	}
	out := make([]dictEntry, 0, x.Len())
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if v := x.MapIndex(reflect.ValueOf(k).Convert(x.Type().Key())); v.IsValid() {
			out = append(out, dictEntry{k, v.Interface()})
			seen[k] = true
		}
	}
	if len(out) < x.Len() {
		var extra []string
		for _, k := range x.MapKeys() {
			if !seen[k.String()] {
				extra = append(extra, k.String())
			}
		}
		sort.Strings(extra)
		for _, k := range extra {
			out = append(out, dictEntry{k, x.MapIndex(reflect.ValueOf(k).Convert(x.Type().Key())).Interface()})
		}
	}
	return out, true
}

// dictPairs is d's entries in order (orderedPairs), or for a map the
// server built, sorted by key as gonja has them.
func (st *renderState) dictPairs(d *exec.Value) []dictEntry {
	pairs, ok := st.orderedPairs(d)
	if !ok {
		for _, k := range d.Keys() {
			v, _ := d.GetItem(k.Interface())
			pairs = append(pairs, dictEntry{k.Interface(), v})
		}
		sort.SliceStable(pairs, func(i, j int) bool { return jsonKey(pairs[i].k) < jsonKey(pairs[j].k) })
	}
	return pairs
}

// orderedDictMethod is d.name(args...) for the dict methods of
// budgetDictMethods on a dict orderedPairs knows, in its order and on
// its own values (gonja's copy of d is a Go map, sorted, and its nested
// dicts copies without their order); ok false to leave the call to
// gonja. Python's signatures: items(), keys(), values(), copy(),
// get(key[, default]).
func (st *renderState) orderedDictMethod(name string, self *exec.Value, args *exec.VarArgs) (*exec.Value, bool, error) {
	pairs, ok := st.orderedPairs(self)
	if !ok && self.IsDict() && (name == "items" || name == "keys" || name == "values") {
		// A map the server built: its views in gonja's sorted order.
		pairs, ok = st.dictPairs(self), true
	}
	if !ok {
		return nil, false, nil
	}
	n := len(args.Args)
	if len(args.KwArgs) > 0 || (name == "get" && (n < 1 || n > 2)) || (name != "get" && n > 0) {
		return nil, true, fmt.Errorf("%s(): wrong arguments (Python's dict.%s)", name, map[bool]string{true: "get(key[, default])", false: name + "()"}[name == "get"])
	}
	switch name {
	case "items", "keys", "values":
		// Python's views of the dict (chatprint.go).
		out := make([]any, len(pairs))
		for i, p := range pairs {
			switch name {
			case "items":
				out[i] = pyTuple{p.k, p.v}
			case "keys":
				out[i] = p.k
			default:
				out[i] = p.v
			}
		}
		switch name {
		case "items":
			return exec.AsValue(dictItems(out)), true, nil
		case "keys":
			return exec.AsValue(dictKeys(out)), true, nil
		}
		return exec.AsValue(dictValues(out)), true, nil
	case "get":
		k := args.Args[0]
		for _, p := range pairs {
			if exec.ToValue(p.k).EqualValueTo(k) {
				return exec.ToValue(p.v), true, nil
			}
		}
		if n == 2 {
			return args.Args[1], true, nil
		}
		return exec.AsValue(pyNone), true, nil
	case "copy":
		if d, ok := self.Interface().(*exec.Dict); ok {
			return exec.AsValue(&exec.Dict{Pairs: append([]*exec.Pair(nil), d.Pairs...)}), true, nil
		}
		m := make(map[string]any, len(pairs))
		keys := make([]string, len(pairs))
		for i, p := range pairs {
			keys[i] = p.k.(string)
			m[keys[i]] = p.v
		}
		st.order[reflect.ValueOf(m).UnsafePointer()] = keys
		return exec.AsValue(m), true, nil
	}
	return nil, false, nil
}

// keyFilters go over a dict's keys, as jinja2's iterate a dict.
var keyFilters = map[string]bool{"list": true, "join": true, "first": true, "last": true, "map": true, "select": true,
	"reject": true, "selectattr": true, "rejectattr": true, "reverse": true, "batch": true, "slice": true, "unique": true}

// orderedFilterInput is what filter name goes over when given in: a
// dict's keys in order for keyFilters (gonja sorts a map's), its
// [key, value] pairs in order for items (gonja's items went over a map
// in Go's random order, and over a dict literal not at all), in itself
// otherwise. A map the server built has no order: its keys sorted, as
// gonja has them.
func (st *renderState) orderedFilterInput(name string, in *exec.Value) *exec.Value {
	if !keyFilters[name] && name != "items" || !in.IsDict() {
		return in
	}
	pairs, ok := st.orderedPairs(in)
	if !ok {
		if name != "items" {
			return in
		}
		pairs = st.dictPairs(in)
	}
	out := make([]any, len(pairs))
	for i, p := range pairs {
		if name == "items" {
			out[i] = pyTuple{p.k, p.v}
		} else {
			out[i] = p.k
		}
	}
	return exec.AsValue(out)
}

// templateReverse is jinja2's reverse: a string's characters backwards,
// a list's items, a dict's keys (chatorder.go's order). gonja's sorted a
// list as it reversed it ([3, 1, 2]|reverse was [3, 2, 1]).
func templateReverse(e *exec.Evaluator, in *exec.Value, p *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	if len(p.Args) > 0 || len(p.KwArgs) > 0 {
		return exec.AsValue(errors.New("reverse takes no arguments"))
	}
	switch {
	case in.IsString():
		r := []rune(in.String())
		slices.Reverse(r)
		return exec.AsValue(string(r))
	case in.IsList():
		out := make([]any, in.Len())
		for i := range out {
			out[len(out)-1-i] = in.Index(i).Interface()
		}
		return exec.AsValue(out)
	case in.IsDict():
		keys := in.Keys() // sorted: orderedFilterInput gave a dict with an order as its keys
		out := make([]any, len(keys))
		for i, k := range keys {
			out[len(out)-1-i] = k.Interface()
		}
		return exec.AsValue(out)
	}
	return exec.AsValue(fmt.Errorf("reverse: %s cannot be reversed", kindOf(in)))
}

// templateToJSON is Hugging Face's tojson filter, json.dumps(x,
// ensure_ascii=False, indent=indent, separators=separators,
// sort_keys=sort_keys): dicts in their order (orderedPairs; sorted when
// sort_keys, and for the maps the server built), ", " and ": " between
// items and after keys (",", ": " with an indent), non-ASCII text as it
// is, Python's numbers (1.0, 1e+21, 1.5e-07). gonja's marshalled with Go's
// encoding/json: sorted keys, no spaces, <, >, & and ' escaped, 1.0 as 1.
// Its cost is charged before it runs (filterCost).
func templateToJSON(e *exec.Evaluator, in *exec.Value, p *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	st, err := evalState(e)
	if err != nil {
		return exec.AsValue(err)
	}
	// Charged in full before it runs (filterCost): no room to watch.
	leaves := pyJSON{}
	w := pyPrinter{st: st, itemSep: ", ", keySep: ": ", room: -1}
	// Hugging Face's signature: tojson(ensure_ascii=False, indent=None,
	// separators=None, sort_keys=False), by position or by name.
	if len(p.Args) > 4 {
		return exec.AsValue(errors.New("tojson: at most 4 arguments (ensure_ascii, indent, separators, sort_keys)"))
	}
	for k := range p.KwArgs {
		switch k {
		case "ensure_ascii", "indent", "separators", "sort_keys":
		default:
			return exec.AsValue(fmt.Errorf("tojson: unexpected argument %s (it takes ensure_ascii, indent, separators, sort_keys)", k))
		}
	}
	if v := param(p, 0, "ensure_ascii"); v != nil {
		leaves.ascii = v.IsTrue()
	}
	if v := param(p, 3, "sort_keys"); v != nil {
		w.sortKeys = v.IsTrue()
	}
	if v := param(p, 1, "indent"); v != nil {
		switch {
		case v.IsNil():
		case v.IsInteger() && v.Integer() > MaxRenderBytes:
			// Charged before (filterCost); never made.
			return exec.AsValue(fmt.Errorf("%w: tojson(indent=%d)", ErrRenderTooLarge, v.Integer()))
		case v.IsInteger():
			w.indent, w.indented = strings.Repeat(" ", max(0, v.Integer())), true
		case v.IsString():
			w.indent, w.indented = v.String(), true
		default:
			return exec.AsValue(fmt.Errorf("tojson: indent must be a number or a string, not %s", kindOf(v)))
		}
	}
	if w.indented {
		w.itemSep = ","
	}
	if s := param(p, 2, "separators"); s != nil && !s.IsNil() {
		if !s.IsList() || s.Len() != 2 || !s.Index(0).IsString() || !s.Index(1).IsString() {
			return exec.AsValue(errors.New("tojson: separators must be two strings, as in (',', ': ')"))
		}
		w.itemSep, w.keySep = s.Index(0).String(), s.Index(1).String()
	}
	w.leaves = leaves
	if err := w.value(reflect.ValueOf(in), 0); err != nil {
		return exec.AsValue(fmt.Errorf("tojson: %w", err))
	}
	return exec.AsSafeValue(w.b.String())
}

// jsonKey is a dict key as json.dumps writes it: a string as it is, a
// number as its text, True/False/None as true/false/null.
func jsonKey(k any) string {
	v := exec.ToValue(k)
	switch {
	case v.IsNil():
		return "null"
	case v.IsBool():
		return strconv.FormatBool(v.Bool())
	case v.IsFloat():
		return pyFloat(v.Float())
	}
	return v.String()
}

// pyFloat is Python's repr of a float, as json.dumps writes it: the
// shortest digits that read back the same, in positional notation when
// the exponent is from -4 to 15 (with at least one digit after the
// point: 1.0), else as 1e+21 or 1.5e-07; NaN, Infinity and -Infinity.
func pyFloat(f float64) string {
	switch {
	case f != f:
		return "NaN"
	case f > 1.7976931348623157e308:
		return "Infinity"
	case f < -1.7976931348623157e308:
		return "-Infinity"
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // -d.ddde±XX
	mant, exp, _ := strings.Cut(s, "e")
	x, _ := strconv.Atoi(exp)
	if x < -4 || x >= 16 {
		sign := "+"
		if x < 0 {
			sign, x = "-", -x
		}
		return fmt.Sprintf("%se%s%02d", mant, sign, x)
	}
	out := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(out, ".") {
		out += ".0"
	}
	return out
}
