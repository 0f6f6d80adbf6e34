package sim

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"sluice/internal/gguf"
	"sluice/internal/handoff"
	"sluice/internal/handoff/shm"
	"sluice/internal/kv"
	"sluice/internal/model"
	"sluice/internal/sample"
	"sluice/internal/synth"
)

const (
	msec            = time.Millisecond
	netBase         = 50 * time.Microsecond
	rpcTimeout      = 30 * msec
	prefillTimeout  = 400 * msec
	lease           = 50 * msec // > maxInFlight: the one-sided transport's bound (I6)
	maxInFlight     = 25 * msec
	handoffTimeout  = 250 * msec
	requestDeadline = 500 * msec
	tombstone       = 60 * msec
	tickEvery       = 2 * msec
	tokenCost       = 20 * time.Microsecond
	decodeStep      = 8 * time.Millisecond
	chunkMax        = 8
	maxGen          = 8
	drainTime       = handoffTimeout + 4*lease
	runLimit        = 10 * time.Second
)

func timeDur(n int) time.Duration { return time.Duration(n) }

// Bugs disables safeguards for bug injection. The zero value is the real
// system, every safeguard on.
type Bugs struct {
	// Receiver switches the handoff Receiver's checks off (I5, I3 at the protocol layer).
	Receiver handoff.Safeguards
	// KV switches the pool's data-path checks off (I3 owner/generation, I4 extent).
	KV kv.Unsafe
	// NoScrub leaves released pages unscrubbed (I7).
	NoScrub bool
	// NoQuarantine: the decode side of a one-sided transport releases an
	// ended handoff's pages at once instead of quarantining them until the
	// drain acknowledgement or the lease (release before drain, I6).
	NoQuarantine bool
	// ShortLease: the quarantine lease is shorter than the one-sided
	// transport's worst in-flight time (I6).
	ShortLease bool
	// EarlyDrain: the prefill side acknowledges its drain while its
	// one-sided writes are still in flight (I6).
	EarlyDrain bool
	// ForeignPlacement switches the one-sided writer's reservation fence
	// off (shm.Writer.NoFence): a misbehaving prefill peer's write naming
	// a page reserved for another handoff is placed in decode memory,
	// where nothing on the decode side can stop bytes already there.
	ForeignPlacement bool
	// RestartSameFile makes a restarted decode worker map the crashed
	// one's shared pool file in place (kv.Unsafe.ReuseSharedFile) instead
	// of a new file, so one-sided writes posted to the old incarnation
	// land in the new one's pages (its quarantine state died with it).
	// Every run restarts on the same path; the new file is the safeguard.
	RestartSameFile bool
	// NoGenFence switches off the one-sided writer's check of the shared
	// file's per-page generation word before each copy (shm.Writer.
	// NoGenFence): a posted write then lands whatever the decode side did
	// to the page meanwhile. With the word on, the I6 bugs above leak
	// nothing (holdsAlone), so they are injected with it off.
	NoGenFence bool
}

// Config is one run.
type Config struct {
	Seed uint64
	Bugs Bugs
	// Trace keeps the event trace (always kept when a run fails).
	Trace bool
}

// Result is what one run found.
type Result struct {
	Seed       uint64
	Violations []string
	Trace      []string
	Faults     [numFaults]int
	// Outcomes of the run's requests.
	OK, Failed, Cancelled, Rejected int
	Events                          int
	Setup                           string
	// Ends counts the requests' terminal reasons.
	Ends map[string]int
	// Phases counts, per injected disconnect or abort, the request state
	// it struck in ("disconnect/transferring": 3).
	Phases map[string]int
	// LateLandings counts one-sided writes that landed after their
	// handoff ended.
	LateLandings int
	// OldIncarnationLandings counts one-sided writes posted to a decode
	// incarnation that crashed before they landed: with every incarnation
	// on the same path, they land in the crashed one's file, never in its
	// successor's pool (I6 across restarts).
	OldIncarnationLandings int
	// Fenced counts one-sided write batches the writer refused before
	// placing a byte (a write outside its reservation, I3).
	Fenced int
}

// Failed reports whether the run broke an invariant.
func (r *Result) Bad() bool { return len(r.Violations) > 0 }

// Env is what runs share: the model, the prompts and their reference
// outputs. It is safe for concurrent Runs.
type Env struct {
	model   *model.Model
	prompts [][]int32
	dir     string

	mu   sync.Mutex
	refs map[[2]int]*reference
}

// NewEnv loads the built-in default model (synth.Default, tiny random
// weights: cheap and batch-invariant) and writes one-sided pool files in a
// new directory under dir (Close removes it).
func NewEnv(dir string) (*Env, error) {
	b, err := synth.Default()
	if err != nil {
		return nil, err
	}
	f, err := gguf.Parse(b)
	if err != nil {
		return nil, err
	}
	m, err := model.Load(f)
	if err != nil {
		return nil, err
	}
	// A directory of its own: two processes simulating the same seed must
	// not share a one-sided pool file.
	own, err := os.MkdirTemp(dir, "sluice-sim-")
	if err != nil {
		return nil, err
	}
	e := &Env{model: m, dir: own, refs: map[[2]int]*reference{}}
	vocab := m.Config().Vocab
	x := uint64(0x243f6a8885a308d3)
	for _, n := range []int{1, 2, 3, 5, 7, 8, 11, 16, 19, 24, 31, 40, 52} {
		p := make([]int32, n)
		for i := range p {
			x = x*6364136223846793005 + 1442695040888963407
			p[i] = int32((x >> 33) % uint64(vocab))
		}
		e.prompts = append(e.prompts, p)
	}
	return e, nil
}

// Close removes the Env's directory of one-sided pool files.
func (e *Env) Close() error { return os.RemoveAll(e.dir) }

// reference is the greedy continuation of a prompt with no transfer and
// no faults, and the KV page images it produced: the oracle.
type reference struct {
	tokens []int32
	pages  [][]byte
	geo    kv.Geometry
}

// ref computes (once) the reference of prompt pi at page size ps: one
// prefill of the whole prompt, then one token at a time, in a private pool.
func (e *Env) ref(pi, ps int) *reference {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r := e.refs[[2]int{pi, ps}]; r != nil {
		return r
	}
	p := e.prompts[pi]
	c := e.model.Config()
	geo := kv.Geometry{Layers: c.Layers, KVDim: c.KVDim(), PageSize: ps}
	pages := kv.PagesFor(len(p)+maxGen, ps)
	pool, err := kv.New(kv.Config{Geometry: geo, Pages: pages})
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	o := kv.Owner{Tenant: "ref"}
	table, err := pool.Reserve(o, pages)
	if err != nil {
		panic(err)
	}
	run := e.model.NewRunner(nil)
	view := pool.View(o, table)
	res := run.Forward([]model.Seq{{Tokens: p, Pos: 0, KV: view}})
	if res[0].Err != nil {
		panic(res[0].Err)
	}
	r := &reference{geo: geo}
	tok := sample.Greedy(res[0].Logits)
	r.tokens = append(r.tokens, tok)
	for pos := len(p); len(r.tokens) < maxGen; pos++ {
		res = run.Forward([]model.Seq{{Tokens: []int32{tok}, Pos: pos, KV: view}})
		if res[0].Err != nil {
			panic(res[0].Err)
		}
		tok = sample.Greedy(res[0].Logits)
		r.tokens = append(r.tokens, tok)
	}
	for _, ref := range table {
		d, _, err := pool.PageData(o, ref)
		if err != nil {
			panic(err)
		}
		r.pages = append(r.pages, append([]byte(nil), d...))
	}
	e.refs[[2]int{pi, ps}] = r
	return r
}

// sameKV compares the first n positions of KV in two pages: only written
// slots carry data.
func sameKV(geo kv.Geometry, got, want []byte, n int) bool {
	run := n * geo.KVDim * geo.Type.ElemBytes()
	stride := geo.PageSize * geo.KVDim * geo.Type.ElemBytes()
	for half := range 2 * geo.Layers {
		off := half * stride
		if string(got[off:off+run]) != string(want[off:off+run]) {
			return false
		}
	}
	return true
}

// world is one run.
type world struct {
	*sched
	env    *Env
	cfg    Config
	seed   uint64
	pl     plan
	res    *Result
	router *router
	pre    *prefill
	dec    *decode
	decs   []*decode
	pres   []*prefill
	// wr is the prefill side's one-sided writer (shm transport runs).
	wr *shm.Writer

	geo                kv.Geometry
	decPages, prePages int
	ctx                int
	scrub              kv.ScrubMode
	recvLease          time.Duration
	batchBytes, window int
	handoffTimeout     time.Duration
	prefillTimeout     time.Duration
	doneAt             time.Duration
}

func (w *world) count(f Fault) { w.res.Faults[f]++ }

func (w *world) violate(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	w.res.Violations = append(w.res.Violations, msg)
	w.logf("VIOLATION: %s", msg)
}

func short(id kv.ID) string { return fmt.Sprintf("%x", id[:3]) }

// send delivers fn after a network delay, subject to the run's faults: a
// message may be lost, delayed past later ones, or delivered twice. alive
// is checked at delivery: mail for a crashed node is lost.
func (w *world) send(what string, alive func() bool, fn func()) { w.sendAfter(0, what, alive, fn) }

func (w *world) sendAfter(extra time.Duration, what string, alive func() bool, fn func()) {
	if w.chance(w.pl.p[FaultLoss]) {
		w.count(FaultLoss)
		w.logf("LOST %s", what)
		return
	}
	d := netBase + extra
	if w.chance(w.pl.p[FaultDelay]) {
		w.count(FaultDelay)
		d += w.between(0, w.pl.jitter)
	}
	deliver := func(tag string) func() {
		return func() {
			if !alive() {
				w.logf("dropped %s%s (peer down)", what, tag)
				return
			}
			w.logf("-> %s%s", what, tag)
			fn()
		}
	}
	w.after(d, what, deliver(""))
	if w.chance(w.pl.p[FaultDup]) {
		w.count(FaultDup)
		w.after(d+w.between(0, 2*msec), what, deliver(" (duplicate)"))
	}
}

// rpc is a request/response call. handle runs once at the callee (calls
// are deduplicated there, as a connection would) and returns the reply to
// run at the caller, or nil when the callee answers later by other means.
// A call with no reply within timeout fails with an unknown outcome.
//
// The returned claim is for answers that come by other means: it reports
// whether the call was still open, and closes it.
func (w *world) rpc(what string, callerAlive, calleeAlive func() bool, timeout time.Duration, handle func() func(), onTimeout func()) (claim func() bool) {
	return w.rpcAfter(0, what, callerAlive, calleeAlive, timeout, handle, onTimeout)
}

func (w *world) rpcAfter(extra time.Duration, what string, callerAlive, calleeAlive func() bool, timeout time.Duration, handle func() func(), onTimeout func()) (claim func() bool) {
	done, handled := false, false
	w.sendAfter(extra, what, calleeAlive, func() {
		if handled {
			return
		}
		handled = true
		reply := handle()
		if reply == nil {
			return
		}
		w.send(what+" reply", callerAlive, func() {
			if done {
				return
			}
			done = true
			reply()
		})
	})
	w.after(timeout, what+" timeout", func() {
		if done || !callerAlive() {
			return
		}
		done = true
		w.logf("TIMEOUT %s", what)
		onTimeout()
	})
	return func() bool {
		open := !done
		done = true
		return open
	}
}

// Run runs one seed.
func Run(env *Env, cfg Config) *Result {
	w := &world{sched: newSched(cfg.Seed), env: env, cfg: cfg, seed: cfg.Seed,
		res: &Result{Seed: cfg.Seed, Ends: map[string]int{}, Phases: map[string]int{}}}
	w.pl = newPlan(w.sched)
	mc := env.model.Config()
	ps := []int{2, 4, 8}[w.pick(3)]
	w.geo = kv.Geometry{Layers: mc.Layers, KVDim: mc.KVDim(), PageSize: ps}
	target := 24 + w.pick(40)
	// From one request's worth (exhausted by any burst) to several.
	w.decPages = kv.PagesFor(target, ps) * (1 + w.pick(5))
	w.prePages = kv.PagesFor(target, ps) * (1 + w.pick(3))
	// I2: the context the router admits against is what every pool can hold.
	w.ctx = min(mc.Context, w.decPages*ps, w.prePages*ps)
	w.scrub = []kv.ScrubMode{kv.ScrubZero, kv.ScrubPoison}[w.pick(2)]
	if cfg.Bugs.NoScrub {
		w.scrub = kv.ScrubOff
	}
	w.recvLease = lease
	if cfg.Bugs.ShortLease {
		w.recvLease = maxInFlight / 25
	}
	// Some runs give a handoff little time to reach decoding: decode then
	// declares slow transfers failed while their writes are in flight.
	w.handoffTimeout = handoffTimeout
	if w.chance(0.3) {
		w.handoffTimeout = w.between(4*msec, 25*msec)
	}
	// And some routers give a prefill little time: the router then declares
	// the transfer failed while its writes are in flight.
	w.prefillTimeout = prefillTimeout
	if w.chance(0.3) {
		w.prefillTimeout = w.between(6*msec, 30*msec)
	}
	w.batchBytes = w.geo.PageBytes() * (1 + w.pick(3))
	w.window = 1 + w.pick(3)
	w.res.Setup = fmt.Sprintf("page %d, decode %d pages, prefill %d pages, context %d, one-sided %v, scrub %v, batch %d pages, window %d, handoff timeout %v, prefill timeout %v",
		ps, w.decPages, w.prePages, w.ctx, w.pl.oneSided, w.scrub, w.batchBytes/w.geo.PageBytes(), w.window, w.handoffTimeout, w.prefillTimeout)
	w.logf("seed %d: %s", cfg.Seed, w.res.Setup)
	var ps2 []string
	for f := Fault(0); f < numFaults; f++ {
		if w.pl.p[f] > 0 {
			ps2 = append(ps2, fmt.Sprintf("%s=%.2f", f, w.pl.p[f]))
		}
	}
	w.logf("fault mix: %v", ps2)

	var err error
	if w.dec, err = w.newDecode(0); err != nil {
		w.violate("setup: %v", err)
		return w.res
	}
	w.decs = append(w.decs, w.dec)
	if w.pre, err = w.newPrefill(0); err != nil {
		w.violate("setup: %v", err)
		return w.res
	}
	w.pres = append(w.pres, w.pre)
	defer func() {
		for _, d := range w.decs {
			d.close()
		}
		if w.wr != nil {
			w.wr.Close()
			os.Remove(w.sharedFile())
		}
		for _, p := range w.pres {
			p.pool.Close()
		}
	}()

	w.router = &router{w: w, byID: map[kv.ID]*rreq{}}
	n := 6 + w.pick(11)
	window := w.between(2*msec, 30*msec)
	burst := w.chance(w.pl.p[FaultBurst])
	if burst {
		w.count(FaultBurst)
	}
	for range n {
		q := w.router.newReq(w.pick(len(env.prompts)), 1+w.pick(maxGen), fmt.Sprintf("tenant%d", w.pick(3)))
		at := w.between(0, window)
		if burst {
			at = w.between(0, 100*time.Microsecond)
		}
		w.after(at, "arrival", func() { w.router.submit(q) })
	}
	w.crashes()
	w.after(tickEvery, "tick", w.tick)
	w.run(runLimit)
	w.check()
	w.res.Events = w.events
	if cfg.Trace || w.res.Bad() {
		w.res.Trace = w.trace
	}
	return w.res
}

// crashes schedules the run's worker crashes and restarts.
func (w *world) crashes() {
	if w.pl.p[FaultCrashPrefill] > 0 {
		w.after(w.between(0, 40*msec), "crash prefill", func() {
			w.count(FaultCrashPrefill)
			old := w.pre
			old.crash()
			w.after(w.between(msec, 20*msec), "restart prefill", func() {
				p, err := w.newPrefill(old.gen + 1)
				if err != nil {
					w.violate("restart prefill: %v", err)
					return
				}
				w.pre = p
				w.pres = append(w.pres, p)
				w.logf("prefill#%d up", p.gen)
			})
		})
	}
	if w.pl.p[FaultCrashDecode] > 0 {
		w.after(w.between(0, 40*msec), "crash decode", func() {
			w.count(FaultCrashDecode)
			old := w.dec
			old.crash()
			w.after(w.between(msec, 20*msec), "restart decode", func() {
				d, err := w.newDecode(old.gen + 1)
				if err != nil {
					w.violate("restart decode: %v", err)
					return
				}
				w.dec = d
				w.decs = append(w.decs, d)
				w.logf("decode#%d up", d.gen)
			})
		})
	}
}

// tick drives the decode worker's clock until every request has ended and
// the drain time (leases, reservation timeouts) has passed.
func (w *world) tick() {
	w.dec.tick()
	if w.doneAt == 0 {
		all := true
		for _, q := range w.router.reqs {
			if !q.finished {
				all = false
				break
			}
		}
		if all {
			w.doneAt = w.now
			w.logf("all requests ended; draining")
		}
	}
	if w.doneAt == 0 || w.now < w.doneAt+drainTime {
		w.after(tickEvery, "tick", w.tick)
	}
}

// oracleAccepted checks, outside the system, that what decode accepted is
// the reference prompt KV. A mismatch is only a violation if the request
// then reports success (checked at the end).
func (w *world) oracleAccepted(d *decode, acc *handoff.Accepted) {
	q := w.router.byID[acc.Handoff]
	if q == nil {
		w.violate("decode accepted a handoff nobody reserved: %s", short(acc.Handoff))
		return
	}
	if acc.Tokens != len(q.toks) {
		q.kvBad = fmt.Sprintf("accepted %d prompt tokens, prompt has %d (I9)", acc.Tokens, len(q.toks))
		return
	}
	w.compareKV(d, q, acc.Owner, acc.Pages, acc.Tokens, "accepted")
}

// oracleFinished checks every position a decode sequence fed, just before
// its pages are released: a late write landing mid-decode shows here.
func (w *world) oracleFinished(d *decode, s *dseq) {
	q := w.router.byID[s.h.id]
	if q == nil || q.kvBad != "" {
		return
	}
	w.compareKV(d, q, s.owner, s.table, s.fed, "decoded")
}

func (w *world) compareKV(d *decode, q *rreq, o kv.Owner, table []kv.PageRef, tokens int, when string) {
	ref := w.env.ref(q.prompt, w.geo.PageSize)
	ps := w.geo.PageSize
	for b := 0; b*ps < tokens; b++ {
		data, _, err := d.pool.PageData(o, table[b])
		if err != nil {
			// The pool refused (the system noticed something); not silent.
			return
		}
		if !sameKV(w.geo, data, ref.pages[b], min(ps, tokens-b*ps)) {
			q.kvBad = fmt.Sprintf("%s KV block %d (page %d) differs from the reference", when, b, table[b].Page)
			w.logf("oracle: %v %s", q, q.kvBad)
			return
		}
	}
}

// check is the end-of-run verdict.
func (w *world) check() {
	for _, q := range w.router.reqs {
		ref := w.env.ref(q.prompt, w.geo.PageSize).tokens
		w.res.Ends[string(q.end)]++
		switch {
		case !q.finished:
			w.violate("%v never ended (state %v)", q, q.m.State())
			continue
		case q.end == "finished_length":
			w.res.OK++
			if !slices.Equal(q.out, ref[:q.max]) {
				w.violate("%v reported success with output %v, reference %v (undetected integrity violation)", q, q.out, ref[:q.max])
			}
			if q.kvBad != "" {
				w.violate("%v reported success over wrong KV: %s (undetected integrity violation)", q, q.kvBad)
			}
			if q.usage != [2]int{len(q.toks), q.max} {
				w.violate("%v usage %v, want [%d %d] (I9)", q, q.usage, len(q.toks), q.max)
			}
			continue
		case q.end == "cancelled":
			w.res.Cancelled++
		case q.end.Rejected():
			w.res.Rejected++
			if q.res != nil {
				w.violate("%v was rejected but holds a reservation (I1)", q)
			}
		default:
			w.res.Failed++
		}
		if len(q.out) > len(ref) || !slices.Equal(q.out, ref[:len(q.out)]) {
			w.violate("%v streamed %v before ending %s; reference %v", q, q.out, q.end, ref)
		}
	}
	// After the drain nothing may hold a page: not a leak, not a
	// quarantine, not a forgotten reservation.
	if w.dec.up {
		w.dec.recv.Tick(w.clock())
		if err := w.dec.pool.CheckDrained(); err != nil {
			w.violate("decode#%d pool after drain: %v", w.dec.gen, err)
		}
		if s := w.dec.recv.Stats(); s.Live != 0 {
			w.violate("decode#%d receiver still has %d live handoffs", w.dec.gen, s.Live)
		}
		if len(w.dec.active) != 0 || len(w.dec.order) != 0 {
			w.violate("decode#%d still has %d sequences and %d handoffs", w.dec.gen, len(w.dec.active), len(w.dec.order))
		}
	}
	if w.pre.up {
		if err := w.pre.pool.CheckDrained(); err != nil {
			w.violate("prefill#%d pool after drain: %v", w.pre.gen, err)
		}
		if len(w.pre.jobs) != 0 {
			w.violate("prefill#%d still has %d jobs", w.pre.gen, len(w.pre.jobs))
		}
	}
}
