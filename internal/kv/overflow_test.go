package kv

import (
	"math"
	"math/big"
	"testing"
)

// Token and page arithmetic on client-controlled counts (max_tokens) never
// wraps: PagesFor and TokensFit agree with exact big-integer arithmetic at
// the extremes of int, where tokens+pageSize-1 and prompt+gen wrap.
func TestPagesForAndTokensFitAtTheExtremes(t *testing.T) {
	counts := []int{0, 1, 3, 15, 16, 17, math.MaxInt32, math.MaxInt32 + 1, math.MaxInt64 - 17, math.MaxInt64 - 3, math.MaxInt64 - 1, math.MaxInt64}
	for _, n := range counts {
		for _, ps := range []int{1, 4, 16, 1 << 20} {
			// Oracle: ceil(n/ps) in big integers.
			want := new(big.Int).Div(new(big.Int).Add(big.NewInt(int64(n)), big.NewInt(int64(ps-1))), big.NewInt(int64(ps)))
			if got := PagesFor(n, ps); int64(got) != want.Int64() || got < 0 {
				t.Errorf("PagesFor(%d, %d) = %d, want %s", n, ps, got, want)
			}
		}
	}
	for _, prompt := range []int{-1, 0, 1, 3, 100, math.MaxInt32 + 1, math.MaxInt64} {
		for _, gen := range []int{-1, 0, 1, 28, math.MaxInt32 + 1, math.MaxInt64 - 3, math.MaxInt64 - 100, math.MaxInt64 - 1, math.MaxInt64} {
			for _, limit := range []int{0, 128, math.MaxInt32, math.MaxInt64} {
				sum := new(big.Int).Add(big.NewInt(int64(prompt)), big.NewInt(int64(gen)))
				want := prompt >= 0 && gen >= 0 && sum.Cmp(big.NewInt(int64(limit))) <= 0
				if got := TokensFit(prompt, gen, limit); got != want {
					t.Errorf("TokensFit(%d, %d, %d) = %v, want %v", prompt, gen, limit, got, want)
				}
			}
		}
	}
}
