package tokenizer

import (
	"strings"
	"testing"

	"github.com/dlclark/regexp2"
)

// benchText is ~64 KiB of ordinary prose with numbers, punctuation,
// contractions, newlines and a little non-ASCII, the mix a chat prompt has.
var benchText = strings.Repeat(`Once upon a time, in a village by the river, there lived a girl named Lily.
She loved to play outside; every morning she'd run to the park at 7:30 and count
the ducks (there were 12, sometimes 13). "Don't go too far!" her mother said.
Lily didn't listen. She found a red ball, a blue kite and 3 shiny stones — café
owners nearby called her "la petite exploratrice". The year was 1987, and the
price of bread was $1.25.

`, 128)

// BenchmarkEncode reports encode throughput (MB/s of input text) per
// tokenizer; compare the numbers as ratios between runs on the same machine.
func BenchmarkEncode(b *testing.B) {
	for _, name := range vocabNames {
		b.Run(name, func(b *testing.B) {
			tk := loadVocab(b, name)
			b.SetBytes(int64(len(benchText)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				tk.Encode(benchText, true, false)
			}
		})
	}
}

// BenchmarkPreTokenize compares the hand-written Llama 3 splitter with
// regexp2 running the original pattern: the reason the splitters are
// hand-written.
func BenchmarkPreTokenize(b *testing.B) {
	pt, _ := preTokenizerFor("llama-bpe")
	b.Run("hand-written", func(b *testing.B) {
		b.SetBytes(int64(len(benchText)))
		var out [][2]int
		for i := 0; i < b.N; i++ {
			out = pt.split(benchText, 0, len(benchText), out[:0])
		}
	})
	b.Run("regexp2", func(b *testing.B) {
		re := regexp2.MustCompile(reLlama3, regexp2.None)
		b.SetBytes(int64(len(benchText)))
		for i := 0; i < b.N; i++ {
			n := 0
			m, _ := re.FindStringMatch(benchText)
			for m != nil {
				n++
				m, _ = re.FindNextMatch(m)
			}
		}
	})
}

// BenchmarkLoad measures building a tokenizer from a vocab-only GGUF.
func BenchmarkLoad(b *testing.B) {
	for _, name := range vocabNames {
		b.Run(name, func(b *testing.B) {
			p := "vocab/ggml-vocab-" + name + ".gguf"
			loadShared(b, p) // skip early when the file is missing
			for i := 0; i < b.N; i++ {
				if _, err := Load(sharedPath(b, p)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
