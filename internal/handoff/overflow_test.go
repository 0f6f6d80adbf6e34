package handoff

import (
	"errors"
	"math"
	"testing"

	"sluice/internal/kv"
)

// askingPool records every page count the Receiver asks its pool for.
type askingPool struct {
	*memPool
	asked []int
}

func (p *askingPool) Reserve(o kv.Owner, n int) ([]kv.PageRef, error) {
	p.asked = append(p.asked, n)
	return p.memPool.Reserve(o, n)
}

// A Reserve whose prompt_tokens + max_tokens does not fit an int (the sum
// wraps negative near MaxInt64) is refused by the Receiver itself, before
// any page count derived from the wrapped sum reaches the pool; one that
// fits but exceeds the pool is refused by the pool for an honest count.
// Either way no page is taken.
func TestReceiverReserveDoesNotWrap(t *testing.T) {
	const prompt = 10
	cases := []struct {
		name          string
		prompt, max   int
		wantPoolAsked int // -1: the pool must not be asked at all
	}{
		{"max_tokens MaxInt64", prompt, math.MaxInt64, -1},
		{"max_tokens MaxInt64-prompt+1", prompt, math.MaxInt64 - prompt + 1, -1},
		{"prompt MaxInt64", math.MaxInt64, 1, -1},
		// The sum is exactly MaxInt64: it fits an int, so the pool is
		// asked for ceil(MaxInt64/4) pages, and refuses.
		{"max_tokens MaxInt64-prompt", prompt, math.MaxInt64 - prompt, math.MaxInt64/tPS + 1},
		{"max_tokens MaxInt32+1", prompt, math.MaxInt32 + 1, (prompt + math.MaxInt32 + 1 + tPS - 1) / tPS},
	}
	for _, tc := range cases {
		p := &askingPool{memPool: newMemPool(32, tPS, tPS*tBPS)}
		r := NewReceiver(ReceiverConfig{PageSize: tPS, Lease: 1}, p)
		_, err := r.Reserve(t0, &Reserve{Handoff: hid(1), Tenant: "a", PromptTokens: tc.prompt, MaxTokens: tc.max})
		if !errors.Is(err, ErrRefused) {
			t.Fatalf("%s: %v, want refused", tc.name, err)
		}
		switch {
		case tc.wantPoolAsked < 0 && len(p.asked) != 0:
			t.Fatalf("%s: the pool was asked for %v pages from a wrapped sum", tc.name, p.asked)
		case tc.wantPoolAsked >= 0 && (len(p.asked) != 1 || p.asked[0] != tc.wantPoolAsked):
			t.Fatalf("%s: the pool was asked for %v pages, want [%d]", tc.name, p.asked, tc.wantPoolAsked)
		}
		if n := len(p.free); n != 32 {
			t.Fatalf("%s: %d of 32 pages free after the refusal", tc.name, n)
		}
		if s := r.Stats(); s.Reserved != 0 || s.Live != 0 {
			t.Fatalf("%s: stats %+v after a refusal", tc.name, s)
		}
	}
}
