// Package handoff is the protocol that moves a prefilled sequence's KV pages
// from a prefill worker into pages a decode worker reserved for it, and the
// transports that carry it (in-process, TCP, one-sided shared memory).
//
// The protocol, as in DESIGN.md "The handoff":
//
//	router  -> decode : Reserve      (decode stamps pages with the handoff as owner)
//	decode  -> router : Reservation  (pages with generations, expected tokens)
//	router  -> prefill: PrefillRequest (tokens + the Reservation)
//	prefill -> decode : PageWrite ... (bounded batches, each acknowledged;
//	                                   streamed: each chunk's pages while
//	                                   the next chunk computes)
//	prefill -> decode : Commit       (LAST: tokens, digest, first token)
//	router  -> decode : Stream       (tokens after the commit)
//
// The two protocol cores are pure state machines with no goroutines, clocks
// or network (etcd raft style): Receiver on the decode side, Sender on the
// prefill side. Time arrives as an argument. Workers and transports are thin
// wrappers around them, so the simulator and the model checker drive exactly
// the code that serves requests.
//
// Invariants enforced here: I5 (the commit is verified: count, coverage,
// owner, generation, digest; a missing digest fails), I6 (pages written
// one-sidedly stay quarantined until a drain acknowledgement or the lease
// expires), I8 (every failure is closed: typed error, quarantine, metric),
// I12 (the TCP transport authenticates both peers).
package handoff
