package ratelimit

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Over any interval between two admissions, a bucket of limit L per window
// P never admits more than L + W/per units, per = ceil(P/L): the burst of
// one window plus the steady rate, whatever the schedule.
func TestBucketNeverExceedsItsBound(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		limit := rapid.Int64Range(1, 500).Draw(t, "limit")
		window := time.Duration(rapid.Int64Range(1, 120).Draw(t, "window_s")) * time.Second
		b := NewBucket(limit, window)
		type adm struct {
			at time.Time
			n  int64
		}
		var got []adm
		now := t0
		for i := range rapid.IntRange(1, 300).Draw(t, "steps") {
			now = now.Add(time.Duration(rapid.Int64Range(0, int64(window)/4).Draw(t, "dt")))
			n := rapid.Int64Range(1, limit).Draw(t, "n")
			if ok, _ := b.check(now, n); ok {
				b.take(now, n)
				got = append(got, adm{now, n})
			}
			_ = i
		}
		for i := range got {
			var sum int64
			for j := i; j < len(got); j++ {
				sum += got[j].n
				w := got[j].at.Sub(got[i].at)
				if bound := limit + int64(w/b.per); sum > bound {
					t.Fatalf("admitted %d units in %v (limit %d per %v): bound %d", sum, w, limit, window, bound)
				}
			}
		}
	})
}

// A refused request of n <= limit is admitted exactly at its RetryAfter
// (not a moment before) when nothing else takes from the bucket, and
// RetryAfter never exceeds the window: no starvation, and Retry-After
// headers that tell the truth.
func TestRetryAfterIsExact(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		limit := rapid.Int64Range(1, 1000).Draw(t, "limit")
		b := NewBucket(limit, Window)
		now := t0
		for range rapid.IntRange(0, 50).Draw(t, "fill") {
			n := rapid.Int64Range(1, limit).Draw(t, "take")
			if ok, _ := b.check(now, n); ok {
				b.take(now, n)
			}
			now = now.Add(time.Duration(rapid.Int64Range(0, int64(time.Second)).Draw(t, "dt")))
		}
		n := rapid.Int64Range(1, limit).Draw(t, "n")
		ok, wait := b.check(now, n)
		if ok {
			return
		}
		if wait <= 0 || wait > b.tau {
			t.Fatalf("refused with RetryAfter %v (window %v)", wait, Window)
		}
		if ok, _ := b.check(now.Add(wait-1), n); ok {
			t.Fatalf("admitted before its RetryAfter %v", wait)
		}
		if ok, _ := b.check(now.Add(wait), n); !ok {
			t.Fatalf("refused again at its RetryAfter %v", wait)
		}
	})
}

// Refunds never make the bucket hold more than its limit.
func TestRefundNeverOverfills(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		limit := rapid.Int64Range(1, 1000).Draw(t, "limit")
		b := NewBucket(limit, Window)
		now := t0
		for range rapid.IntRange(1, 100).Draw(t, "steps") {
			n := rapid.Int64Range(1, limit).Draw(t, "n")
			if ok, _ := b.check(now, n); ok {
				b.take(now, n)
			}
			b.give(now, rapid.Int64Range(0, 2*limit).Draw(t, "refund"))
			if r := b.Remaining(now); r > limit || r < 0 {
				t.Fatalf("remaining %d of %d", r, limit)
			}
			now = now.Add(time.Duration(rapid.Int64Range(0, int64(time.Second)).Draw(t, "dt")))
		}
	})
}

// The limiter takes the request and its tokens together or not at all,
// tells a request larger than a whole minute's tokens apart (no wait would
// admit it), leaves unlimited tenants alone, and reports the headers'
// numbers.
func TestLimiterAdmit(t *testing.T) {
	l := New(map[string]Limits{"a": {RPM: 2, TPM: 100}, "b": {TPM: 50}})
	now := t0
	if d := l.Admit("nobody", now, 1e9); !d.OK || d.Limited {
		t.Fatalf("an unlimited tenant: %+v", d)
	}
	if d := l.Admit("b", now, 51); d.OK || !d.TooLarge {
		t.Fatalf("51 tokens against a limit of 50: %+v", d)
	}
	d := l.Admit("a", now, 60)
	if !d.OK || d.State.RemainingRequests != 1 || d.State.RemainingTokens != 40 {
		t.Fatalf("first: %+v", d)
	}
	// Tokens short: refused, and the request was not taken either.
	d = l.Admit("a", now, 60)
	if d.OK || d.RetryAfter <= 0 || d.State.RemainingRequests != 1 {
		t.Fatalf("second (tokens short): %+v", d)
	}
	l.Refund("a", now, 30) // the first used 30 of its 60
	if d = l.Admit("a", now, 60); !d.OK || d.State.RemainingRequests != 0 || d.State.RemainingTokens != 10 {
		t.Fatalf("after the refund: %+v", d)
	}
	if d = l.Admit("a", now, 1); d.OK || d.RetryAfter != 30*time.Second {
		t.Fatalf("third request of 2 per minute: %+v, want RetryAfter 30s", d)
	}
	if d = l.Admit("a", now.Add(30*time.Second), 1); !d.OK {
		t.Fatalf("at its RetryAfter: %+v", d)
	}
}

// Over is Admit's early answer: it never refuses what Admit would admit
// (a request of one token, the least any request costs), refuses whenever
// Admit would refuse even that, takes nothing, and its RetryAfter is the
// same as Admit's for that least request.
func TestOverAgreesWithLeastAdmit(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		lim := Limits{RPM: rapid.Int64Range(0, 20).Draw(t, "rpm"), TPM: rapid.Int64Range(0, 200).Draw(t, "tpm")}
		l := New(map[string]Limits{"a": lim})
		now := t0
		for range rapid.IntRange(1, 200).Draw(t, "steps") {
			now = now.Add(time.Duration(rapid.Int64Range(0, int64(5*time.Second)).Draw(t, "dt")))
			before := l.buckets["a"].stateAt(now)
			over := l.Over("a", now)
			if after := l.buckets["a"].stateAt(now); after != before {
				t.Fatalf("Over took from the buckets: %+v -> %+v", before, after)
			}
			// What Admit would say for the least request, on a copy.
			cp := &Limiter{limits: l.limits, buckets: map[string]*pair{"a": l.buckets["a"].clone()}}
			least := cp.Admit("a", now, 1)
			if over.OK != least.OK || over.RetryAfter != least.RetryAfter || over.Limited != least.Limited {
				t.Fatalf("Over %+v, Admit(1) %+v (limits %+v)", over, least, lim)
			}
			if rapid.Bool().Draw(t, "admit") {
				l.Admit("a", now, rapid.Int64Range(1, 50).Draw(t, "n"))
			}
		}
	})
	if d := New(nil).Over("nobody", t0); !d.OK || d.Limited {
		t.Fatalf("an unlimited tenant: %+v", d)
	}
}

func (p *pair) stateAt(now time.Time) State { return p.state(now) }

func (p *pair) clone() *pair {
	c := &pair{}
	if p.req != nil {
		r := *p.req
		c.req = &r
	}
	if p.tok != nil {
		t := *p.tok
		c.tok = &t
	}
	return c
}
