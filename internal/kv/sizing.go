package kv

import (
	"fmt"
	"strconv"
	"strings"
)

// PagesFor is the number of pages of pageSize slots that hold tokens. It
// never computes tokens+pageSize-1, which wraps negative for a token count
// near MaxInt (a max_tokens of 2^63-1 would otherwise need "0 pages").
func PagesFor(tokens, pageSize int) int {
	if tokens <= 0 || pageSize <= 0 {
		return 0
	}
	n := tokens / pageSize
	if tokens%pageSize != 0 {
		n++
	}
	return n
}

// TokensFit reports whether prompt tokens plus gen generated tokens fit in
// limit. It never forms the sum prompt+gen: with gen near MaxInt the sum
// wraps negative and "fits" (the request would be admitted and could take
// the whole pool), so it compares gen against what the prompt leaves.
// Negative counts never fit.
func TokensFit(prompt, gen, limit int) bool {
	return prompt >= 0 && gen >= 0 && prompt <= limit && gen <= limit-prompt
}

// SizeFromTokens is the number of pages a pool needs for tokens token
// slots (--kv-pool-tokens).
func SizeFromTokens(g Geometry, tokens int) int {
	return PagesFor(tokens, pageSizeOf(g))
}

// SizeFromBytes is the number of whole pages that fit in a memory budget
// (--kv-memory). The capacity in tokens is that times the page size; that
// number, not the budget, is what admission compares against (I2).
func SizeFromBytes(g Geometry, bytes int64) int {
	g.PageSize = pageSizeOf(g)
	pb := int64(g.PageBytes())
	if pb <= 0 || bytes <= 0 {
		return 0
	}
	return int(bytes / pb)
}

func pageSizeOf(g Geometry) int {
	if g.PageSize == 0 {
		return DefaultPageSize
	}
	return g.PageSize
}

// ParseBytes reads a memory size such as "512MiB", "2GiB", "1.5GB", "64M"
// or "1048576". KiB/MiB/GiB/TiB (and the bare K/M/G/T) are powers of 1024;
// KB/MB/GB/TB are powers of 1000.
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') && t[i-1] != '.' {
		i--
	}
	num, unit := strings.TrimSpace(t[:i]), strings.ToLower(strings.TrimSpace(t[i:]))
	mult := map[string]float64{
		"": 1, "b": 1,
		"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
		"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
		"g": 1 << 30, "gib": 1 << 30, "gb": 1e9,
		"t": 1 << 40, "tib": 1 << 40, "tb": 1e12,
	}[unit]
	if mult == 0 || num == "" {
		return 0, &Error{Code: CodeBadConfig, Msg: fmt.Sprintf("cannot read %q as a memory size; write e.g. 512MiB, 2GiB or 1048576", s)}
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 || f*mult > 1<<62 {
		return 0, &Error{Code: CodeBadConfig, Msg: fmt.Sprintf("cannot read %q as a memory size; write e.g. 512MiB, 2GiB or 1048576", s)}
	}
	return int64(f * mult), nil
}
