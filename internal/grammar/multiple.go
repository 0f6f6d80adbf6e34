package grammar

import (
	"fmt"
	"math/big"
	"strings"
)

// multipleOf. An integer is a multiple of p/q (in lowest terms) exactly
// when p divides it, so an integer schema's multipleOf is the divisor p:
// the grammar writes the numerals of the bounds' range that p divides, a
// remainder automaton run over the digits from the left. A number schema
// takes an integer multipleOf (its multiples are integers) or a power of
// ten 10^-k (at most k decimals); other steps (0.25) are refused.

// maxStepDigits bounds the significant digits of a multipleOf.
const maxStepDigits = 30

// ratio reads a multipleOf as an exact fraction, without building the
// huge powers of ten a value such as 1e999999999 would ask big.Rat for.
func (c *compiler) ratio(m *node, path string) *big.Rat {
	if m.kind != 'n' {
		c.bad(path+"/multipleOf", "multipleOf must be a number above 0")
		return nil
	}
	n, _ := normNum(string(m.num))
	digits, exp, _ := strings.Cut(n, "e")
	if n == "0" || strings.HasPrefix(digits, "-") {
		c.bad(path+"/multipleOf", "multipleOf must be a number above 0")
		return nil
	}
	if len(digits) > maxStepDigits {
		c.unsupported(path+"/multipleOf", "multipleOf %s has more than %d significant digits", m.num, maxStepDigits)
		return nil
	}
	e, _ := new(big.Int).SetString(exp, 10)
	// Past 10^16 nothing but 0 is a multiple within 15 digits; below
	// 10^-120 the numerator (digits < 10^30 < 2^100) is what dividing
	// by 10^120 leaves, as by any larger power.
	switch {
	case e.Cmp(big.NewInt(16)) > 0:
		e.SetInt64(16)
	case e.Cmp(big.NewInt(-120)) < 0:
		e.SetInt64(-120)
	}
	r, ok := new(big.Rat).SetString(digits + "e" + e.String())
	if !ok {
		c.bad(path+"/multipleOf", "multipleOf must be a number above 0")
		return nil
	}
	return r
}

// decimalStep reports whether r is 10^-k, and k.
func decimalStep(r *big.Rat) (int, bool) {
	if r.Num().Cmp(big.NewInt(1)) != 0 {
		return 0, false
	}
	s := r.Denom().String()
	if s[0] != '1' || strings.Trim(s[1:], "0") != "" {
		return 0, false
	}
	return len(s) - 1, true
}

// divisor is the integer p whose multiples an integer schema's
// multipleOf allows: 1 without one; maxMagnitude+1 when only 0 is.
func (c *compiler) divisor(s *node, path string) uint64 {
	m := s.get("multipleOf")
	if m == nil {
		return 1
	}
	r := c.ratio(m, path)
	if r == nil {
		return 1
	}
	p := r.Num()
	if !p.IsUint64() || p.Uint64() > maxMagnitude {
		return maxMagnitude + 1
	}
	return p.Uint64()
}

// multiples is the numerals within [lo, hi] that d divides.
func (c *compiler) multiples(d uint64, lo, hi int64, path string) []item {
	m := &modGen{c: c, d: d, free: map[[2]uint64]int32{}}
	var alts [][]item
	if lo < 0 {
		for _, a := range m.uintRange(uint64(max(1, -hi)), uint64(-lo)) {
			alts = append(alts, seq(c.b.lit("-"), a))
		}
	}
	if hi >= 0 {
		alts = append(alts, m.uintRange(uint64(max(lo, 0)), uint64(hi))...)
	}
	if c.b.err != nil && c.err == nil {
		c.fail("grammar_too_large", "%s: multipleOf %d needs more than the allowed grammar size for integers of up to %d digits; narrow the range with minimum/maximum", path, d, MaxIntDigits)
	}
	if c.failed() {
		return nil
	}
	if len(alts) == 0 {
		return c.none(path, "no multiple of %d lies within the bounds", d)
	}
	return []item{ref(c.b.rule(alts...))}
}

// modGen builds numerals by their remainder modulo d. A state (n, t) is
// the strings of n digits (leading zeros allowed) whose value is t modulo
// d; states that hold no string are dead and never referenced.
type modGen struct {
	c    *compiler
	d    uint64
	free map[[2]uint64]int32 // (n, t) -> rule; -1: dead
}

// p10 is 10^n mod d.
func (m *modGen) p10(n int) uint64 {
	p := uint64(1) % m.d
	for range n {
		p = p * 10 % m.d
	}
	return p
}

// sub is t - x modulo d.
func (m *modGen) sub(t, x uint64) uint64 { return (t + m.d - x%m.d) % m.d }

// state is the items of state (n, t), ok false when it is dead.
func (m *modGen) state(n int, t uint64) ([]item, bool) {
	if n == 0 {
		return nil, t == 0
	}
	if n <= MaxIntDigits && pow10(n) <= m.d {
		// n digits stay below d: t itself, if it has n digits.
		if t >= pow10(n) {
			return nil, false
		}
		return m.c.b.lit(fmt.Sprintf("%0*d", n, t)), true
	}
	k := [2]uint64{uint64(n), t}
	if r, ok := m.free[k]; ok {
		return []item{ref(r)}, r >= 0
	}
	alts := m.lead('0', '9', n-1, t)
	if len(alts) == 0 || m.c.b.err != nil {
		m.free[k] = -1
		return nil, false
	}
	r := m.c.b.rule(alts...)
	m.free[k] = r
	return []item{ref(r)}, true
}

// lead is a first digit within [lo, hi] followed by n digits, all of
// value t modulo d: the digits grouped by the remainder they leave.
func (m *modGen) lead(lo, hi byte, n int, t uint64) [][]item {
	p := m.p10(n)
	var alts [][]item
	var done [10]bool
	for g := lo; g <= hi; g++ {
		if done[g-'0'] || m.c.b.err != nil {
			continue
		}
		rest := m.sub(t, uint64(g-'0')*p)
		var set byteSet
		for h := g; h <= hi; h++ {
			if m.sub(t, uint64(h-'0')*p) == rest {
				set.add(h)
				done[h-'0'] = true
			}
		}
		if items, ok := m.state(n, rest); ok {
			alts = append(alts, seq([]item{m.c.b.class(set)}, items))
		}
	}
	return alts
}

// uintRange is the numerals (no leading zeros) of [a, b] that d divides.
func (m *modGen) uintRange(a, b uint64) [][]item {
	var alts [][]item
	la, lb := len(fmt.Sprint(a)), len(fmt.Sprint(b))
	for n := la; n <= lb; n++ {
		lo, hi := a, b
		if n > la {
			lo = pow10(n - 1)
		}
		if n < lb {
			hi = pow10(n) - 1
		}
		alts = append(alts, m.sameLen(fmt.Sprint(lo), fmt.Sprint(hi), 0)...)
	}
	return alts
}

// sameLen is the numerals x of the length of a and b, a <= x <= b, of
// value t modulo d (sameLen's recursion, with the remainder carried).
func (m *modGen) sameLen(a, b string, t uint64) [][]item {
	if a == "" {
		if t == 0 {
			return [][]item{nil}
		}
		return nil
	}
	n := len(a) - 1
	if strings.Trim(a[1:], "0") == "" && strings.Trim(b[1:], "9") == "" {
		return m.lead(a[0], b[0], n, t)
	}
	p := m.p10(n)
	digit := func(g byte) []item { return []item{m.c.b.byteItem(g)} }
	var out [][]item
	if a[0] == b[0] {
		for _, x := range m.sameLen(a[1:], b[1:], m.sub(t, uint64(a[0]-'0')*p)) {
			out = append(out, seq(digit(a[0]), x))
		}
		return out
	}
	for _, x := range m.sameLen(a[1:], strings.Repeat("9", n), m.sub(t, uint64(a[0]-'0')*p)) {
		out = append(out, seq(digit(a[0]), x))
	}
	if a[0]+1 <= b[0]-1 {
		out = append(out, m.lead(a[0]+1, b[0]-1, n, t)...)
	}
	for _, x := range m.sameLen(strings.Repeat("0", n), b[1:], m.sub(t, uint64(b[0]-'0')*p)) {
		out = append(out, seq(digit(b[0]), x))
	}
	return out
}
