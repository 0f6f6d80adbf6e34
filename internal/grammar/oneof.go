package grammar

import (
	"bytes"
	"fmt"
	"math/big"
	"slices"
	"strings"
)

// oneOf is compiled as anyOf, which is exact only when no value the
// grammar writes for one branch is accepted by another: then every output
// matches its own branch and no other, as oneOf demands. The compiler
// proves that before it accepts a oneOf, on an over-approximation (a
// shape) of two sets per branch: what its grammar may write (gen) and
// what a validator accepts (acc). Branch i excludes branch j when gen(i)
// and acc(j) are disjoint. The proofs that cover what schema generators
// emit:
//   - different JSON types (a string branch, an integer branch, null);
//   - const/enum values, compared as JSON values (1 and 1.0 are equal);
//   - a property every object of both branches has (required) whose
//     values are disjoint: a discriminator, as Pydantic writes
//     ("pet_type": {"const": "cat"} in one branch, "dog" in the other);
//   - a property one branch requires that the other never has (its
//     grammar writes only declared properties; a validator with
//     additionalProperties false accepts only declared ones).
//
// Anything the shapes cannot tell apart is refused, naming the two
// branches: sluice never writes a value that matches two of them.

// typeSet is a set of JSON types; numbers are split into integer-valued
// ones (1, 1.0: what "integer" accepts) and the others (1.5).
type typeSet uint8

const (
	tNull typeSet = 1 << iota
	tBool
	tObject
	tArray
	tString
	tInt
	tFrac
	tAll = tNull | tBool | tObject | tArray | tString | tInt | tFrac
)

func typeBits(t string) typeSet {
	switch t {
	case "null":
		return tNull
	case "boolean":
		return tBool
	case "object":
		return tObject
	case "array":
		return tArray
	case "string":
		return tString
	case "integer":
		return tInt
	case "number":
		return tInt | tFrac
	}
	return tAll
}

// typeNames lists the schema type names within t.
func typeNames(t typeSet) []string {
	var out []string
	for _, n := range []string{"null", "boolean", "object", "array", "string", "integer", "number"} {
		if typeBits(n)&t == typeBits(n) {
			out = append(out, n)
		}
	}
	return out
}

// typeOf is the type of a JSON value.
func typeOf(v *node) typeSet {
	switch v.kind {
	case 'z':
		return tNull
	case 'b':
		return tBool
	case 'o':
		return tObject
	case 'a':
		return tArray
	case 's':
		return tString
	}
	num := string(v.num)
	if !strings.ContainsAny(num, ".eE") {
		return tInt // the common case, without normNum's allocations
	}
	if _, isInt := normNum(num); isInt {
		return tInt
	}
	return tFrac
}

// normNum is a JSON number's exact canonical form (sign, significant
// digits, exponent) and whether it is an integer. It does no arithmetic
// on the value: big.Rat would build 10^999999999 for "1e999999999".
func normNum(s string) (string, bool) {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	mant, exp, _ := strings.Cut(strings.ToLower(s), "e")
	ip, fp, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(ip+fp, "0")
	e := new(big.Int)
	if exp != "" {
		if _, ok := e.SetString(strings.TrimPrefix(exp, "+"), 10); !ok {
			return s, false
		}
	}
	e.Sub(e, big.NewInt(int64(len(fp))))
	t := strings.TrimRight(digits, "0")
	e.Add(e, big.NewInt(int64(len(digits)-len(t))))
	if t == "" {
		return "0", true
	}
	if neg {
		t = "-" + t
	}
	return t + "e" + e.String(), e.Sign() >= 0
}

// canon is v's canonical encoding: object keys sorted, numbers as exact
// fractions, so two encodings are equal exactly when JSON Schema's
// equality (enum, const) calls the values equal.
func canon(v *node) string {
	var b bytes.Buffer
	canonTo(&b, v)
	return b.String()
}

func canonTo(b *bytes.Buffer, v *node) {
	switch v.kind {
	case 'o':
		idx := make([]int, len(v.keys))
		for i := range idx {
			idx[i] = i
		}
		slices.SortFunc(idx, func(x, y int) int { return strings.Compare(v.keys[x], v.keys[y]) })
		b.WriteByte('{')
		for n, i := range idx {
			if n > 0 {
				b.WriteByte(',')
			}
			writeString(b, v.keys[i])
			b.WriteByte(':')
			canonTo(b, v.vals[i])
		}
		b.WriteByte('}')
	case 'a':
		b.WriteByte('[')
		for i, x := range v.arr {
			if i > 0 {
				b.WriteByte(',')
			}
			canonTo(b, x)
		}
		b.WriteByte(']')
	case 'n':
		n, _ := normNum(string(v.num))
		b.WriteString(n)
	default:
		v.encode(b)
	}
}

// shape over-approximates a set of JSON values: every value of the set
// has one of types; a value of a type not in open is one of lits (by
// canon); a number of an open type lies within lo and hi (nil: no
// bound); an object of an open type has every property of req, its value
// within req's shape, and, when keys is not nil, no key outside it.
type shape struct {
	types  typeSet
	open   typeSet
	lits   map[string]*node
	lo, hi *bound
	req    map[string]*shape
	keys   map[string]bool
	// order is req's names sorted: the comparisons' work, counted
	// against a bound, must not depend on map order (the router and
	// every worker must answer alike).
	order []string
}

func (s *shape) reqOrder() []string {
	if s.order == nil && len(s.req) > 0 {
		s.order = make([]string, 0, len(s.req))
		for k := range s.req {
			s.order = append(s.order, k)
		}
		slices.Sort(s.order)
	}
	return s.order
}

var top = &shape{types: tAll, open: tAll}

const tNum = tInt | tFrac

// bound is a numeric bound, exclusive or not.
type bound struct {
	v    *big.Rat
	excl bool
}

// numBounds reads a schema's minimum/maximum (exclusive or not); a
// bound it cannot read is no bound (a larger set).
func numBounds(s *node) (lo, hi *bound) {
	for _, k := range []string{"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"} {
		x := s.get(k)
		if x == nil || x.kind != 'n' {
			continue
		}
		r := ratOf(string(x.num))
		if r == nil {
			continue
		}
		b := &bound{r, k[0] == 'e'}
		if k == "minimum" || k == "exclusiveMinimum" {
			lo = tighter(lo, b, 1)
		} else {
			hi = tighter(hi, b, -1)
		}
	}
	return lo, hi
}

// tighter is the tighter of two lower (dir 1) or upper (dir -1) bounds.
func tighter(a, b *bound, dir int) *bound {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	if c := a.v.Cmp(b.v) * dir; c > 0 || c == 0 && a.excl {
		return a
	}
	return b
}

// looser is the looser of two bounds (nil, none, is the loosest).
func looser(a, b *bound, dir int) *bound {
	if a == nil || b == nil {
		return nil
	}
	if tighter(a, b, dir) == a {
		return b
	}
	return a
}

// below reports whether every number within upper bound h is below every
// number within lower bound l.
func below(h, l *bound) bool {
	if h == nil || l == nil {
		return false
	}
	c := h.v.Cmp(l.v)
	return c < 0 || c == 0 && (h.excl || l.excl)
}

// inRange reports whether number v may lie within s's bounds.
func (s *shape) inRange(v *node) bool {
	x := ratOf(string(v.num))
	if x == nil {
		return true
	}
	return !below(&bound{x, false}, s.lo) && !below(s.hi, &bound{x, false})
}

// shaper computes the shapes of a schema's parts, each once per mode (a
// schema's $defs are reached from many branches).
type shaper struct {
	c    *compiler
	root *node
	memo [2]map[*node]*shape
	// busy marks the schemas being computed: a $ref cycle back to one
	// gets top (all values), which over-approximates anything.
	busy [2]map[*node]bool
}

func newShaper(c *compiler) *shaper {
	return &shaper{c: c, root: c.root, memo: [2]map[*node]*shape{{}, {}}, busy: [2]map[*node]bool{{}, {}}}
}

const (
	modeAcc = 0 // what a validator accepts
	modeGen = 1 // what the compiler's grammar may write
)

func (sh *shaper) of(s *node, mode int) *shape {
	switch {
	case s == nil:
		return top
	case s.kind == 'b':
		if s.b {
			return top
		}
		return &shape{}
	case s.kind != 'o':
		return top
	}
	if r, ok := sh.memo[mode][s]; ok {
		return r
	}
	if sh.busy[mode][s] {
		return top
	}
	sh.busy[mode][s] = true
	r := sh.compute(s, mode)
	delete(sh.busy[mode], s)
	sh.memo[mode][s] = r
	return r
}

func (sh *shaper) compute(s *node, mode int) *shape {
	if needsMerge(s) {
		// What the compiler compiles instead (merge.go).
		m, why := sh.c.normalize(s, 0)
		if why != "" || m == s {
			return top
		}
		return sh.of(m, mode)
	}
	if r := s.get("$ref"); r != nil {
		// Keywords beside the $ref only narrow the set: the target's
		// shape over-approximates it.
		if r.kind == 's' {
			if t, ok := resolvePointer(sh.root, r.str); ok {
				return sh.of(t, mode)
			}
		}
		return top
	}
	if a := s.get("allOf"); a != nil && a.kind == 'a' && len(a.arr) > 0 {
		r := sh.of(a.arr[0], mode)
		for _, x := range a.arr[1:] {
			r = intersect(r, sh.of(x, mode))
		}
		return r
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if a := s.get(k); a != nil && a.kind == 'a' && len(a.arr) > 0 {
			r := sh.of(a.arr[0], mode)
			for _, x := range a.arr[1:] {
				r = union(r, sh.of(x, mode))
			}
			return r
		}
	}
	r := &shape{types: tAll, open: tAll}
	if t := s.get("type"); t != nil {
		r.types = 0
		switch t.kind {
		case 's':
			r.types = typeBits(t.str)
		case 'a':
			for _, x := range t.arr {
				if x.kind == 's' {
					r.types |= typeBits(x.str)
				}
			}
		}
	} else if mode == modeGen {
		// The compiler's reading of a schema without a type.
		if ts := impliedTypes(s); ts != nil {
			r.types = 0
			for _, x := range ts {
				r.types |= typeBits(x)
			}
		}
	}
	var vals []*node
	if e := s.get("const"); e != nil {
		vals = []*node{e}
	} else if e := s.get("enum"); e != nil && e.kind == 'a' {
		vals = e.arr
	}
	if vals != nil {
		r.lits = map[string]*node{}
		var ts typeSet
		for _, v := range vals {
			// gen: what the compiler's literals keep, too (it reads
			// numbers as float64).
			t := typeOf(v)
			if t&r.types != 0 || mode == modeGen && valueHasType(v, typeNames(r.types)) {
				if k := canon(v); r.lits[k] == nil { // the first of equal values (1, 1.0)
					r.lits[k] = v
				}
				ts |= t
			}
		}
		r.types, r.open = ts, 0
		return r
	}
	r.open = r.types
	if r.types&tNum != 0 {
		// The compiler's numbers keep the bounds (integers clamped
		// to 15 digits: tighter), and a validator's do.
		r.lo, r.hi = numBounds(s)
	}
	if r.types&tObject != 0 {
		sh.object(s, mode, r)
	}
	return r
}

// object fills in what the objects of s have: the required properties'
// shapes and, when they are bounded, the keys.
func (sh *shaper) object(s *node, mode int, r *shape) {
	props := s.get("properties")
	if props != nil && props.kind != 'o' {
		props = nil
	}
	addl := s.get("additionalProperties")
	closed := addl != nil && addl.kind == 'b' && !addl.b && s.get("patternProperties") == nil
	declared := map[string]bool{}
	if props != nil {
		for _, k := range props.keys {
			declared[k] = true
		}
	}
	if rq := s.get("required"); rq != nil && rq.kind == 'a' {
		for _, x := range rq.arr {
			if x.kind != 's' {
				continue
			}
			if r.req == nil {
				r.req = map[string]*shape{}
			}
			switch {
			case declared[x.str]:
				r.req[x.str] = sh.of(props.get(x.str), mode)
			case mode == modeGen && addl != nil && addl.kind == 'o' && s.get("patternProperties") == nil:
				r.req[x.str] = sh.of(addl, mode)
			default:
				r.req[x.str] = top
			}
		}
	}
	switch {
	case closed:
		r.keys = declared
	case mode == modeGen && len(declared)+len(r.req) > 0 && s.get("propertyNames") == nil && s.get("patternProperties") == nil:
		// The grammar writes declared and required properties only
		// (with patternProperties it may add the patterns' names to
		// reach minProperties: patprops.go).
		r.keys = maps2(declared, r.req)
	}
}

func maps2(a map[string]bool, b map[string]*shape) map[string]bool {
	out := make(map[string]bool, len(a)+len(b))
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

func union(a, b *shape) *shape {
	r := &shape{types: a.types | b.types, open: a.open | b.open}
	if r.open&tNum != 0 {
		// The union's open numbers are each side's open numbers and
		// its numeric literals of a type the union has open (those
		// are not looked up in lits any more): the bounds hold them
		// all.
		alo, ahi, aok := numHull(a, r.open)
		blo, bhi, bok := numHull(b, r.open)
		switch {
		case aok && bok:
			r.lo, r.hi = looser(alo, blo, 1), looser(ahi, bhi, -1)
		case aok:
			r.lo, r.hi = alo, ahi
		case bok:
			r.lo, r.hi = blo, bhi
		}
	}
	if r.open != r.types {
		r.lits = make(map[string]*node, len(a.lits)+len(b.lits))
		for k, v := range a.lits {
			r.lits[k] = v
		}
		for k, v := range b.lits {
			r.lits[k] = v
		}
	}
	// A side with no objects at all leaves the other's required
	// properties and keys; a side whose objects are literals only has
	// neither (its req and keys are nil), so the union keeps none and
	// its literal objects stay in (they are not listed in lits once
	// objects are open).
	switch {
	case a.types&tObject == 0:
		r.req, r.keys = b.req, b.keys
	case b.types&tObject == 0:
		r.req, r.keys = a.req, a.keys
	default:
		for k, x := range a.req {
			if y, ok := b.req[k]; ok {
				if r.req == nil {
					r.req = map[string]*shape{}
				}
				r.req[k] = union(x, y)
			}
		}
		if a.keys != nil && b.keys != nil {
			r.keys = map[string]bool{}
			for k := range a.keys {
				r.keys[k] = true
			}
			for k := range b.keys {
				r.keys[k] = true
			}
		}
	}
	return r
}

// numHull is the bounds of x's numbers of a type in open: its open
// numbers' bounds widened to hold its numeric literals of such a type;
// ok false when it has none.
func numHull(x *shape, open typeSet) (lo, hi *bound, ok bool) {
	if x.open&tNum != 0 {
		lo, hi, ok = x.lo, x.hi, true
	}
	for _, v := range x.lits {
		if v.kind != 'n' || typeOf(v)&open == 0 {
			continue
		}
		n := ratOf(string(v.num))
		if n == nil {
			return nil, nil, true // a value not read: no bound
		}
		b := &bound{v: n}
		if !ok {
			lo, hi, ok = b, b, true
			continue
		}
		lo, hi = looser(lo, b, 1), looser(hi, b, -1)
	}
	return lo, hi, ok
}

// intersect over-approximates the values in both a and b (each part of
// it holds for one of them).
func intersect(a, b *shape) *shape {
	r := &shape{types: a.types & b.types, open: a.open & b.open, req: a.req, keys: a.keys,
		lo: tighter(a.lo, b.lo, 1), hi: tighter(a.hi, b.hi, -1)}
	if r.open != r.types {
		r.lits = make(map[string]*node, len(a.lits)+len(b.lits))
		for k, v := range a.lits {
			r.lits[k] = v
		}
		for k, v := range b.lits {
			r.lits[k] = v
		}
	}
	if len(b.req) > 0 {
		r.req = make(map[string]*shape, len(a.req)+len(b.req))
		for k, x := range a.req {
			r.req[k] = x
		}
		for k, y := range b.req {
			if _, ok := r.req[k]; !ok {
				r.req[k] = y
			}
		}
	}
	if r.keys == nil {
		r.keys = b.keys
	}
	return r
}

// mayHold reports whether value v may be in s.
func mayHold(s *shape, key string, v *node) bool {
	t := typeOf(v)
	switch {
	case t&s.types == 0:
		return false
	case t&s.open == 0:
		_, ok := s.lits[key]
		return ok
	case v.kind == 'n':
		return s.inRange(v)
	case v.kind != 'o':
		return true
	}
	for _, p := range s.reqOrder() {
		x := v.get(p)
		if x == nil || !mayHold(s.req[p], canon(x), x) {
			return false
		}
	}
	if s.keys != nil {
		for _, k := range v.keys {
			if !s.keys[k] {
				return false
			}
		}
	}
	return true
}

// disjoint reports whether no value is in both g and a, spending work
// (a unit per comparison); it answers false when work runs out. Per
// type: where one side is a list of values, each is looked up in the
// other; where both are open, numbers are told apart by their bounds
// and objects by a required property.
func disjoint(g, a *shape, work *int) bool {
	*work--
	if *work < 0 {
		return false
	}
	common := g.types & a.types
	if common == 0 {
		return true
	}
	if len(a.lits) < len(g.lits) {
		g, a = a, g // disjointness is symmetric: list the shorter
	}
	gFin := common &^ g.open
	aFin := common &^ a.open &^ gFin
	both := common &^ gFin &^ aFin
	if both&^(tObject|tNum) != 0 {
		return false
	}
	if both&tNum != 0 && !below(g.hi, a.lo) && !below(a.hi, g.lo) {
		return false // numbers of both sides may meet
	}
	if gFin|aFin != 0 {
		// Every literal is looked at (a true answer) or the first
		// that may hold ends it (false), so the work does not depend
		// on map order.
		if gFin != 0 {
			*work -= len(g.lits)
		}
		if aFin != 0 {
			*work -= len(a.lits)
		}
		if *work < 0 {
			return false
		}
		for k, v := range g.lits {
			if typeOf(v)&gFin != 0 && mayHold(a, k, v) {
				return false
			}
		}
		for k, v := range a.lits {
			if typeOf(v)&aFin != 0 && mayHold(g, k, v) {
				return false
			}
		}
	}
	if both&tObject == 0 {
		return true
	}
	for _, p := range g.reqOrder() {
		if a.keys != nil && !a.keys[p] {
			return true
		}
		if y, ok := a.req[p]; ok && disjoint(g.req[p], y, work) {
			return true
		}
	}
	for _, p := range a.reqOrder() {
		if g.keys != nil && !g.keys[p] {
			return true
		}
	}
	return false
}

// maxOneOfWork bounds the comparisons spent proving a schema's oneOfs
// exclusive (pairs of branches times what each pair compares).
const maxOneOfWork = 2 << 20

// shaper is the compile's shaper, made on first use.
func (c *compiler) shaper() *shaper {
	if c.shapes == nil {
		c.shapes = newShaper(c)
		c.oneOfWork = maxOneOfWork
	}
	return c.shapes
}

// exclusive returns "" when the branches of a oneOf (at path) exclude
// each other, else why not.
func (c *compiler) exclusive(branches []*node, path string) string {
	sh := c.shaper()
	n := len(branches)
	gen := make([]*shape, n)
	acc := make([]*shape, n)
	for i, b := range branches {
		gen[i], acc[i] = sh.of(b, modeGen), sh.of(b, modeAcc)
	}
	if discriminated(gen, acc) {
		return ""
	}
	// Branches that are lists of values (enum, const) are compared with
	// each other in one pass; pairs with another branch one by one.
	var fin []int
	isFin := make([]bool, n)
	for i := range n {
		if gen[i].open == 0 && acc[i].open == 0 {
			fin = append(fin, i)
			isFin[i] = true
		}
	}
	if len(fin) > 1 {
		i, j, ok := litsExclusive(len(fin), func(i int) map[string]*node { return gen[fin[i]].lits }, func(j int) map[string]*node { return acc[fin[j]].lits })
		if !ok {
			return overlap(path, min(fin[i], fin[j]), max(fin[i], fin[j]))
		}
	}
	for i := range n {
		for j := i + 1; j < n; j++ {
			if isFin[i] && isFin[j] {
				continue
			}
			if !disjoint(gen[i], acc[j], &c.oneOfWork) || !disjoint(gen[j], acc[i], &c.oneOfWork) {
				if c.oneOfWork < 0 {
					return fmt.Sprintf("%s/oneOf has too many branches to prove in time that no value matches two of them; use anyOf if a value may match several", path)
				}
				return overlap(path, i, j)
			}
		}
	}
	return ""
}

func overlap(path string, i, j int) string {
	return fmt.Sprintf("%s/oneOf/%d and %s/oneOf/%d may both match one value (sluice accepts oneOf when its branches exclude each other: different types, different const/enum values, or a required property whose const/enum values differ in every branch, as a discriminator); use anyOf if a value may match several", path, i, path, j)
}

func all(xs []*shape, f func(*shape) bool) bool {
	for _, x := range xs {
		if !f(x) {
			return false
		}
	}
	return true
}

// litsExclusive checks, in one pass over the values, that no value of
// gen(i) is in acc(j) for j != i; if one is, it returns i and j.
func litsExclusive(n int, gen, acc func(int) map[string]*node) (int, int, bool) {
	owner := map[string]int{} // value -> the branch accepting it, -1 - j: several, j among them
	for j := range n {
		for k := range acc(j) {
			if o, ok := owner[k]; ok && o != j {
				owner[k] = -1 - j
			} else if !ok {
				owner[k] = j
			}
		}
	}
	for i := range n {
		for k := range gen(i) {
			o, ok := owner[k]
			switch {
			case !ok || o == i:
			case o >= 0:
				return i, o, false
			case -1-o != i:
				return i, -1 - o, false
			default:
				// accepted by i and by another: find it
				for j := range n {
					if _, ok := acc(j)[k]; ok && j != i {
						return i, j, false
					}
				}
			}
		}
	}
	return 0, 0, true
}

// discriminated is the common case answered without comparing every
// pair: every branch writes only objects, and a property all of them
// require has literal values in each, no value of one branch's grammar
// accepted by another branch.
func discriminated(gen, acc []*shape) bool {
	if !all(gen, func(x *shape) bool { return x.types == tObject && x.open == tObject }) {
		return false
	}
	for _, p := range gen[0].reqOrder() {
		has := func(x *shape) bool { return x.req[p] != nil && x.req[p].open == 0 }
		if !all(gen, has) || !all(acc, has) {
			continue
		}
		if _, _, ok := litsExclusive(len(gen), func(i int) map[string]*node { return gen[i].req[p].lits }, func(j int) map[string]*node { return acc[j].req[p].lits }); ok {
			return true
		}
	}
	return false
}
