package hub

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// DefaultQuants is the order Pick tries when the spec names no
// quantization: the 4-bit K-quant llama.cpp's -hf picks by default first,
// then the common others. A repository holding a single GGUF file needs
// none of them.
var DefaultQuants = []string{"Q4_K_M", "Q4_K_S", "Q4_0", "Q5_K_M", "Q6_K", "Q8_0", "F16", "BF16", "F32"}

// splitRe matches the parts of a split GGUF (llama-gguf-split's naming).
var splitRe = regexp.MustCompile(`(?i)-(\d{5})-of-(\d{5})\.gguf$`)

// isModelGGUF: a .gguf file that is a language model's weights, not a
// multimodal projector (mmproj-*.gguf, which repositories ship beside).
func isModelGGUF(p string) bool {
	l := strings.ToLower(p)
	return strings.HasSuffix(l, ".gguf") && !strings.Contains(l[strings.LastIndexByte(l, '/')+1:], "mmproj")
}

// hasQuant reports whether the quantization q names p: q appears
// case-insensitively with no letter or digit just before it and no
// letter, digit or '_' just after (so Q4_K does not take Q4_K_M's file,
// nor Q4_0 IQ4_0's). A folder named q counts (large repositories keep
// each quantization's split parts in one).
func hasQuant(p, q string) bool {
	up, uq := strings.ToUpper(p), strings.ToUpper(q)
	for i := 0; ; {
		j := strings.Index(up[i:], uq)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(uq)
		before := j == 0 || !isAlnum(up[j-1])
		after := end == len(up) || (!isAlnum(up[end]) && up[end] != '_')
		if before && after {
			return true
		}
		i = j + 1
	}
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z'
}

// Pick chooses the GGUF file of a repository listing for quant (empty:
// DefaultQuants in order, or the only GGUF file). Among several matches it
// takes the shortest path, then the first in order, so the choice is the
// same on every machine. A file split into parts is refused with how to
// merge it: sluice maps one file.
func Pick(files []string, quant string) (string, error) {
	var ggufs []string
	for _, f := range files {
		if isModelGGUF(f) {
			ggufs = append(ggufs, f)
		}
	}
	sort.Slice(ggufs, func(i, j int) bool {
		if len(ggufs[i]) != len(ggufs[j]) {
			return len(ggufs[i]) < len(ggufs[j])
		}
		return ggufs[i] < ggufs[j]
	})
	if len(ggufs) == 0 {
		return "", &Error{Code: ErrNoGGUF, Msg: "the repository has no .gguf file; sluice runs GGUF models: look for a repository named ...-GGUF of the same model"}
	}
	match := func(q string) string {
		for _, f := range ggufs {
			if hasQuant(f, q) {
				return f
			}
		}
		return ""
	}
	var got string
	switch {
	case quant != "":
		if got = match(quant); got == "" {
			return "", &Error{Code: ErrNoGGUF, Msg: fmt.Sprintf("no .gguf file for quantization %q; the repository has: %s", quant, listFiles(ggufs))}
		}
	case len(ggufs) == 1:
		got = ggufs[0]
	default:
		for _, q := range DefaultQuants {
			if got = match(q); got != "" {
				break
			}
		}
		if got == "" {
			return "", &Error{Code: ErrNoGGUF, Msg: fmt.Sprintf("several .gguf files and none of the default quantizations (%s); name one with :QUANT or /FILE.gguf: %s", strings.Join(DefaultQuants, ", "), listFiles(ggufs))}
		}
	}
	if m := splitRe.FindStringSubmatch(got); m != nil {
		return "", &Error{Code: ErrNoGGUF, Msg: fmt.Sprintf("%s is part %s of %s of a split model and sluice loads one file: download the parts and merge them with `llama-gguf-split --merge`, then give --model PATH", got, m[1], m[2])}
	}
	return got, nil
}

// listFiles shows at most 12 names, so a 200-file repository does not
// flood the terminal.
func listFiles(fs []string) string {
	if len(fs) > 12 {
		return strings.Join(fs[:12], ", ") + fmt.Sprintf(", ... (%d more)", len(fs)-12)
	}
	return strings.Join(fs, ", ")
}
