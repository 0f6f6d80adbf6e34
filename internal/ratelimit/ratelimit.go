// Package ratelimit holds per-tenant request and token rate limits: a
// token bucket per tenant and kind, kept as a theoretical arrival time
// (GCRA) in integer nanoseconds, so there is no refill loop, no float
// drift, and a decision is a few comparisons. The package is pure: time
// comes in as an argument, which is what lets the property tests drive it
// over thousands of schedules.
//
// The bound. A bucket of limit L per window P admits a cost of at most L
// at once (a full bucket) and refills at L/P (one unit every ceil(P/L)).
// Over any interval of length W it therefore admits at most L + W*L/P: a
// burst of one window's worth, then the steady rate. A request of cost
// n <= L is never starved: once it is refused, it is admitted at
// RetryAfter if nothing else takes from the bucket first, and RetryAfter
// is never more than P (plus under L nanoseconds of rounding).
package ratelimit

import (
	"sync"
	"time"
)

// Bucket is one token bucket. The zero Bucket is unusable; use NewBucket.
type Bucket struct {
	limit  int64
	window time.Duration
	// per is the time one unit takes to refill, rounded up, so the real
	// rate never exceeds limit/window; tau = limit*per is the bucket's
	// depth in time (the window, or a few nanoseconds more by the
	// rounding), so a full bucket holds exactly limit units.
	per, tau time.Duration
	// tat is the theoretical arrival time: the bucket is full at tat and
	// holds (window - (tat-now))/per units before it.
	tat time.Time
}

// NewBucket makes a bucket of limit units per window, full.
func NewBucket(limit int64, window time.Duration) *Bucket {
	per := (window + time.Duration(limit) - 1) / time.Duration(limit)
	return &Bucket{limit: limit, window: window, per: per, tau: time.Duration(limit) * per}
}

// Limit is the bucket's units per window.
func (b *Bucket) Limit() int64 { return b.limit }

// check reports whether n units are available at now, and if not how long
// until they are.
func (b *Bucket) check(now time.Time, n int64) (ok bool, wait time.Duration) {
	if n > b.limit {
		return false, -1 // never: the caller reports it
	}
	tat := b.tat
	if tat.Before(now) {
		tat = now
	}
	next := tat.Add(time.Duration(n) * b.per)
	if over := next.Sub(now) - b.tau; over > 0 {
		return false, over
	}
	return true, 0
}

// take removes n units (check said ok).
func (b *Bucket) take(now time.Time, n int64) {
	if b.tat.Before(now) {
		b.tat = now
	}
	b.tat = b.tat.Add(time.Duration(n) * b.per)
}

// give returns n units taken earlier and not used; the bucket never holds
// more than its limit.
func (b *Bucket) give(now time.Time, n int64) {
	b.tat = b.tat.Add(-time.Duration(n) * b.per)
	if b.tat.Before(now) {
		b.tat = now
	}
}

// Remaining is how many units the bucket holds at now.
func (b *Bucket) Remaining(now time.Time) int64 {
	used := b.tat.Sub(now)
	if used <= 0 {
		return b.limit
	}
	return max(0, b.limit-int64((used+b.per-1)/b.per))
}

// Reset is how long until the bucket is full again.
func (b *Bucket) Reset(now time.Time) time.Duration {
	return max(0, b.tat.Sub(now))
}

// Limits are one tenant's limits: requests and tokens (prompt plus
// generated) per minute; 0 means no limit of that kind.
type Limits struct {
	RPM, TPM int64
}

// Window is the period of every limit: a minute, as OpenAI states them.
const Window = time.Minute

// Limiter holds every limited tenant's buckets.
type Limiter struct {
	mu      sync.Mutex
	limits  map[string]Limits
	buckets map[string]*pair
}

type pair struct{ req, tok *Bucket }

// New makes a limiter for the tenants in limits (others are unlimited).
func New(limits map[string]Limits) *Limiter {
	l := &Limiter{limits: limits, buckets: map[string]*pair{}}
	for t, lim := range limits {
		p := &pair{}
		if lim.RPM > 0 {
			p.req = NewBucket(lim.RPM, Window)
		}
		if lim.TPM > 0 {
			p.tok = NewBucket(lim.TPM, Window)
		}
		l.buckets[t] = p
	}
	return l
}

// Decision is the outcome of Admit.
type Decision struct {
	// Limited: the tenant has limits (and State is meaningful).
	Limited bool
	// OK: the request was admitted and its cost taken.
	OK bool
	// TooLarge: the request's tokens exceed the tenant's whole per-minute
	// limit; no wait would admit it.
	TooLarge bool
	// RetryAfter: when refused (not TooLarge), how long until the same
	// request would be admitted if nothing else took from the buckets.
	RetryAfter time.Duration
	State      State
}

// State is what the x-ratelimit-* headers report, after the decision.
type State struct {
	LimitRequests, RemainingRequests int64
	ResetRequests                    time.Duration
	LimitTokens, RemainingTokens     int64
	ResetTokens                      time.Duration
	HasRequests, HasTokens           bool
}

// Admit takes one request and tokens tokens from tenant's buckets at now,
// both or neither.
func (l *Limiter) Admit(tenant string, now time.Time, tokens int64) Decision {
	if l == nil {
		return Decision{OK: true}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.buckets[tenant]
	if p == nil {
		return Decision{OK: true}
	}
	d := Decision{Limited: true, OK: true}
	if p.tok != nil && tokens > p.tok.limit {
		d.OK, d.TooLarge = false, true
	}
	for _, c := range []struct {
		b *Bucket
		n int64
	}{{p.req, 1}, {p.tok, tokens}} {
		if c.b == nil || d.TooLarge {
			continue
		}
		if ok, wait := c.b.check(now, c.n); !ok {
			d.OK = false
			d.RetryAfter = max(d.RetryAfter, wait)
		}
	}
	if d.OK {
		if p.req != nil {
			p.req.take(now, 1)
		}
		if p.tok != nil {
			p.tok.take(now, tokens)
		}
	}
	d.State = p.state(now)
	return d
}

// Over reports, without taking anything, whether tenant is refused any
// request at now: its request bucket cannot give one request, or its
// token bucket cannot give one token. The router asks it before it
// decodes, renders or tokenizes a body, so a tenant over its limit costs
// the router no more than this check per request; Admit still decides
// what a request costs once its tokens are known. When Over refuses,
// Admit at the same now would refuse any request of the tenant (every
// request costs one request and at least one token), so the early answer
// never refuses what the late one would admit. OK and Limited are as in
// Admit; TooLarge is never set.
func (l *Limiter) Over(tenant string, now time.Time) Decision {
	if l == nil {
		return Decision{OK: true}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.buckets[tenant]
	if p == nil {
		return Decision{OK: true}
	}
	d := Decision{Limited: true, OK: true}
	for _, b := range []*Bucket{p.req, p.tok} {
		if b == nil {
			continue
		}
		if ok, wait := b.check(now, 1); !ok {
			d.OK = false
			d.RetryAfter = max(d.RetryAfter, wait)
		}
	}
	d.State = p.state(now)
	return d
}

// Refund gives back tokens a request was charged for and did not use
// (it is charged prompt plus max_tokens up front).
func (l *Limiter) Refund(tenant string, now time.Time, tokens int64) {
	if l == nil || tokens <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.buckets[tenant]; p != nil && p.tok != nil {
		p.tok.give(now, tokens)
	}
}

func (p *pair) state(now time.Time) State {
	var s State
	if p.req != nil {
		s.HasRequests = true
		s.LimitRequests, s.RemainingRequests, s.ResetRequests = p.req.limit, p.req.Remaining(now), p.req.Reset(now)
	}
	if p.tok != nil {
		s.HasTokens = true
		s.LimitTokens, s.RemainingTokens, s.ResetTokens = p.tok.limit, p.tok.Remaining(now), p.tok.Reset(now)
	}
	return s
}
