package grammar

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"sluice/internal/testenv"
)

// firstsByPasses is the fixed-point computation firsts replaced: every
// rule again until nothing changes. The reference its results must equal.
func firstsByPasses(g *Grammar) (nullAt []bool, firstAt []byteSet) {
	null := make([]bool, len(g.rules))
	for changed := true; changed; {
		changed = false
		for r, alts := range g.rules {
			if null[r] {
				continue
			}
			for _, s := range alts {
				ok := true
				for i := s; g.elems[i].kind != kEnd; i++ {
					if e := g.elems[i]; e.kind == kClass || !null[e.arg] {
						ok = false
						break
					}
				}
				if ok {
					null[r], changed = true, true
					break
				}
			}
		}
	}
	nullAt = make([]bool, len(g.elems))
	firstAt = make([]byteSet, len(g.elems))
	ruleFirst := make([]byteSet, len(g.rules))
	for changed := true; changed; {
		changed = false
		for r, alts := range g.rules {
			for _, s := range alts {
				end := s
				for g.elems[end].kind != kEnd {
					end++
				}
				nullAt[end] = true
				for i := end - 1; i >= s; i-- {
					e := g.elems[i]
					var f byteSet
					var n bool
					if e.kind == kClass {
						f = g.classes[e.arg]
					} else {
						f = ruleFirst[e.arg]
						if null[e.arg] {
							n = nullAt[i+1]
							f.union(&firstAt[i+1])
						}
					}
					nullAt[i], firstAt[i] = n, f
				}
				rf := ruleFirst[r]
				rf.union(&firstAt[s])
				if rf != ruleFirst[r] {
					ruleFirst[r], changed = rf, true
				}
			}
		}
	}
	return nullAt, firstAt
}

// chainSchema is n $defs, each an anyOf of a reference to the next and
// a constant, the last a string of up to pad characters: the shape that
// made the fixed point take n passes over a grammar of pad's size.
func chainSchema(n, pad int) string {
	var b strings.Builder
	b.WriteString(`{"$ref":"#/$defs/d0","$defs":{`)
	for i := range n {
		fmt.Fprintf(&b, `"d%d":{"anyOf":[{"$ref":"#/$defs/d%d"},{"const":1}]},`, i, i+1)
	}
	fmt.Fprintf(&b, `"d%d":{"type":"string","maxLength":%d}}}`, n, pad)
	return b.String()
}

// TestFirstsEqualFixedPoint: the linear firsts and nullable give every
// element the same first bytes and emptiness as the fixed point, on the
// corpus, on chains and diamonds of references, on regexes of empty
// alternatives and on random nestings.
func TestFirstsEqualFixedPoint(t *testing.T) {
	schemas := []string{
		chainSchema(50, 30), diamondSchema(30),
		`{"type":"string","pattern":"^(a?|b?)(c?|d?)(e|f?)(g|h)*x$"}`,
		`{"type":"string","pattern":"((a|)|(|b))(|c)"}`,
		`{"type":"object","properties":{"a":{},"b":{"type":"array","items":{"$ref":"#"}},"c":{"type":"number","minimum":-5,"maximum":120}}}`,
	}
	for _, c := range loadCorpus(t) {
		schemas = append(schemas, string(c.Schema))
	}
	rng := rand.New(rand.NewPCG(7, 7))
	leaves := []string{`{"type":"integer"}`, `{"type":"string","pattern":"^x?y*$"}`, `{"const":"q"}`, `{"type":"boolean"}`,
		`{"type":"array","maxItems":3}`, `{"type":"object","properties":{"k":{"type":"null"}}}`, `{"type":"number"}`}
	var gen func(d int) string
	gen = func(d int) string {
		if d == 0 || rng.IntN(4) == 0 {
			return leaves[rng.IntN(len(leaves))]
		}
		var br []string
		for range 1 + rng.IntN(3) {
			br = append(br, gen(d-1))
		}
		switch rng.IntN(3) {
		case 0:
			return `{"anyOf":[` + strings.Join(br, ",") + `]}`
		case 1:
			return `{"type":"array","prefixItems":[` + strings.Join(br, ",") + `]}`
		default:
			var ps []string
			for i, x := range br {
				ps = append(ps, fmt.Sprintf(`"p%d":%s`, i, x))
			}
			return `{"type":"object","properties":{` + strings.Join(ps, ",") + `},"required":["p0"]}`
		}
	}
	for range 200 {
		schemas = append(schemas, gen(5))
	}
	for _, s := range schemas {
		g, err := CompileSchema([]byte(s))
		if err != nil {
			t.Fatalf("%.80s: %v", s, err)
		}
		nullAt, firstAt := firstsByPasses(g)
		if !slices.Equal(nullAt, g.nullAt) || !slices.Equal(firstAt, g.firstAt) {
			t.Fatalf("%.80s: first sets differ from the fixed point", s)
		}
	}
}

// TestCompileChainOfReferences: a schema whose rules begin with one
// another in a long chain compiles in work linear in its grammar, and so
// does a diamond of references (each rule's first bytes computed once,
// not once per way to it). By passes, the 55 KB chain took 2-4 s of CPU.
func TestCompileChainOfReferences(t *testing.T) {
	for _, s := range []string{diamondSchema(24), chainSchema(1000, 20000), diamondSchema(64)} {
		cpu0 := testenv.CPUTime()
		g, err := CompileSchema([]byte(s))
		if err != nil {
			t.Fatalf("%.60s: %v", s, err)
		}
		if d := testenv.CPUTime() - cpu0; d > 500*time.Millisecond {
			t.Fatalf("%.60s (%d bytes, %d elements): compiled in %v of CPU", s, len(s), g.Size(), d)
		}
	}
}
