package grammar

import (
	"encoding/json"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"sluice/internal/testenv"
	"sluice/internal/tokenizer"
)

// benchVocab is Qwen2's 151,646-token byte-level BPE vocabulary (the
// large-vocabulary case) or GPT-2's 50,257.
func benchVocab(b *testing.B, file string) *Vocab {
	tok, err := tokenizer.Load(testenv.Shared(b, "vocab/"+file))
	if err != nil {
		b.Fatal(err)
	}
	pieces := make([]string, tok.Size())
	for i := range pieces {
		if !tok.IsControl(int32(i)) {
			pieces[i] = tok.TokenText(int32(i))
		}
	}
	return NewVocab(pieces, tok.IsEOG)
}

// BenchmarkMask measures one full vocabulary mask per generated token
// along random valid outputs of corpus schemas (what a step costs when the
// drawn token is refused; an accepted one costs one Allowed check):
// p50/p99 per mask over the outputs after the first two (the
// per-position cache warm), the cold first two, compile time, and one
// Allowed check (the common step: the drawn token is accepted). Wall
// times on a shared machine: the p99 includes the scheduler's pauses.
func BenchmarkMask(b *testing.B) {
	for _, vf := range []string{"ggml-vocab-gpt-2.gguf", "ggml-vocab-qwen2.gguf"} {
		v := benchVocab(b, vf)
		b.Run(vf, func(b *testing.B) {
			var corpus []corpusEntry
			for _, e := range loadCorpus(b) {
				switch e.Name {
				case "openai_ui_recursive", "nested", "openai_weather", "format_datetime", "unbounded_strings":
					corpus = append(corpus, e)
				}
			}
			var warm, cold, compile, allowed []time.Duration
			rng := rand.New(rand.NewPCG(1, 2))
			mask := make([]uint64, v.Words())
			for range b.N {
				for _, e := range corpus {
					t0 := time.Now()
					g, err := CompileSchema(e.Schema)
					if err != nil {
						b.Fatal(err)
					}
					c := Bind(g, v)
					compile = append(compile, time.Since(t0))
					for run := range 4 {
						m := c.NewMatcher()
						for range 40 {
							t1 := time.Now()
							m.Mask(mask)
							d := time.Since(t1)
							if run < 2 {
								cold = append(cold, d)
							} else {
								warm = append(warm, d)
							}
							var ids []int32
							for w, x := range mask {
								for x != 0 {
									i := int32(w*64) + int32(bits.TrailingZeros64(x))
									x &= x - 1
									ids = append(ids, i)
								}
							}
							id := ids[rng.IntN(len(ids))]
							t2 := time.Now()
							ok := m.Allowed(id)
							allowed = append(allowed, time.Since(t2))
							if !ok {
								b.Fatalf("masked token %d refused", id)
							}
							if m.Accept(id) != nil || m.Ended() {
								break
							}
						}
					}
				}
			}
			q := func(ds []time.Duration, p float64) float64 {
				slices.Sort(ds)
				return float64(ds[int(p*float64(len(ds)-1))].Microseconds())
			}
			b.ReportMetric(q(warm, 0.5), "mask-p50-us")
			b.ReportMetric(q(warm, 0.99), "mask-p99-us")
			b.ReportMetric(q(cold, 0.5), "cold-p50-us")
			b.ReportMetric(q(cold, 0.99), "cold-p99-us")
			b.ReportMetric(q(compile, 0.5), "compile-p50-us")
			b.ReportMetric(float64(q(allowed, 0.5)), "allowed-p50-us")
			_ = json.Valid
		})
	}
}

// BenchmarkCompileKeywords measures what the keywords of keywords_test.go
// cost to compile: a Pydantic discriminated union, 1,000 discriminated
// oneOf branches (the one-pass proof), 500 enum branches beside an
// object branch (one pass, then each against it), 300 object branches
// proven pair by pair (45,000 pairs), an unbounded multipleOf prime to
// 10, and a 64-property count over 80 properties.
func BenchmarkCompileKeywords(b *testing.B) {
	var disc, pairs, objs, props []string
	for i := range MaxEnum {
		disc = append(disc, fmt.Sprintf(`{"properties":{"k":{"const":"v%d"}},"required":["k"]}`, i))
	}
	pairs = append(pairs, `{"type":"object"}`)
	for i := range 500 {
		pairs = append(pairs, fmt.Sprintf(`{"enum":["%x.0","%x.1","%x.2"]}`, i, i, i))
	}
	objs = append(objs, `{"type":"object","required":["k"],"properties":{"k":{"type":"string"}}}`)
	for i := range 300 {
		objs = append(objs, fmt.Sprintf(`{"required":["k"],"properties":{"k":{"enum":[%d,%d,%d]}}}`, 3*i, 3*i+1, 3*i+2))
	}
	for i := range 80 {
		props = append(props, fmt.Sprintf(`"p%d":{"type":"boolean"}`, i))
	}
	var pats, ifProps, ifs []string
	for i := range MaxPatternProperties {
		pats = append(pats, fmt.Sprintf(`"^p%d_":{"type":"integer","maximum":%d}`, i, i))
	}
	var kinds []string
	for i := range 10 {
		kinds = append(kinds, fmt.Sprintf(`"c%d"`, i))
		ifProps = append(ifProps, fmt.Sprintf(`"x%d":{}`, i))
		ifs = append(ifs, fmt.Sprintf(`{"if":{"properties":{"kind":{"const":"c%d"}}},"then":{"required":["x%d"]}}`, i, i))
	}
	ifProps = append(ifProps, `"kind":{"enum":[`+strings.Join(kinds, ",")+`]}`)
	for _, c := range []struct{ name, schema string }{
		{"pydantic-union", pydanticPets},
		{"oneof-1000-discriminated", `{"oneOf":[` + strings.Join(disc, ",") + `]}`},
		{"oneof-500-enums-1-object", `{"oneOf":[` + strings.Join(pairs, ",") + `]}`},
		{"oneof-300-pairwise", `{"oneOf":[` + strings.Join(objs, ",") + `]}`},
		{"multipleof-7", `{"type":"integer","multipleOf":7}`},
		{"properties-64-of-80", `{"type":"object","properties":{` + strings.Join(props, ",") + `},"minProperties":64,"maxProperties":64}`},
		// session 21's keywords: 64 patterns (pairwise apartness), a
		// map of 1,000 listed names needing 8, contains counted
		// against maxItems, 10 if/then/else on one discriminator
		// (country-dependent fields)
		{"patternproperties-64", `{"type":"object","patternProperties":{` + strings.Join(pats, ",") + `}}`},
		{"map-min-8-of-1000", `{"type":"object","patternProperties":{"^[a-j]{3}$":{"type":"integer"}},"minProperties":8}`},
		{"contains-40-of-90", `{"type":"array","contains":{"type":"integer"},"minContains":30,"maxContains":40,"maxItems":90}`},
		{"if-chained-10", `{"allOf":[{"type":"object","required":["kind"],"properties":{` + strings.Join(ifProps, ",") + `}},` + strings.Join(ifs, ",") + `]}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := CompileSchema([]byte(c.schema)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
