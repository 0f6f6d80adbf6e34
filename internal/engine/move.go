package engine

import "net/http"

// The pure parts of moving a request to another pair after a failure
// (run, retryPair): which pairs the next pairing avoids, and what a
// decode stream that fails to open right after a new reservation leads
// to. No I/O, no locks: property-tested in move_prop_test.go.

// maxFailedPairs bounds the pairs one request remembers as having failed
// it (attempts.failed): every entry is a failure that spent a retry or a
// migration, so only a budget configured above it reaches the bound;
// then the oldest failures are forgotten (the pairer's health view still
// keeps a dead worker out).
const maxFailedPairs = 8

// rememberFailed is failed with p added as the latest failure, keeping
// the latest limit (at least one: p). The result is a new slice: avoid
// lists already handed to a pairer are never written to.
func rememberFailed(failed []*Pair, p *Pair, limit int) []*Pair {
	limit = max(limit, 1)
	keep := failed[max(len(failed)+1-limit, 0):]
	out := make([]*Pair, 0, len(keep)+1)
	return append(append(out, keep...), p)
}

// moveAvoids is the avoid lists a migration off leaving tries in turn:
// first every pair that failed the request (failed) and leaving, so that
// a second move does not go back to a worker that just failed it (a dead
// worker not yet marked down, a false alarm's); when the pairer has no
// other pair, leaving alone, as before, since a worker that failed
// earlier may serve again (it came back; one still down is the
// pairer's to filter), which beats ending a stream that already sent
// tokens.
func moveAvoids(failed []*Pair, leaving *Pair) [][]*Pair {
	all := rememberFailed(failed, leaving, maxFailedPairs)
	if len(all) == 1 {
		return [][]*Pair{all}
	}
	return [][]*Pair{all, {leaving}}
}

// openFailed is what a decode stream that failed to open (err) right
// after a new reservation leads to, as if its handoff had failed at once
// (the reservation is then aborted either way, I6): before any token
// reached the client (sent false) a retry on another pair when another
// pair may not fail the same way (retryable); after tokens, a migration
// when the failure is the worker's or the link's (migratable: it died,
// was cut off, or drains); anything else (fail) ends the request, an
// integrity failure always (I8). One and
// only one of dr.retry, dr.migrate and fail is set; dr.derr is err.
func openFailed(sent bool, err error) (dr driveResult, fail *Error) {
	e := asEngineError(err, CodeHandoff, http.StatusBadGateway, "opening the decode stream")
	if hf := handoffFailure(err); hf.Code == CodeIntegrity {
		e = hf // a verification failure fails closed, never moved (I8)
	}
	dr.derr = err
	switch {
	case !sent && retryable(e):
		dr.retry, dr.conn = e, connFailure(err)
	case sent && migratable(err) && e.Code != CodeIntegrity:
		dr.migrate = e
	default:
		fail = e
	}
	return dr, fail
}
