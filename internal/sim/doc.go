// Package sim is the deterministic simulator: the real request state
// machine (internal/request), handoff Receiver and Sender
// (internal/handoff), KV pools (internal/kv), one-sided page placement
// (internal/handoff/shm) and model forward pass (internal/model), wired
// through a seeded in-process network on a virtual clock and driven by a
// single-threaded discrete-event scheduler. A seed fixes every choice: the
// fault mix, pool sizes, page size, transport (two-sided or one-sided),
// timings, every message's fate, the prompts. So a failing seed replays
// exactly, with a readable trace of its events.
//
// The workers around the protocol cores (message handling, continuous
// batching, the reservation timeout, the router's orchestration) are this
// package's own single-threaded wrappers that follow internal/engine's
// rules; the engine's workers run on goroutines and the wall clock and so
// cannot be replayed from a seed.
//
// # Faults
//
// Each kind is switched on for a run with some probability and then fires
// at its own rate (swarm testing, so most runs have a few kinds and some
// have many): message delay and reordering, duplication and loss; prefill
// and decode crash and restart (empty); client disconnect and router abort
// at any phase; the prefill side giving a handoff up; one-sided writes that
// land long after they were posted (after their handoff was declared
// failed); transfers slower than the lease; bursts into small LIFO pools
// (exhaustion, immediate page reuse); misbehaving prefill peers (short
// transfer with a full-count commit, wrong digest, no digest, a page with
// another page's bytes, a stale writer re-sending after its abort, writes
// into another handoff's pages, placed one-sidedly through the fenced
// shm.Writer when the run is one-sided); clients retrying failures at
// once. A restarted decode worker maps its shared pool file at the same
// path as the crashed one, with one-sided writes of the old incarnation
// still in flight (restart-same-file).
//
// # What every run checks
//
// Each request ends with exactly its reference output (greedy decoding of
// the same prompt in a private pool with no transfer, computed once per
// prompt and page size) or an error; tokens streamed before an error or a
// cancel are a prefix of the reference; no request reports success over KV
// that differs from the reference's (compared page by page when decode
// accepts the commit and again over every decoded position before release:
// the "undetected integrity violation" leak); usage is what was verified
// (I9); a rejected request never holds a reservation (I1); after the drain
// every pool is entirely free and no handoff is live. The default run also
// asserts that one-sided writes of a crashed decode incarnation landed (in
// its old file) and that foreign one-sided writes reached the writer's
// fence, so both hazards are exercised. goleak checks that no
// goroutine outlives the tests.
//
// # Running
//
//	go test ./internal/sim/                       # 1000 seeds + injected bugs, ~30 s on 2 cores
//	make sim SEEDS=100000                          # SLUICE_SIM_SEEDS=100000, TestSim only
//	SLUICE_SIM_FROM=50001 SLUICE_SIM_SEEDS=1000 go test -run 'TestSim$' ./internal/sim/
//	SLUICE_SIM_SEED=12345 go test -count=1 -run 'TestSim/seed' -v ./internal/sim/   # replay one seed with its trace
//	SLUICE_SIM_BUG_RATES=1000 go test -run TestInjectedBugRates -v ./internal/sim/
//
// # A counterexample
//
// A failing seed is reported with its violations, its setup, the tail of
// its trace and the command that replays it:
//
//	seed 110 broke an invariant; replay: SLUICE_SIM_SEED=110 go test -count=1 -run 'TestSim/seed' -v ./internal/sim/
//	  req11(011d9c) reported success with output [119 385 471 32 73 459 318 280], reference [119 385 471 32 73 503 508 462] (undetected integrity violation)
//	  setup: page 4, decode 24 pages, prefill 16 pages, context 64, one-sided true, ...
//	trace tail:
//	   21.397ms  one-sided write 0f5d94 page 1 lands in decode#0 memory AFTER its handoff ended (page now reserved for req2(3f5502), committed)
//	   ...
//
// Trace lines are the virtual time, then "-> what" for a delivered message
// (LOST, TIMEOUT and "(duplicate)" mark faults), END lines with each
// request's terminal reason and output, and oracle lines where the
// simulator saw KV differ from the reference.
//
// # Bug injection
//
// Bugs switches safeguards off (the handoff.Safeguards and kv.Unsafe test
// hooks, and three I6 hooks of this package: release before drain, an early
// drain acknowledgement, a lease shorter than the in-flight time).
// TestInjectedBugs asserts that each safeguard no other layer backs up is
// found within a bounded number of seeds, and that each backed-up layer
// alone finds nothing.
package sim
