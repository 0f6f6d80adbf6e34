package tokenizer

import "unicode/utf8"

// byteToRune is GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for
// themselves, every other byte is shifted to U+0100 and up, so that every
// byte string becomes a string of visible characters (a space is 'Ġ').
// runeToByte is its inverse.
var (
	byteToRune [256]rune
	runeToByte = map[rune]byte{}
)

func init() {
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = rune(256 + n)
			n++
		}
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// byteLevelDecode maps a byte-level token text back to the bytes it stands
// for. A character outside the map (possible in added tokens) is kept as its
// own UTF-8 rather than dropped.
func byteLevelDecode(s string) string {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		if b, ok := runeToByte[r]; ok {
			out = append(out, b)
		} else {
			out = utf8.AppendRune(out, r)
		}
	}
	return string(out)
}
