package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/dlclark/regexp2"
)

// The original patterns, run by regexp2 (a backtracking engine with
// look-ahead) as the independent reference for the hand-written matchers.
const (
	reGPT2   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`
	reLlama3 = `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	reQwen2  = `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	rePunct  = `[\p{P}\$\+<=>\^~\|]+`
	reNums   = `\p{N}+`
	reNum    = `\p{N}`
	re3Dig   = `[0-9][0-9][0-9]`
)

var preRegexps = map[string][]string{
	"gpt-2":     {reGPT2},
	"llama-bpe": {reLlama3},
	"qwen2":     {reQwen2},
	"default":   {rePunct, reGPT2, reNums, re3Dig},
	"starcoder": {reNum, reGPT2},
	"falcon":    {rePunct, reGPT2, re3Dig},
}

// refSplit splits s with the regexes in order, keeping matches and the text
// between them, as llama.cpp's unicode_regex_split does.
func refSplit(t testing.TB, res []*regexp2.Regexp, s string) []string {
	pieces := []string{s}
	if s == "" {
		return nil
	}
	for _, re := range res {
		var next []string
		for _, p := range pieces {
			r := []rune(p)
			gap := 0
			m, err := re.FindRunesMatch(r)
			for ; m != nil && err == nil; m, err = re.FindNextMatch(m) {
				if m.Index > gap {
					next = append(next, string(r[gap:m.Index]))
				}
				if m.Length == 0 {
					t.Fatalf("empty match in %q", p)
				}
				next = append(next, string(r[m.Index:m.Index+m.Length]))
				gap = m.Index + m.Length
			}
			if err != nil {
				t.Fatal(err)
			}
			if gap < len(r) {
				next = append(next, string(r[gap:]))
			}
		}
		pieces = next
	}
	return pieces
}

func ourSplit(p *preTokenizer, s string) []string {
	var out []string
	for _, w := range p.split(s, 0, len(s), nil) {
		out = append(out, s[w[0]:w[1]])
	}
	if s == "" {
		return nil
	}
	return out
}

// alphabet mixes every character class the patterns distinguish, including
// the ones that trip hand-written splitters: non-ASCII letters and digits
// (Nd, Nl, No), multi-byte whitespace, combining marks and joiners (neither
// letter nor digit), apostrophes with contraction letters in both cases.
var alphabet = []string{
	"a", "Z", "é", "ж", "中", "ß", "s", "t", "r", "e", "v", "m", "l", "d", "S", "T", "L", "E",
	"0", "1", "9", "٣", "Ⅻ", "½", "²",
	" ", " ", " ", "\t", "\n", "\r", "\u00a0", "\u3000", "\u2028", "\u0085", "\v", "\f",
	"'", "'", ".", ",", "!", "?", "(", ")", "-", "$", "+", "<", "=", ">", "^", "~", "|", "`",
	"\u0301", "\u200d", "🦙", "🚀", "…", "。",
}

func randText(r *rand.Rand, maxLen int) string {
	var b strings.Builder
	n := r.IntN(maxLen + 1)
	for i := 0; i < n; i++ {
		b.WriteString(alphabet[r.IntN(len(alphabet))])
	}
	return b.String()
}

var trickyTexts = []string{
	"", " ", "  ", "   Hello", "Hello   ", "\n\n\n   Hello", " \n \n", "a \t\nb", "\tHello", " \tHello",
	"I'm you're we'LL he'S 'd ''s", "  'sup", " 's", "!'s", "12345678", " 1234", "a1b22c333d4444",
	"(normal) 😶‍🌫️ ✅", "3.14 3..14 3...14", "\r\n\r\nx", "x\r\n", "ab.\r\n\r\ncd", " .\n", "\u3000\u3000a",
	"<|endoftext|> <s>", "$$+<=>^~|``", "Ⅻ½²٣", "e\u0301\u0301", "\u0301a",
}

func TestPreTokenizersMatchRegex(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for name, pats := range preRegexps {
		t.Run(name, func(t *testing.T) {
			var res []*regexp2.Regexp
			for _, p := range pats {
				res = append(res, regexp2.MustCompile(p, regexp2.None))
			}
			pt, ok := preTokenizerFor(name)
			if !ok {
				t.Fatalf("no pre-tokenizer %q", name)
			}
			texts := append([]string(nil), trickyTexts...)
			for i := 0; i < 3000; i++ {
				texts = append(texts, randText(r, 24))
			}
			for _, s := range texts {
				want := refSplit(t, res, s)
				got := ourSplit(&pt, s)
				if !slices.Equal(got, want) {
					t.Fatalf("%q:\n got %q\nwant %q", s, got, want)
				}
			}
		})
	}
}
