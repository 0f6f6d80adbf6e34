package grammar

import (
	"encoding/json"
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// costlySchema is randSchema or a schema whose byte steps cost hundreds
// to thousands of units (nested {0,2} repetitions in a pattern, alone, in
// an anyOf or in an object): the steps that tiny budgets cut inside a
// byte, past memoAt (the step's memo is in use when it is cut).
func costlySchema(rng *rand.Rand) map[string]any {
	nested := func() map[string]any {
		inner := []string{"a", "ab", "[ab]"}[rng.IntN(3)]
		p := strings.Repeat(nestedRepeat(3+rng.IntN(4), inner), 1+rng.IntN(3))
		return map[string]any{"type": "string", "pattern": "^" + p + "b?$"}
	}
	switch rng.IntN(4) {
	case 0:
		return nested()
	case 1:
		var br []any
		for k := 2 + rng.IntN(4); k > 0; k-- {
			if rng.IntN(2) == 0 {
				br = append(br, nested())
			} else {
				br = append(br, randSchema(rng, 1))
			}
		}
		return map[string]any{"anyOf": br}
	case 2:
		return map[string]any{"type": "object", "additionalProperties": false, "required": []string{"p"},
			"properties": map[string]any{"p": nested(), "q": randSchema(rng, 1)}}
	default:
		return randSchema(rng, 3)
	}
}

// The grammar's steps cut into slices of any size give what they give at
// once (the property the resumable byte step must keep): on random
// schemas, costly ones included, with random vocabularies, at every
// position along random outputs, a mask computed cold in slices of 1-8
// units equals the mask computed at once (bits and Over), every slice
// stops within its budget plus one expansion, a token's check sliced
// into budgets of 1-4 units answers what the whole check answers
// (refused for MaxStacks or MaxByteWork alike) with the same work to the
// unit, the mask allows exactly the tokens the check allows, and after
// each Accept the two matchers follow the same stacks in the same order.
// For half the schemas MaxByteWork is lowered so that steps pass it
// inside a slice. Outputs that end validate against the
// schema (santhosh-tekuri/jsonschema).
func TestSlicedStepsEqualWhole(t *testing.T) {
	defer func(n int) { maxByteWork = n }(maxByteWork)
	rng := rand.New(rand.NewPCG(61, 62))
	var steps, cutChecks, cutMid, overs, ended int
	for s := 0; s < 40; s++ {
		maxByteWork = MaxByteWork
		if s%2 == 1 {
			maxByteWork = 1000 + rng.IntN(4000)
		}
		v := randVocab(rng, 600+rng.IntN(900))
		schema, err := json.Marshal(costlySchema(rng))
		if err != nil {
			t.Fatal(err)
		}
		g, err := CompileSchema(schema)
		if err != nil {
			t.Fatalf("schema %s: %v", schema, err)
		}
		slack := 2 + maxAlts(g) + (v.Words()+63)/64
		ref, cut := Bind(g, v).NewMatcher(), Bind(g, v).NewMatcher()
		whole := make([]uint64, v.Words())
		sliced := make([]uint64, v.Words())
		var out strings.Builder
		for step := 0; step < 25 && !ref.Ended(); step++ {
			steps++
			jw := ref.MaskJob(whole)
			jw.Run(1 << 40)
			j := cut.MaskJob(sliced)
			for done := false; !done; {
				budget := 1 + rng.IntN(8)
				var used int
				used, done = j.Run(budget)
				if !done && used < budget {
					t.Fatalf("schema %s after %q: a run stopped at %d of its budget %d", schema, out.String(), used, budget)
				}
				if used > budget+slack {
					t.Fatalf("schema %s after %q: a run of budget %d did %d units", schema, out.String(), budget, used)
				}
			}
			for w := range whole {
				if whole[w] != sliced[w] {
					t.Fatalf("schema %s after %q: the sliced mask differs in word %d: %x, at once %x", schema, out.String(), w, sliced[w], whole[w])
				}
			}
			if jw.Over() != j.Over() {
				t.Fatalf("schema %s after %q: sliced mask over %v, at once %v", schema, out.String(), j.Over(), jw.Over())
			}
			var allowed []int32
			for w, x := range whole {
				for ; x != 0; x &= x - 1 {
					allowed = append(allowed, int32(w*64+bits.TrailingZeros64(x)))
				}
			}
			// Checks of random tokens and of allowed ones, each once.
			seen := map[int32]bool{}
			for k := 0; k < 16; k++ {
				id := rng.Int32N(int32(v.Size()))
				if k%2 == 1 && len(allowed) > 0 {
					id = allowed[rng.IntN(len(allowed))]
				}
				if seen[id] {
					continue
				}
				seen[id] = true
				r := ref.Clone()
				wantOK, _, wantUsed := r.CheckWithin(id, 1<<40)
				var ok, done bool
				used, calls := 0, 0
				for !done {
					var u int
					ok, done, u = cut.CheckWithin(id, 1+rng.IntN(4))
					used += u
					calls++
					if calls > 1<<20 {
						t.Fatalf("schema %s after %q: the check of %q never ends", schema, out.String(), v.Piece(id))
					}
				}
				if ok != wantOK || used != wantUsed {
					t.Fatalf("schema %s after %q: %q checked in %d slices: %v after %d units; at once %v after %d", schema, out.String(), v.Piece(id), calls, ok, used, wantOK, wantUsed)
				}
				if ok != has64(whole, id) {
					t.Fatalf("schema %s after %q: %q checked %v, the mask says %v", schema, out.String(), v.Piece(id), ok, has64(whole, id))
				}
				if wr, cr := r.result(id), cut.result(id); wr != nil && cr != nil && wr.over != cr.over {
					t.Fatalf("schema %s after %q: %q over %v sliced, %v at once", schema, out.String(), v.Piece(id), cr.over, wr.over)
				} else if wr != nil && wr.over {
					overs++
				}
				if calls > 1 {
					cutChecks++
					if calls > len(v.Piece(id))+1 {
						cutMid++ // more slices than bytes: some byte's step was cut
					}
				}
			}
			if len(allowed) == 0 {
				break
			}
			id := allowed[rng.IntN(len(allowed))]
			if err := ref.Accept(id); err != nil {
				t.Fatalf("schema %s after %q: %v", schema, out.String(), err)
			}
			if err := cut.Accept(id); err != nil {
				t.Fatalf("schema %s after %q (sliced): %v", schema, out.String(), err)
			}
			out.WriteString(v.Piece(id))
			if len(ref.stacks) != len(cut.stacks) {
				t.Fatalf("schema %s after %q: %d stacks, sliced %d", schema, out.String(), len(ref.stacks), len(cut.stacks))
			}
			for i := range ref.stacks {
				if !sameStack(ref.stacks[i], cut.stacks[i]) {
					t.Fatalf("schema %s after %q: stack %d differs after sliced steps", schema, out.String(), i)
				}
			}
		}
		if ref.Ended() {
			ended++
			inst, err := jsonschema.UnmarshalJSON(strings.NewReader(out.String()))
			if err != nil {
				t.Fatalf("schema %s: %q is not JSON: %v", schema, out.String(), err)
			}
			if err := validator(t, schema).Validate(inst); err != nil {
				t.Fatalf("schema %s: %q does not validate: %v", schema, out.String(), err)
			}
		}
	}
	if cutMid == 0 || overs == 0 {
		t.Fatalf("%d checks cut inside a byte, %d refused for a bound: the test does not reach the cut step or the bound", cutMid, overs)
	}
	t.Logf("%d positions; %d checks sliced, %d of them inside a byte; %d refused for a bound; %d outputs ended and validated", steps, cutChecks, cutMid, overs, ended)
}

func has64(mask []uint64, id int32) bool { return mask[id>>6]&(1<<(id&63)) != 0 }
