package preflight

import (
	"math"
	"math/big"
	"testing"
)

// ceilDiv sizes pools and the memory a context needs from flag values
// (--context, --kv-pool-tokens) that can be as large as an int: it must
// not wrap where a+b-1 does.
func TestCeilDivAtTheExtremes(t *testing.T) {
	for _, a := range []int{0, 1, 15, 16, 17, math.MaxInt32 + 1, math.MaxInt64 - 15, math.MaxInt64} {
		for _, b := range []int{1, 16, 1 << 20} {
			want := new(big.Int).Div(new(big.Int).Add(big.NewInt(int64(a)), big.NewInt(int64(b-1))), big.NewInt(int64(b)))
			if got := ceilDiv(a, b); int64(got) != want.Int64() {
				t.Errorf("ceilDiv(%d, %d) = %d, want %s", a, b, got, want)
			}
		}
	}
}
