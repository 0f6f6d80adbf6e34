package tokenizer

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"sluice/internal/testenv"
)

// TestGeneratedTextMatchesLlamaCpp decodes llama.cpp's generated ids with a
// StreamDecoder and compares with llama.cpp's own text and bytes
// (concatenated token_to_piece with special=false).
func TestGeneratedTextMatchesLlamaCpp(t *testing.T) {
	b, err := os.ReadFile(testenv.Shared(t, "reference/reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	type genCase struct {
		Prompt string  `json:"prompt"`
		IDs    []int32 `json:"generated_token_ids"`
		Text   string  `json:"generated_text"`
		Hex    string  `json:"generated_bytes_hex"`
	}
	var ref struct {
		Models []struct {
			File     string    `json:"file"`
			Cases    []genCase `json:"cases"`
			LongCase *genCase  `json:"long_case"`
		} `json:"models"`
	}
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range ref.Models {
		tk := loadShared(t, "models/"+m.File)
		cases := m.Cases
		if m.LongCase != nil {
			cases = append(cases, *m.LongCase)
		}
		for _, c := range cases {
			n++
			d := tk.NewStreamDecoder()
			var got strings.Builder
			var raw []byte
			for _, id := range c.IDs {
				s := d.Push(id)
				if !utf8.ValidString(s) {
					t.Errorf("%s: Push(%d) returned invalid UTF-8 %q", m.File, id, s)
				}
				got.WriteString(s)
				raw = append(raw, tk.piece(id)...)
			}
			got.WriteString(d.Flush())
			if got.String() != c.Text {
				t.Errorf("%s %q:\n got %q\nwant %q", m.File, c.Prompt, got.String(), c.Text)
			}
			if c.Hex != "" && hex.EncodeToString(raw) != c.Hex {
				t.Errorf("%s %q: bytes %x, want %s", m.File, c.Prompt, raw, c.Hex)
			}
		}
	}
	if n < 9 {
		t.Fatalf("only %d generation cases in reference.json", n)
	}
}

// TestStreamDecoderHoldsPartialCharacters: "🦙" is not a Llama-2 token, so
// it is encoded as its four UTF-8 bytes <0xF0><0x9F><0xA6><0x99>; the
// decoder must hold the first three and emit the character with the fourth.
func TestStreamDecoderHoldsPartialCharacters(t *testing.T) {
	tk := loadVocab(t, "llama-spm")
	var ids []int32
	for _, b := range []byte("🦙") {
		id, ok := tk.ID(spmByteText(b))
		if !ok {
			t.Fatalf("no byte token for %#x", b)
		}
		ids = append(ids, id)
	}
	enc := tk.Encode("a🦙", false, false)
	if len(enc) < 4 || !equalTail(enc, ids) {
		t.Fatalf("Encode(a🦙) = %v, want it to end in the byte tokens %v", enc, ids)
	}
	d := tk.NewStreamDecoder()
	for i, id := range ids[:3] {
		if s := d.Push(id); s != "" {
			t.Fatalf("byte %d of 4 emitted %q before the character was complete", i+1, s)
		}
	}
	if s := d.Push(ids[3]); s != "🦙" {
		t.Fatalf("fourth byte: got %q want 🦙", s)
	}
	if s := d.Flush(); s != "" {
		t.Fatalf("Flush after a complete character: %q", s)
	}

	// A character cut off by the end of the stream becomes one U+FFFD.
	d = tk.NewStreamDecoder()
	d.Push(ids[0])
	d.Push(ids[1])
	if s := d.Flush(); s != "\uFFFD" {
		t.Fatalf("Flush of a partial character: %q", s)
	}

	// Bytes that can never form a character are replaced at once, one
	// U+FFFD per maximal invalid sequence: E2 82 is a
	// valid start cut short by 'A'; a lone continuation byte is invalid.
	d = tk.NewStreamDecoder()
	e2, _ := tk.ID(spmByteText(0xE2))
	x82, _ := tk.ID(spmByteText(0x82))
	xbf, _ := tk.ID(spmByteText(0xBF))
	A, _ := tk.ID(spmByteText('A'))
	var out strings.Builder
	for _, id := range []int32{e2, x82, A, xbf, A} {
		out.WriteString(d.Push(id))
	}
	out.WriteString(d.Flush())
	// Python: b"\xe2\x82A\xbfA".decode("utf-8", "replace") == "\ufffdA\ufffdA"
	if out.String() != "\uFFFDA\uFFFDA" {
		t.Fatalf("invalid bytes: got %q want %q", out.String(), "\uFFFDA\uFFFDA")
	}
}

func equalTail(a, tail []int32) bool {
	if len(a) < len(tail) {
		return false
	}
	for i := range tail {
		if a[len(a)-len(tail)+i] != tail[i] {
			return false
		}
	}
	return true
}

// TestStreamDecoderEveryVocab: on every vocab case, every Push returns valid
// UTF-8 and the whole stream equals the input (plus the SentencePiece space
// prefix, which a stream keeps, as llama.cpp prints it).
func TestStreamDecoderEveryVocab(t *testing.T) {
	for _, name := range vocabNames {
		t.Run(name, func(t *testing.T) {
			tk := loadVocab(t, name)
			for _, c := range readCases(t, name) {
				d := tk.NewStreamDecoder()
				var got strings.Builder
				for _, id := range tk.Encode(c.in, true, false) {
					s := d.Push(id)
					if !utf8.ValidString(s) {
						t.Fatalf("%q: Push returned invalid UTF-8 %q", c.in, s)
					}
					got.WriteString(s)
				}
				got.WriteString(d.Flush())
				want := c.in
				if name == "llama-spm" && c.in != "" {
					want = " " + c.in
				}
				if got.String() != want {
					t.Errorf("stream of %q = %q", c.in, got.String())
				}
			}
		})
	}
}
