package tokenizer

import (
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Pre-tokenizers split text into words before BPE merges, as the regular
// expressions in Hugging Face tokenizer.json files (and llama.cpp's copies of
// them) do. Those patterns rely on look-ahead (`\s+(?!\S)`), which Go's
// regexp lacks. They are written here by hand as one matcher per pattern:
// each tries the pattern's alternatives in order at a position and returns
// where the match ends, reproducing the regex engine's greedy-then-backtrack
// result. This is several times faster than github.com/dlclark/regexp2 on the
// same patterns (BenchmarkPreTokenize), and the tests check every matcher
// against regexp2 running the original pattern on random and tricky text.

// matcher returns the end of the match starting at byte i of s, or -1.
type matcher func(s string, i int) int

type preTokenizer struct {
	name string
	// chain is applied in order: each matcher splits every piece the
	// previous one produced (llama.cpp's list of regex_exprs).
	chain        []matcher
	ignoreMerges bool // whole words found in the vocabulary skip merging (Llama 3)
}

const (
	preGPT2    = "gpt-2"
	preLlama3  = "llama-bpe"
	preQwen2   = "qwen2"
	preDefault = "default"
)

// preTokenizerFor maps tokenizer.ggml.pre to a pre-tokenizer the way
// llama.cpp's llama_vocab::load does, for the families implemented here.
func preTokenizerFor(name string) (preTokenizer, bool) {
	switch name {
	case "", "default":
		return preTokenizer{name: preDefault, chain: []matcher{matchPunct, matchGPT2, matchNumbers, matchThreeDigits}}, true
	case "gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v1-en", "jina-v2-es", "jina-v2-de", "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais":
		return preTokenizer{name: preGPT2, chain: []matcher{matchGPT2}}, true
	case "llama3", "llama-v3", "llama-bpe", "falcon3":
		return preTokenizer{name: preLlama3, chain: []matcher{matchLlama3}, ignoreMerges: true}, true
	case "dbrx", "smaug-bpe", "chatglm-bpe":
		return preTokenizer{name: preLlama3, chain: []matcher{matchLlama3}}, true
	case "qwen2", "stablelm2", "megrez":
		return preTokenizer{name: preQwen2, chain: []matcher{matchQwen2}}, true
	case "starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b":
		return preTokenizer{name: "starcoder", chain: []matcher{matchNumber, matchGPT2}}, true
	case "falcon":
		return preTokenizer{name: "falcon", chain: []matcher{matchPunct, matchGPT2, matchThreeDigits}}, true
	}
	return preTokenizer{}, false
}

func supportedPre() []string {
	names := []string{"default", "gpt-2", "llama-bpe", "llama3", "qwen2", "stablelm2", "dbrx", "smaug-bpe", "starcoder", "falcon", "mpt", "olmo", "phi-2"}
	sort.Strings(names)
	return names
}

// split appends to out the [start,end) byte ranges of the words of s[lo:hi].
func (p *preTokenizer) split(s string, lo, hi int, out [][2]int) [][2]int {
	out = append(out, [2]int{lo, hi})
	for _, m := range p.chain {
		n := len(out)
		for k := 0; k < n; k++ {
			out = splitIsolated(s, out[k][0], out[k][1], m, out)
		}
		out = append(out[:0], out[n:]...)
	}
	return out
}

// splitIsolated splits s[lo:hi] into the matches of m and the text between
// them (Hugging Face's "isolated" split behaviour, llama.cpp's
// unicode_regex_split): nothing is dropped.
func splitIsolated(s string, lo, hi int, m matcher, out [][2]int) [][2]int {
	sub := s[:hi] // matchers must not look past the piece
	gap := lo
	for i := lo; i < hi; {
		if e := m(sub, i); e > i {
			if gap < i {
				out = append(out, [2]int{gap, i})
			}
			out = append(out, [2]int{i, e})
			i, gap = e, e
			continue
		}
		_, sz := utf8.DecodeRuneInString(sub[i:])
		i += sz
	}
	if gap < hi {
		out = append(out, [2]int{gap, hi})
	}
	return out
}

// Character classes of the patterns: \p{L}, \p{N}, \s, and everything else.
type class uint8

const (
	clOther class = iota
	clLetter
	clNumber
	clSpace
)

var asciiClass [128]class

func init() {
	for c := 0; c < 128; c++ {
		asciiClass[c] = classOfRune(rune(c))
	}
}

func classOfRune(r rune) class {
	switch {
	case unicode.IsLetter(r):
		return clLetter
	case unicode.IsNumber(r):
		return clNumber
	case unicode.IsSpace(r):
		return clSpace
	}
	return clOther
}

// at returns the class and byte length of the character at s[i]. An invalid
// UTF-8 byte counts as one "other" character.
func at(s string, i int) (class, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, sz := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && sz == 1 {
		return clOther, 1
	}
	return classOfRune(r), sz
}

// run returns the end of the run of class c starting at i.
func run(s string, i int, c class) int {
	for i < len(s) {
		k, sz := at(s, i)
		if k != c {
			break
		}
		i += sz
	}
	return i
}

// runN is run limited to max characters.
func runN(s string, i int, c class, max int) int {
	for n := 0; n < max && i < len(s); n++ {
		k, sz := at(s, i)
		if k != c {
			break
		}
		i += sz
	}
	return i
}

// contraction matches 's 't 're 've 'm 'll 'd at i (s[i] == '\”),
// optionally ASCII case-insensitive, and returns its length or 0.
func contraction(s string, i int, fold bool) int {
	lower := func(j int) byte {
		if j >= len(s) {
			return 0
		}
		c := s[j]
		if fold && c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		return c
	}
	switch c := lower(i + 1); c {
	case 's', 't', 'm', 'd':
		return 2
	case 'r', 'v':
		if lower(i+2) == 'e' {
			return 3
		}
	case 'l':
		if lower(i+2) == 'l' {
			return 3
		}
	}
	return 0
}

// spaceRun returns the end of the whitespace run at i and the start of its
// last character.
func spaceRun(s string, i int) (end, last int) {
	end, last = i, i
	for end < len(s) {
		k, sz := at(s, end)
		if k != clSpace {
			break
		}
		last = end
		end += sz
	}
	return end, last
}

// spacesNotBeforeText is `\s+(?!\S)`: the whitespace run, minus its last
// character when text follows (that one joins the next word).
func spacesNotBeforeText(s string, i int) int {
	end, last := spaceRun(s, i)
	if end == i {
		return -1
	}
	if end == len(s) {
		return end
	}
	if last > i {
		return last
	}
	return -1
}

// matchGPT2 is GPT-2's pattern:
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
func matchGPT2(s string, i int) int {
	c := s[i]
	if c == '\'' {
		if n := contraction(s, i, false); n > 0 {
			return i + n
		}
	}
	j := i
	if c == ' ' && i+1 < len(s) {
		j = i + 1
	}
	if k, _ := at(s, j); k != clSpace {
		return run(s, j, k)
	}
	// Whitespace (a lone " " before more whitespace cannot start a word).
	return spacesNotBeforeText(s, i)
}

// matchLlama3 is Llama 3's pattern (llama.cpp's ASCII-case form):
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//	 ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func matchLlama3(s string, i int) int { return matchLlamaLike(s, i, 3) }

// matchQwen2 is Qwen2's pattern: Llama 3's with \p{N} (one digit at a time).
func matchQwen2(s string, i int) int { return matchLlamaLike(s, i, 1) }

func matchLlamaLike(s string, i int, maxDigits int) int {
	c := s[i]
	if c == '\'' {
		if n := contraction(s, i, true); n > 0 {
			return i + n
		}
	}
	k, sz := at(s, i)
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if k == clLetter {
		return run(s, i, clLetter)
	}
	if k != clNumber && c != '\r' && c != '\n' && i+sz < len(s) {
		if k2, _ := at(s, i+sz); k2 == clLetter {
			return run(s, i+sz, clLetter)
		}
	}
	// \p{N}{1,3}
	if k == clNumber {
		return runN(s, i, clNumber, maxDigits)
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	j := -1
	if k == clOther {
		j = i
	} else if c == ' ' && i+1 < len(s) {
		if k2, _ := at(s, i+1); k2 == clOther {
			j = i + 1
		}
	}
	if j >= 0 {
		e := run(s, j, clOther)
		for e < len(s) && (s[e] == '\r' || s[e] == '\n') {
			e++
		}
		return e
	}
	// Only whitespace is left.
	end, last := spaceRun(s, i)
	// \s*[\r\n]+ : up to and including the run's last newline.
	for p := end - 1; p >= i; p-- {
		if s[p] == '\r' || s[p] == '\n' {
			return p + 1
		}
	}
	// \s+(?!\S) then \s+
	if end == len(s) || last == i {
		return end
	}
	return last
}

// matchPunct is `[\p{P}\$\+<=>\^~\|]+`.
func matchPunct(s string, i int) int {
	e := i
	for e < len(s) {
		r, sz := utf8.DecodeRuneInString(s[e:])
		if !unicode.IsPunct(r) && !strings.ContainsRune("$+<=>^~|", r) {
			break
		}
		e += sz
	}
	if e == i {
		return -1
	}
	return e
}

// matchNumbers is `\p{N}+`; matchNumber is `\p{N}`.
func matchNumbers(s string, i int) int {
	if k, _ := at(s, i); k != clNumber {
		return -1
	}
	return run(s, i, clNumber)
}

func matchNumber(s string, i int) int {
	if k, _ := at(s, i); k != clNumber {
		return -1
	}
	return runN(s, i, clNumber, 1)
}

// matchThreeDigits is `[0-9][0-9][0-9]`.
func matchThreeDigits(s string, i int) int {
	if i+3 <= len(s) && isDigit(s[i]) && isDigit(s[i+1]) && isDigit(s[i+2]) {
		return i + 3
	}
	return -1
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
