package grammar

import (
	"fmt"
	"strings"
	"testing"
)

// A duplicate key is refused whatever the object's size (a scan while it
// is small, a set past 16 keys), and a required name is matched against
// the declared properties by a set: a 64 KiB schema of 9,000 properties
// cost 40 million key comparisons to parse, and as many to check its
// required list.
func TestDuplicateKeysAndRequiredAtScale(t *testing.T) {
	obj := func(n, dup int) string {
		var b strings.Builder
		b.WriteString(`{"type":"object","properties":{`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"k%d":{}`, i)
		}
		if dup >= 0 {
			fmt.Fprintf(&b, `,"k%d":{}`, dup)
		}
		b.WriteString(`},"required":["k0","k3","extra"]}`)
		return b.String()
	}
	for _, n := range []int{5, 15, 16, 17, 40, 3000} {
		for _, dup := range []int{-1, 0, n / 2, n - 1} {
			_, err := CompileSchema([]byte(obj(n, dup)))
			switch {
			case dup < 0 && err != nil:
				t.Errorf("%d keys: %v", n, err)
			case dup >= 0 && (err == nil || !strings.Contains(err.Error(), "duplicate key")):
				t.Errorf("%d keys, k%d twice: %v", n, dup, err)
			}
		}
	}
	g, err := CompileSchema([]byte(obj(40, -1)))
	if err != nil {
		t.Fatal(err)
	}
	v := testVocab()
	m := Bind(g, v).NewMatcher()
	// Required: k0, k3 and extra (not declared: any value, last).
	var out strings.Builder
	for _, p := range []string{`{"`, `k`, `0`, `":`, ` `, `12`, `,`, ` "`, `k`, `3`, `":`, `-1`, `,`, ` "`, `e`, `x`, `t`, `r`, `a`, `":`, `null`, `}`} {
		if err := m.Accept(tokenOf(t, v, p)); err != nil {
			t.Fatalf("after %q: %q refused: %v", out.String(), p, err)
		}
		out.WriteString(p)
	}
	if !m.CanEnd() {
		t.Fatalf("%q is not complete", out.String())
	}
}
