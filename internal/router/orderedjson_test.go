package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// decodeOrderedTokens is the decoder decodeOrdered replaced (847a00e to
// 5d88d0e), on json.Decoder.Token: the reference its values are checked
// against.
func decodeOrderedTokens(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeOrderedTokenValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON value")
	}
	return v, nil
}

func decodeOrderedTokenValue(dec *json.Decoder, depth int) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth >= maxOrderedDepth {
			return nil, fmt.Errorf("JSON nested deeper than %d", maxOrderedDepth)
		}
		if t == '[' {
			list := []any{}
			for dec.More() {
				v, err := decodeOrderedTokenValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			_, err := dec.Token()
			return list, err
		}
		o := &jsonObject{vals: map[string]any{}}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			k, _ := kt.(string)
			v, err := decodeOrderedTokenValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			o.set(k, v)
		}
		_, err := dec.Token()
		return o, err
	case json.Number:
		return pyNumber(string(t)), nil
	}
	return tok, nil
}

// checkOrderedAsTokens: on valid JSON decodeOrdered gives exactly the
// values the Token decoder gave (key order, repeated keys, numbers,
// unquoted strings); anything else it refuses, as encoding/json does.
func checkOrderedAsTokens(t *testing.T, data []byte) {
	t.Helper()
	got, err := decodeOrdered(data)
	if !json.Valid(data) {
		if err == nil {
			t.Errorf("%q is not JSON; decoded as %#v", data, got)
		}
		return
	}
	want, werr := decodeOrderedTokens(data)
	if err != nil || werr != nil {
		t.Errorf("%q: %v (the Token decoder: %v)", data, err, werr)
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%q:\n got %s\nwant %s", data, dumpOrdered(got), dumpOrdered(want))
	}
}

// dumpOrdered shows a decoded value with its types and key order.
func dumpOrdered(v any) string {
	switch x := v.(type) {
	case *jsonObject:
		parts := make([]string, len(x.keys))
		for i, k := range x.keys {
			parts[i] = fmt.Sprintf("%q: %s", k, dumpOrdered(x.vals[k]))
		}
		return fmt.Sprintf("{%s}(%d)", strings.Join(parts, ", "), len(x.vals))
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = dumpOrdered(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return fmt.Sprintf("%T(%#v)", v, v)
}

// orderedSeeds are the corners: numbers at int64's edges and past them,
// floats as written, escapes, surrogates (paired, lone, reversed), bytes
// that are not UTF-8, repeated keys (one of them escaped), white space,
// and text that is not JSON.
var orderedSeeds = []string{
	`{"b": 1, "a": [1.0, 1E2, 12345678901234567890, -0], "b": {"z": null, "y": true}}`,
	`[0, -0, 7, 255, 256, -1, 999999999999999999, -999999999999999999, 1000000000000000000, 9223372036854775807, 9223372036854775808, -9223372036854775808, -9223372036854775809, 123456789012345678901234567890]`,
	`[0.0, -0.0, 1.5, 1e400, -1e400, 1e-400, 2.5E+3, 1e21, 1.5e-07, 0.1, 100e-2, 1E0]`,
	`["", "a", "\"\\\/\b\f\n\r\t", "\u00e9\u00E9", "\ud83d\ude00", "\ud83d", "\ude00", "\ud83dx", "\ud83d\u0041", "\ud83d\ud83d\ude00", "\ude00\ud83d", "\u0000", "\uFFFD"]`,
	"[\"\xff\", \"a\xc3\", \"\xed\xa0\x80\", \"é😀\", \"\xf0\x9f\x98\", \"x\\n\xe9y\"]",
	`{"a": 1, "\u0061": 2, "b": 3, "a": 4}`,
	`{"": {"": []}, " ": {}, "é": [[], {}]}`,
	" \t\r\n[ 1 , { \"a\" : true } ]\n ",
	`"top"`, `1`, `-1.5`, `true`, `false`, `null`, `12345678901234567890`,
	// not JSON
	``, ` `, `{"a": 1`, `{"a": 1} x`, `[1,]`, `[1 2]`, `{"a" 1}`, `{1: 2}`, `[tru]`, `[nul]`, `01`, `-`, `1.`, `.5`, `1e`, `+1`,
	`"\x"`, `"\u12"`, `"\u12G4"`, "\"\x01\"", `[1] [2]`, `1 2`, `{"a":1,}`, `[`, `]`, `"abc`, `{"a":"\"}`, `[1,,2]`, `NaN`, `Infinity`,
}

// Every corner decodes as the Token decoder decoded it (or is refused).
func TestDecodeOrderedCorners(t *testing.T) {
	for _, s := range orderedSeeds {
		checkOrderedAsTokens(t, []byte(s))
	}
}

// randomJSON writes a random JSON value, with the corners' pieces.
func randomJSON(r *rand.Rand, b *bytes.Buffer, depth int) {
	ws := func() {
		if r.IntN(4) == 0 {
			b.WriteString([]string{" ", "\n", "\t", "\r\n  "}[r.IntN(4)])
		}
	}
	str := func() {
		pieces := []string{"a", "key", " ", "é", "😀", `\"`, `\\`, `\/`, `\n`, `\t`, `\b`, `\f`, `\r`, `\u00e9`, `\u0061`,
			`\ud83d\ude00`, `\ud83d`, `\ude00`, `\u0000`, "\xff", "\xc3", "\xed\xa0\x80", `\uD83D\uDE00`}
		b.WriteByte('"')
		for range r.IntN(6) {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		b.WriteByte('"')
	}
	ws()
	k := r.IntN(10)
	if depth > 5 {
		k = r.IntN(6)
	}
	switch k {
	case 0:
		b.WriteString([]string{"null", "true", "false"}[r.IntN(3)])
	case 1, 2:
		if r.IntN(2) == 0 {
			b.WriteByte('-')
		}
		if r.IntN(4) == 0 {
			b.WriteByte('0')
		} else {
			b.WriteByte(byte('1' + r.IntN(9)))
			for range r.IntN(25) {
				b.WriteByte(byte('0' + r.IntN(10)))
			}
		}
		if r.IntN(3) == 0 {
			b.WriteByte('.')
			for range 1 + r.IntN(5) {
				b.WriteByte(byte('0' + r.IntN(10)))
			}
		}
		if r.IntN(4) == 0 {
			b.WriteString([]string{"e", "E", "e+", "e-", "E-"}[r.IntN(5)])
			for range 1 + r.IntN(3) {
				b.WriteByte(byte('0' + r.IntN(10)))
			}
		}
	case 3, 4, 5:
		str()
	case 6, 7:
		b.WriteByte('[')
		for i := range r.IntN(5) {
			if i > 0 {
				b.WriteByte(',')
			}
			randomJSON(r, b, depth+1)
		}
		ws()
		b.WriteByte(']')
	default:
		keys := []string{`"a"`, `"b"`, `"\u0061"`, `""`, `"é"`, `"c"`, `"\ud83d"`}
		b.WriteByte('{')
		for i := range r.IntN(6) {
			if i > 0 {
				b.WriteByte(',')
			}
			ws()
			if r.IntN(3) == 0 {
				str()
			} else {
				b.WriteString(keys[r.IntN(len(keys))])
			}
			ws()
			b.WriteByte(':')
			randomJSON(r, b, depth+1)
		}
		ws()
		b.WriteByte('}')
	}
	ws()
}

// decodeOrdered against the Token decoder over random JSON, and over the
// same text with a byte deleted, inserted or changed (mostly not JSON,
// which it must refuse; sometimes JSON, which it must decode the same).
func TestDecodeOrderedMatchesTokens(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 1))
	n := 3000
	if testing.Short() {
		n = 500
	}
	for range n {
		var b bytes.Buffer
		randomJSON(r, &b, 0)
		doc := b.Bytes()
		if !json.Valid(doc) {
			t.Fatalf("randomJSON wrote %q, not JSON", doc)
		}
		checkOrderedAsTokens(t, doc)
		const edits = `{}[],:"\ 0e.-t`
		bad := bytes.Clone(doc)
		at := r.IntN(len(bad))
		switch r.IntN(3) {
		case 0:
			bad = append(bad[:at], bad[at+1:]...)
		case 1:
			bad = append(bad[:at], append([]byte{edits[r.IntN(len(edits))]}, bad[at:]...)...)
		default:
			bad[at] = edits[r.IntN(len(edits))]
		}
		checkOrderedAsTokens(t, bad)
		if t.Failed() {
			return
		}
	}
}

// FuzzDecodeOrdered: decodeOrdered against the Token decoder (go test
// -fuzz FuzzDecodeOrdered ./internal/router/; the seeds run in the suite).
func FuzzDecodeOrdered(f *testing.F) {
	for _, s := range orderedSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkOrderedAsTokens(t, data)
	})
}

// The scanner bounds its own nesting at maxOrderedDepth, whatever
// validated its input first (encoding/json's bound is the same 10,000
// today): a value nested deeper is an error, not a frame per level.
func TestOrderedScannerDepthBounded(t *testing.T) {
	nested := func(depth int) []byte {
		return []byte(strings.Repeat(`{"a":[`, depth/2) + strings.Repeat(`]}`, depth/2))
	}
	for _, c := range []struct {
		depth int
		ok    bool
	}{{maxOrderedDepth, true}, {maxOrderedDepth + 2, false}, {100000, false}} {
		s := orderedScanner{data: nested(c.depth)}
		_, err := s.value(0)
		if (err == nil) != c.ok {
			t.Errorf("nested %d deep: %v", c.depth, err)
		}
		if !c.ok && (err == nil || !strings.Contains(err.Error(), "nested deeper than")) {
			t.Errorf("nested %d deep: %v, want the depth bound's error", c.depth, err)
		}
	}
}

// benchOrderedShapes are request bodies of about size bytes: a flat
// array of small integers (the rt12 body), a wide object, objects
// nested 8 deep, long strings (half with escapes and non-ASCII text).
func benchOrderedShapes(size int) map[string][]byte {
	var flat, wide, nested, long bytes.Buffer
	flat.WriteByte('[')
	for flat.Len() < size {
		flat.WriteString("0,")
	}
	flat.WriteString("0]")
	wide.WriteByte('{')
	for i := 0; wide.Len() < size; i++ {
		fmt.Fprintf(&wide, `"property_%d": {"type": "string", "n": %d, "x": 1.5},`, i, i)
	}
	wide.WriteString(`"end": null}`)
	nested.WriteByte('[')
	var one bytes.Buffer
	for d := range 8 {
		fmt.Fprintf(&one, `{"k%d": [true, null, "v", %d], "n": {"a": 1, "b": "two", "c": `, d, d)
	}
	one.WriteString(`[]` + strings.Repeat(`}}`, 8))
	for nested.Len() < size {
		nested.Write(one.Bytes())
		nested.WriteByte(',')
	}
	nested.WriteString("null]")
	long.WriteByte('[')
	plain := strings.Repeat("the quick brown fox jumps over the lazy dog ", 100)
	escaped := strings.Repeat(`def f(x):\n    return \"é\" + x\t# \u00e9 `, 100)
	for i := 0; long.Len() < size; i++ {
		long.WriteString(`"` + []string{plain, escaped}[i%2] + `",`)
	}
	long.WriteString(`""]`)
	return map[string][]byte{"flat": flat.Bytes(), "wide": wide.Bytes(), "nested": nested.Bytes(), "strings": long.Bytes()}
}

// BenchmarkDecodeOrdered: decodeOrdered against json.Unmarshal into an
// any (the cost of the body's own decode) and the Token decoder it
// replaced, on 256 KiB of each shape, side by side.
func BenchmarkDecodeOrdered(b *testing.B) {
	shapes := benchOrderedShapes(256 << 10)
	for _, shape := range []string{"flat", "wide", "nested", "strings"} {
		data := shapes[shape]
		for _, dec := range []struct {
			name string
			f    func([]byte) error
		}{
			{"ordered", func(d []byte) error { _, err := decodeOrdered(d); return err }},
			{"unmarshal", func(d []byte) error { var v any; return json.Unmarshal(d, &v) }},
			{"tokens", func(d []byte) error { _, err := decodeOrderedTokens(d); return err }},
		} {
			b.Run(shape+"/"+dec.name, func(b *testing.B) {
				b.SetBytes(int64(len(data)))
				b.ReportAllocs()
				for b.Loop() {
					if err := dec.f(data); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// The benchmark's bodies decode as the Token decoder decodes them.
func TestDecodeOrderedBenchShapes(t *testing.T) {
	for name, data := range benchOrderedShapes(16 << 10) {
		got, err := decodeOrdered(data)
		want, werr := decodeOrderedTokens(data)
		if err != nil || werr != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %v %v, or the values differ", name, err, werr)
		}
	}
}
