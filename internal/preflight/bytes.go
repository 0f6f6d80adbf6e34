package preflight

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseBytes reads a byte size such as "512MiB", "1GiB", "64MB", "4096".
// Binary (KiB, MiB, GiB) and decimal (KB, MB, GB) suffixes are both
// accepted, case-insensitively; a bare number is bytes.
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   int64
	}{
		{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
		{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
		{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"b", 1},
	}
	lower := strings.ToLower(t)
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(lower, u.suffix) {
			mult = u.mult
			t = strings.TrimSpace(t[:len(t)-len(u.suffix)])
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("byte size %q is not a non-negative integer with an optional unit (KiB, MiB, GiB, KB, MB, GB)", s)
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("byte size %q is too large", s)
	}
	return n * mult, nil
}

// FormatBytes prints n in binary units for humans.
func FormatBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.2f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// FlagBytes is n as a value to give --kv-memory: rounded up to a whole
// unit (KiB below 1 MiB, MiB below 4 GiB, else GiB) so that ParseBytes of
// it is at least n, and the sentence that suggests it can be pasted.
func FlagBytes(n int64) string {
	up := func(unit int64) int64 { return (n + unit - 1) / unit }
	switch {
	case n >= 4<<30:
		return fmt.Sprintf("%dGiB", up(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", up(1<<20))
	}
	return fmt.Sprintf("%dKiB", up(1<<10))
}
