package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"sluice/internal/handoff"
	"sluice/internal/kv"
)

// rememberFailed and moveAvoids over random histories: the remembered
// failures are the latest ones, at most the bound, the newest last, and
// never written over an avoid list a pairer already holds; a move's
// first avoid list holds the pair it leaves and every remembered
// failure, its fallback (only with earlier failures) the pair it leaves
// alone.
func TestMoveAvoidsProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 29))
	pool := make([]*Pair, 32)
	for i := range pool {
		pool[i] = &Pair{DecodeName: fmt.Sprint("d", i)}
	}
	for iter := range 5000 {
		n, limit := rng.IntN(20), rng.IntN(12)-1
		failed := make([]*Pair, n, n+rng.IntN(4)) // spare capacity: an append would write it
		for i := range failed {
			failed[i] = pool[rng.IntN(len(pool))]
		}
		before := slices.Clone(failed[:cap(failed)])
		p := pool[rng.IntN(len(pool))]
		out := rememberFailed(failed, p, limit)
		if want := min(n+1, max(limit, 1)); len(out) != want {
			t.Fatalf("iter %d: %d remembered of %d+1 with limit %d, want %d", iter, len(out), n, limit, want)
		}
		if out[len(out)-1] != p || !slices.Equal(out[:len(out)-1], failed[n-(len(out)-1):]) {
			t.Fatalf("iter %d: remembered %v, want the latest of %v then %v", iter, out, failed, p)
		}
		if !slices.Equal(failed[:cap(failed)], before) {
			t.Fatalf("iter %d: the earlier list was written to", iter)
		}
		out[0] = nil // the result is the caller's own
		if !slices.Equal(failed[:cap(failed)], before) {
			t.Fatalf("iter %d: the result shares the earlier list's array", iter)
		}

		lists := moveAvoids(failed, p)
		all := rememberFailed(failed, p, maxFailedPairs)
		switch {
		case len(lists) == 0 || len(lists) > 2:
			t.Fatalf("iter %d: %d avoid lists", iter, len(lists))
		case !slices.Equal(lists[0], all):
			t.Fatalf("iter %d: first avoid list %v, want every remembered failure and the pair left %v", iter, lists[0], all)
		case len(lists[0]) > maxFailedPairs:
			t.Fatalf("iter %d: avoid list of %d pairs, bound %d", iter, len(lists[0]), maxFailedPairs)
		case n == 0 && len(lists) != 1:
			t.Fatalf("iter %d: no earlier failure, yet %d avoid lists", iter, len(lists))
		case n > 0 && (len(lists) != 2 || !slices.Equal(lists[1], []*Pair{p})):
			t.Fatalf("iter %d: fallback %v, want the pair left alone", iter, lists[1:])
		}
	}
}

// openFailed over every kind of failure a stream open can meet, before
// and after tokens reached the client: exactly one outcome; nothing sent
// is never migrated, something sent never retried (the machine forbids
// it); a verification failure or a fault of the request never moves; a
// failure of the worker or the link always moves (a retry before the
// first token, a migration after), as a refusal by a worker that drains
// does; a live worker's other answers after tokens end the request.
func TestOpenFailedProperties(t *testing.T) {
	fault := handoff.FromWire(CodeUnsupported, "this worker cannot serve that output format")
	cases := []struct {
		name                   string
		err                    error
		retryBefore, moveAfter bool
	}{
		{"transport", handoff.ErrTransport.With("connection reset"), true, true},
		{"stream ended", errStreamEnded, true, true},
		{"draining", handoff.ErrDraining, true, true},
		{"refused", handoff.ErrRefused.With("limits"), true, false},
		{"unknown handoff", handoff.ErrUnknownHandoff, true, false},
		{"internal", handoff.ErrInternal.With("oops"), true, false},
		{"no capacity", fmt.Errorf("grow: %w", kv.ErrNoCapacity), true, false},
		{"digest mismatch", handoff.ErrDigestMismatch, false, false},
		{"count mismatch", handoff.ErrCountMismatch, false, false},
		{"checksum", handoff.ErrChecksum, false, false},
		{"kv violation", &kv.Violation{Kind: kv.KindForeignOwner}, false, false},
		{"request fault", fault, false, false},
		{"engine error 400", errf(CodeInvalid, 400, nil, "bad"), false, false},
		{"engine error 503", errf(CodeOverloaded, 503, nil, "busy"), true, false},
	}
	for _, c := range cases {
		for _, sent := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/sent=%v", c.name, sent), func(t *testing.T) {
				dr, fail := openFailed(sent, c.err)
				set := 0
				for _, e := range []*Error{dr.retry, dr.migrate, fail} {
					if e != nil {
						set++
					}
				}
				if set != 1 {
					t.Fatalf("retry %v, migrate %v, fail %v: want exactly one", dr.retry, dr.migrate, fail)
				}
				if dr.derr != c.err {
					t.Fatalf("decode's error %v, want %v (the pairer is told it)", dr.derr, c.err)
				}
				if sent && dr.retry != nil || !sent && dr.migrate != nil {
					t.Fatalf("sent %v: retry %v, migrate %v", sent, dr.retry, dr.migrate)
				}
				moved := dr.retry != nil || dr.migrate != nil
				if want := !sent && c.retryBefore || sent && c.moveAfter; moved != want {
					t.Fatalf("moved %v, want %v (retry %v, migrate %v, fail %v)", moved, want, dr.retry, dr.migrate, fail)
				}
				var e *Error
				for _, x := range []*Error{dr.retry, dr.migrate, fail} {
					if x != nil {
						e = x
					}
				}
				if integrity := errors.Is(c.err, handoff.ErrDigestMismatch) || errors.Is(c.err, handoff.ErrCountMismatch) ||
					errors.Is(c.err, handoff.ErrChecksum) || errors.As(c.err, new(*kv.Violation)); integrity && e.Code != CodeIntegrity {
					t.Fatalf("a verification failure ends as %s, want %s (I8)", e.Code, CodeIntegrity)
				}
				if dr.retry != nil && dr.conn != connFailure(c.err) {
					t.Fatalf("retry's conn %v, want %v", dr.conn, connFailure(c.err))
				}
			})
		}
	}
}
