// Package sim is the deterministic simulator: the code that serves,
// wired through a seeded in-process network on a virtual clock and driven
// by a single-threaded discrete-event scheduler. A seed fixes every
// choice: the fault mix, pool sizes, page size, transport (two-sided or
// one-sided), queue bounds, timings, every message's fate, the prompts and
// their sampling. So a failing seed replays exactly, with a readable trace
// of its events.
//
// What runs is the real code:
//
//   - decode is engine.DecodeWorker itself, built driven
//     (engine.NewDrivenDecodeWorker: no goroutine, this run's clock): its
//     handoff.Receiver, its continuous-batching core (the engine's batch:
//     pages on demand, growth page by page, preemption of the latest
//     arrival, the "preempted" stream end), its handoff timeout and its
//     token streams, and its own prefix cache (keys from the Reserve's
//     tokens; prefill skips sending the pages decode holds). The
//     simulator only turns delivered messages into the
//     worker's calls, runs a step decodeStep after the worker asks for one
//     (its wake), and carries stream items back as messages. Its pool is
//     wrapped (watchPool) so the oracle sees every release and grant.
//   - the router runs the real request.Machine and the real admission
//     core (sched.Core: bounded queue, per-tenant deficit round robin,
//     queue timeout on the virtual clock, per-tenant head-of-line pause
//     on decode's no_room, preempted requests first) with engine.Disaggregated's
//     orchestration: a preempted request resumes with a new handoff (new
//     id) whose prompt is the prompt plus every token generated so far,
//     whose stream carries those tokens (decode's sampler continues after
//     them) and whose prefill request carries the sampler offset.
//   - in some runs a colocated engine serves part of the requests:
//     engine.DrivenBatch, the batch core engine.Colocated serves with
//     (chunked prefill within a step budget, growth, preemption of the
//     latest arrival while it computes its prompt, decodes, or rebuilds
//     its KV, resume oldest first), behind its own sched.Core, with
//     engine.Colocated's reservation rule (prompt plus at most a page;
//     nothing while preempted sequences wait).
//   - prefill computes prompts in engine.DrivenPrefill, the prefill
//     worker's own batch (engine.PrefillWorker's scheduler): prompt-only
//     sequences over the pages reserved for them, chunked within the step
//     budget by the tenants' step shares, the first token drawn at the
//     request's sampler offset, and the pause points at which a step
//     carrying prompt chunks yields to prompts that arrived during it
//     (engine/yield.go: nested steps within the paused step's budget). A
//     step is one call at the end of its virtual time; the prompts that
//     arrived while it ran join at the first pause point after their
//     arrival (the pause points spread evenly over the step's time, two a
//     layer), so nested steps happen in simulated runs, the same for a
//     seed every time. The prefix cache (salted chain keys, Lookup, Seal,
//     Insert, eviction under pressure), the real kv.Pool and the real
//     handoff.Sender around it are driven by this package's wrapper, which
//     is also where misbehaving peers are injected: the engine's prefill
//     worker blocks its caller for the whole prefill and push, so its
//     admission and push cannot be stepped from one thread; the wrapper
//     follows their rules (the router's abort stops the prompt at the
//     batch's next step boundary; handoff.Push's contract: Drained only
//     once none of our writes is in flight). A call waits for its prefill
//     pages in the engine's prefill queue: the pure admission core
//     (sched.Core) configured as PrefillWorker configures it (a prompt's
//     cost its pages, FIFO per tenant, DRR across tenants, head of line
//     per tenant, the queue timeout, pages coming back at a job's end or
//     a quarantine's expiry), its actions carried out as the engine's
//     admission edge does (try the prefix cache and a reservation: no
//     room, reserved, or dropped). Most runs push as the engine's prefill worker
//     does by default (pushStreaming: a handoff.NewStreamingSender made
//     before the first chunk sends each block the chunks completed, the
//     commit only after the last chunk; a push that fails first stops the
//     prompt at the next step boundary, and the pages go back and the
//     router is answered only once the prompt ended); the others push
//     after the whole prompt (HandoffAfterPrefill), as do the peers that
//     send a short transfer. A call is checked before it queues by the
//     engine's own checks (engine.CheckPrefill: model fingerprints, the
//     reservation, the decode prefix claim, context, sampler offset and
//     settings); the simulated router is honest, so a refusal there is a
//     violation (a check that refuses honest work). A call the router gives up while
//     it is queued leaves the queue at once, its handoff aborted.
//     The batch's step code itself is the engine's, and its runtime is
//     watched (nest.go): every nested step must run inside a paused step,
//     never pause itself, carry no sequence of the paused step, run only a
//     prompt's first chunk, and cost, with the other nested steps of its
//     paused step, at most the step itself (a pass's fixed cost F, a
//     quarter chunk, plus tokens, within F plus the step's tokens).
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
// still in flight (restart-same-file). A prefill cache lookup made under
// another tenant (wrong_tenant_lookup: an index or lookup bug, as if the
// tenant came from the wrong request) hands a sequence shares of another
// tenant's cached pages, so the pool's read-time tenant check is the only
// layer between them and the read: the pool refuses them (the request
// fails, the page is quarantined). This fault draws from its own random
// stream, so it left every other choice of a seed as it was.
//
// Death, hangs and migration (issue 27), on a stream of their own too: in
// most runs the router's connections carry heartbeats (--peer-timeout,
// 2-12 ms of virtual time). A crashed decode worker is then noticed at
// once (its connection resets), a stopped one (hang_decode, SIGSTOP: it
// neither receives nor sends, its state stays) after the timeout of
// silence. Every request whose handoff was on it fails by transport, and
// one that already streamed tokens migrates instead (migrate), as
// engine.Disaggregated does: its handoff aborted, its stream closed, then
// resumed exactly as a preempted request (a new handoff of the prompt and
// the tokens sent, the sampler at the same offset), paired avoiding the
// dead worker, at most --max-migrations (1-3) times; so does a resumed
// request whose new handoff had not committed yet (the hang is often armed
// to strike just then, while a preempted request rebuilds its KV). A decode slot has one
// worker at a time, so the "other worker" is the replacement the
// supervisor starts a few ms after the death; a migrated request waits at
// the head of the queue until it is up. The stopped worker is continued
// (SIGCONT) after its replacement started and runs on unused: its
// sequences decode to their end, their stream items reach the router and
// must be dropped (the stream moved), and its pool must drain like any
// other. A stopped prefill worker (hang_prefill, mostly with a one-sided
// copy under way) is declared dead the same way: its calls fail by
// transport, its handoffs are aborted (decode quarantines their pages),
// and its stalled copy completes only when it is continued, after its
// replacement started and possibly past the lease: the writer the shared
// file's generation word fences. Runs without heartbeats keep the old
// behaviour: a dead worker's streams end at their deadline.
//
// The page-lifetime paths of queueing and preemption: tight decode pools
// (pressure runs: honest peers, one request's worth of pages, arrivals at
// once) where growth runs the pool dry and decode preempts; tight queue
// bounds, running limits and queue timeouts (429-like queue_full, 503-like
// queue_timeout); clients leaving while queued; a disconnect or router
// abort striking a preempted request while it is queued to resume, while
// its new Reserve is in flight, while its KV is rebuilt (the prefill of
// prompt + generated), or right after its new commit; every other fault
// also hits resumed handoffs (a resume whose new handoff fails). Requests
// sample greedily, seeded, or seeded with penalties, so a resume must
// continue the random stream and the penalty counts exactly.
//
// # What every run checks
//
// Each request ends with exactly its reference output (the same prompt in
// a private pool with no transfer, one sampler drawing every token in
// turn, computed once per prompt, page size and sampling) or an error; tokens streamed before an error or a
// cancel are a prefix of the reference; no request reports success over KV
// that differs from the reference's (compared page by page, every written
// slot, when decode releases the pages of a handoff whose commit it
// accepted: the "undetected integrity violation" leak; an uncommitted
// reservation's pages hold whatever a peer wrote and nobody reads them); usage is what was verified
// (I9); a rejected request never holds a reservation (I1); a request whose
// client left while it was queued never gets a decode page; a page granted
// again never carries its previous holder's generation (so a preempted
// sequence's old page references cannot reach its successor's KV); every
// prefix-cache hit, prefill's or decode's, and every cached page a prefill
// reads, is a page computed for the reader's own tenant (I11, checked
// against the simulator's own record of who computed or received each
// page); no chain key either role's cache is looked up or filled with
// equals a key computed for another tenant (I11 at the key layer: a
// collision means a missing salt, even where the tenant-keyed index still
// keeps the entries apart); the prefill batch's nested steps keep the
// pause points' contract (above); in a run without misbehaving peers, no
// honest prefill's handoff is refused for its counts or coverage (a
// liveness check: a block streamed before its chunks filled it fails
// there); after the drain every pool is entirely free, no handoff is live,
// the decode batch holds no sequence and the admission core none. A
// preempted request's output must equal its reference: the same oracle as
// every other request. The default run also
// asserts that one-sided writes of a crashed decode incarnation landed (in
// its old file) and that foreign one-sided writes reached the writer's
// fence, so both hazards are exercised, that some prefill step yielded to
// a prompt that arrived during it (885 nested steps in 523 of the default
// 1000 seeds today) and that streaming handoffs sent pages while their
// prompt computed, and that decode workers were
// declared dead, streams migrated, migrated requests ended exact and a
// continued worker's stale items were dropped. goleak checks that no
// goroutine outlives the tests.
//
// # Running
//
//	go test ./internal/sim/                       # 1000 seeds + injected bugs, ~45 s of CPU, about a minute on 2 shared cores
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
//	seed 6 broke an invariant; replay: SLUICE_SIM_SEED=6 go test -count=1 -run 'TestSim/seed' -v ./internal/sim/
//	  req6(7861d9) reported success with output [265 379 282 419 506 51 279 380 504 374 272 428 504], reference [265 379 282 419 506 51 279 380 504 374 331 259 285] (undetected integrity violation)
//	  setup: pressure true, page 8, decode 4 pages, prefill 12 pages, context 32, one-sided false, ...
//	trace tail:
//	   191.673ms  -> decode#0->router stream d8a25c #6 (duplicate)
//	   ...
//
// (the engine's decode sampler broken on purpose: a resumed stream that
// does not skip the draws of its earlier tokens).
//
// Trace lines are the virtual time, then "-> what" for a delivered message
// (LOST, TIMEOUT and "(duplicate)" mark faults), END lines with each
// request's terminal reason and output, admissions with their queue wait,
// PREEMPTED lines, prefix-cache hits, and oracle lines where the simulator
// saw KV differ from the reference.
//
// # Bug injection
//
// Bugs switches safeguards off (the handoff.Safeguards and kv.Unsafe test
// hooks, reaching the driven decode worker through engine.Driven, never a
// serving path; three I6 hooks of this package: release before drain, an
// early drain acknowledgement, a lease shorter than the in-flight time; and
// the router's and prefill wrapper's: a request cancelled while queued left
// in the admission core, a resume without the sampler offset, the cache
// salt without the tenant; and migration's: a migration paired with the
// worker it left, a migration's prefill one sampler draw short, a dead
// prefill worker's handoffs taken as drained when its heartbeat stops).
// TestInjectedBugs asserts that each safeguard no
// other layer backs up is found within a bounded number of seeds, and that
// each backed-up layer alone finds nothing. The prefix cache's tenant
// layers are each found alone (first seed today; bound):
//
//	cache-no-salt          no tenant in the salt, both roles          the key invariant            4; 50
//	cache-no-tenant-check  no read-time tenant check of a cached      wrong_tenant_lookup, then    5; 50
//	                       page (kv.Unsafe.NoCacheTenantCheck)        the tenant of every read
//	cache-tenant-blind     salt, index and read check at once         a cross-tenant hit, read     4; 50
//	                       (engine.Unsafe.TenantBlindCache)
//
// Death, hangs and migration (first seed today; bound):
//
//	migrate-no-exclude     migration paired again with the worker      the pairing itself           2; 50
//	                       declared dead (no avoid)
//	migrate-wrong-offset   a migration's prefill samples one draw      the output differs from      2; 50
//	                       short of the tokens sent                    the reference
//	heartbeat-release      a prefill worker declared dead taken as     a stopped writer's copy in   90; 600
//	                       drained: pages freed without the lease      a re-used page (gen word off)
//	                       (with the generation word on: holds, 500 seeds)
//	restart-same-file      a replacement decode maps the dead one's    a continued worker's writes  10; 250
//	                       file in place                               in the replacement's pages
//
// restart-same-file was a backed-up layer before hangs existed: against a
// crashed incarnation's posted writes the commit digest, re-read from
// memory, catches them; against a stopped incarnation continued after its
// replacement started, nothing but the new file does.
package sim
