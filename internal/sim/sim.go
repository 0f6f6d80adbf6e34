package sim

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"sluice/internal/engine"
	"sluice/internal/gguf"
	"sluice/internal/grammar"
	"sluice/internal/handoff"
	"sluice/internal/handoff/shm"
	"sluice/internal/kv"
	"sluice/internal/model"
	"sluice/internal/request"
	"sluice/internal/sample"
	admission "sluice/internal/sched"
	"sluice/internal/synth"
	"sluice/internal/tokenizer"
)

const (
	msec            = time.Millisecond
	netBase         = 50 * time.Microsecond
	rpcTimeout      = 30 * msec
	prefillTimeout  = 400 * msec
	lease           = 50 * msec // > maxInFlight: the one-sided transport's bound (I6)
	maxInFlight     = 25 * msec
	handoffTimeout  = 250 * msec
	requestDeadline = 800 * msec
	tombstone       = 60 * msec
	tickEvery       = 2 * msec
	tokenCost       = 20 * time.Microsecond
	decodeStep      = 8 * time.Millisecond
	chunkMax        = 8
	maxGen          = 16
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
	// CancelQueuedReserves: the router does not take a request its client
	// left while it waited in the queue out of the admission core, and
	// reserves for it when its turn comes (the cancelled-while-queued
	// request that still reserves).
	CancelQueuedReserves bool
	// CacheNoSalt keys the prefill's prefix cache with one salt for every
	// tenant (the tenant left out of kv.TenantSalt). With Bugs.KV.
	// CacheIgnoresTenant too (the index and the read check ignore the
	// tenant), it is engine.Unsafe.TenantBlindCache: the shared cache.
	CacheNoSalt bool
	// ResumeNoOffset: a resumed request's new handoff carries neither the
	// tokens generated before (decode's sampler does not continue after
	// them) nor the prefill sampler offset.
	ResumeNoOffset bool
	// MigrateNoExclude: a migrated request is paired again without
	// avoiding the decode worker whose death or hang cut its stream
	// (engine.Disaggregated's Pair(r, avoid) with avoid left out).
	MigrateNoExclude bool
	// HeartbeatRelease: when the heartbeat declares a prefill worker dead,
	// the router tells decode the dead writer's handoffs are drained, so
	// their quarantined pages are freed at once instead of after the
	// lease (releasing on heartbeat loss: a stopped writer is not a
	// drained one).
	HeartbeatRelease bool
	// MigrateWrongOffset: a migrated request's new handoff gives prefill
	// a sampler offset one short of the tokens already sent (the prompt
	// is right; the random stream restarts one draw early).
	MigrateWrongOffset bool
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
	// Preemptions counts streams decode ended "preempted"; Growths the
	// page-by-page extensions of decode tables; NoRoom the reservations
	// decode answered "not now" (the request waited again).
	Preemptions, Growths, NoRoom int
	// PrefillWaits counts Prefill calls that waited for prefill pages.
	PrefillWaits int
	// ResumedOK and ResumedFailed count requests preempted at least once
	// that then ended exact, or failed.
	ResumedOK, ResumedFailed int
	// ConstrainedOK counts successful constrained (response_format)
	// requests, exact like every success; ConstrainedMovedOK those of
	// them preempted or migrated at least once (grammar state replayed).
	ConstrainedOK, ConstrainedMovedOK int
	// QueueWaits are the admission core's waits, one per admission
	// (first admissions and resumes).
	QueueWaits []time.Duration
	// QueueRejects counts the core's refusals by reason; EndedQueued the
	// requests that ended while waiting in the queue.
	QueueRejects map[string]int
	EndedQueued  int
	// ColoPreempted counts the colocated batch's preemptions by the phase
	// they struck the victim in: "prompt", "decode", "rebuild".
	ColoPreempted map[string]int
	// CacheHits counts prompt pages prefill took from the prefix cache;
	// CacheEvictions idle cache entries the prefill pools evicted.
	CacheHits, CacheEvictions int
	// DecodeCacheHits counts prompt pages decode's own prefix cache held
	// at a Reserve (prefill skipped sending them).
	DecodeCacheHits int
	// DeclaredDead counts decode incarnations the router declared dead
	// (a reset connection, or heartbeat silence); Migrations the streams
	// that moved after it; MigratedOK and MigratedFailed the requests
	// migrated at least once that then ended exact, or failed.
	// StaleItems counts stream items of a migrated handoff that reached
	// the router afterwards (from a stopped worker continued) and were
	// dropped.
	DeclaredDead, Migrations, MigratedOK, MigratedFailed, StaleItems int
	// MigratedBeforeCommit counts migrations of resumed requests whose
	// new handoff had not committed when its decode worker died.
	MigratedBeforeCommit int
	// NestedSteps counts the prefill batch's nested steps: prompts that
	// arrived during another tenant's step and ran their first chunk at
	// one of its pause points (engine/yield.go).
	NestedSteps int
	// StreamedPages counts the pages of committed streaming handoffs sent
	// while their prompt was still computing.
	StreamedPages int
	HonestFails   map[string]int
}

// Failed reports whether the run broke an invariant.
func (r *Result) Bad() bool { return len(r.Violations) > 0 }

// Env is what runs share: the model, the prompts and their reference
// outputs. It is safe for concurrent Runs.
type Env struct {
	model   *model.Model
	rt      *engine.ModelRuntime
	prompts [][]int32
	dir     string

	mu   sync.Mutex
	refs map[[3]int]*reference
	// grammars compiles constrained samplings' schemas (sampler).
	grammars *grammar.Cache
}

// samplings are the requests' sampling settings: greedy, seeded, and
// seeded with penalties (the prompt and every generated token count). A
// resumed request's sampler must continue its random stream and its
// penalty counts exactly where the preempted one stopped.
var samplings = []sample.Params{
	{},
	{Temperature: 0.9, Seed: 11},
	{Temperature: 0.7, TopK: 20, Seed: 12, FrequencyPenalty: 0.5, RepetitionPenalty: 1.1},
	// Constrained (response_format): the grammar's state crosses the
	// handoff, preemption and migration by replay (I14). A string of at
	// least 400 characters cannot end within maxGen tokens, so the
	// request runs to its max_tokens as the others do.
	{Temperature: 1, Seed: 13, Format: sample.Format{Kind: sample.FormatJSONSchema, Schema: `{"type":"string","minLength":400}`}},
}

// sampler is a sampler for p as the engine's workers build one: a
// constrained one follows p's grammar over the built-in vocabulary.
func (e *Env) sampler(p sample.Params) *sample.Sampler {
	s := sample.New(p)
	if p.Format.Constrained() {
		c, _, err := e.grammars.Get(context.Background(), "sim", p.Format.Kind == sample.FormatJSONObject, p.Format.Schema)
		if err != nil {
			panic(err)
		}
		if p.Format.Think {
			s.ConstrainThinking(c.NewMatcher(), grammar.NewThink(p.Format.ThinkOpen, p.Format.ThinkClose, nil, c.Vocab().Space))
		} else {
			s.Constrain(c.NewMatcher())
		}
	}
	return s
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
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		return nil, err
	}
	rt := engine.NewModelRuntime("sim", m, nil).WithVocab(tok)
	e := &Env{model: m, rt: rt, dir: own, refs: map[[3]int]*reference{}, grammars: grammar.NewCache(rt.GrammarVocab(), 0)}
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

// ref computes (once) the reference of prompt pi at page size ps with
// sampling si: one prefill of the whole prompt, then one token at a time,
// in a private pool, one sampler drawing every token in turn.
func (e *Env) ref(pi, ps, si int) *reference {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r := e.refs[[3]int{pi, ps, si}]; r != nil {
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
	smp := e.sampler(samplings[si])
	smp.SetPrompt(p)
	draw := func(logits []float32) int32 {
		t, err := smp.Sample(logits)
		if err != nil {
			panic(err)
		}
		return t
	}
	tok := draw(res[0].Logits)
	r.tokens = append(r.tokens, tok)
	for pos := len(p); len(r.tokens) < maxGen; pos++ {
		res = run.Forward([]model.Seq{{Tokens: []int32{tok}, Pos: pos, KV: view}})
		if res[0].Err != nil {
			panic(res[0].Err)
		}
		tok = draw(res[0].Logits)
		r.tokens = append(r.tokens, tok)
	}
	for _, ref := range table {
		d, _, err := pool.PageData(o, ref)
		if err != nil {
			panic(err)
		}
		r.pages = append(r.pages, append([]byte(nil), d...))
	}
	e.refs[[3]int{pi, ps, si}] = r
	return r
}

// sameKV compares the first n positions of KV in two pages: only written
// slots carry data.
func sameKV(geo kv.Geometry, got, want []byte, n int) bool {
	run := n * geo.RowBytes()
	stride := geo.PageSize * geo.RowBytes()
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
	colo   *colo // nil: no colocated engine in this run
	pre    *prefill
	dec    *decode
	decs   []*decode
	pres   []*prefill
	// wr is the prefill side's one-sided writer (shm transport runs).
	wr *shm.Writer

	geo                kv.Geometry
	decPages, prePages int
	// streaming: prefill pushes as the engine's prefill worker does by
	// default (pages sent as the prompt's chunks complete, the commit
	// after the last); else after the whole prompt (HandoffAfterPrefill).
	streaming          bool
	ctx                int
	scrub              kv.ScrubMode
	recvLease          time.Duration
	batchBytes, window int
	handoffTimeout     time.Duration
	queueTimeout       time.Duration // also bounds a prefill's wait for pages
	// The prefill's prefix cache: on for most runs; the deployment secret
	// that keys the tenant salts and the model's name in the keys.
	cacheOn, dcacheOn    bool
	cacheSecret, cacheFP []byte
	// keyTenant is, for every chain key either role's cache was consulted
	// or filled with, the tenant it was computed for (checkKeys).
	keyTenant      map[kv.BlockKey]string
	prefillTimeout time.Duration
	doneAt         time.Duration
	// hangArmed: the next one-sided batch posted stops the prefill worker
	// (hangPrefill); decHangArmed: the next resumed request's reservation
	// stops the decode worker (hangs).
	hangArmed, decHangArmed bool
}

func (w *world) count(f Fault) { w.res.Faults[f]++ }

func (w *world) violate(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	w.res.Violations = append(w.res.Violations, msg)
	w.logf("VIOLATION: %s", msg)
}

// numTenants is how many tenants a run's requests come from.
const numTenants = 3

func tenantName(i int) string { return fmt.Sprintf("tenant%d", i) }

// checkKeys is I11 at the key layer: a chain key computed for one tenant
// must never equal one computed for another (their salts differ, so a
// collision is a missing or shared salt), even where the index, keyed by
// tenant too, would still keep the entries apart. Every key either role's
// cache is looked up or filled with comes through here.
func (w *world) checkKeys(who, tenant string, keys []kv.BlockKey) {
	for i, k := range keys {
		t, ok := w.keyTenant[k]
		if !ok {
			w.keyTenant[k] = tenant
			continue
		}
		if t != tenant {
			w.violate("%s: the cache key of prompt page %d for %s is the key %x computed for %s (I11: cache keys crossed tenants, the salt is missing)", who, i, tenant, k[:4], t)
			return
		}
	}
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
		res: &Result{Seed: cfg.Seed, Ends: map[string]int{}, Phases: map[string]int{}, QueueRejects: map[string]int{}, ColoPreempted: map[string]int{}}}
	w.pl = newPlan(w.sched)
	w.keyTenant = map[kv.BlockKey]string{}
	mc := env.model.Config()
	ps := []int{2, 4, 8}[w.pick(3)]
	w.geo = kv.Geometry{Layers: mc.Layers, KVDim: mc.KVDim(), PageSize: ps}
	target := 24 + w.pick(40)
	// From one request's worth (exhausted by any burst) to several.
	// Most runs keep decode tight (pages on demand then run out during
	// growth: preemption); some give it room for several requests.
	w.decPages = kv.PagesFor(target, ps) * (1 + w.pick(2))
	if w.chance(0.3) {
		w.decPages = kv.PagesFor(target, ps) * (1 + w.pick(5))
	}
	if w.pl.pressure {
		w.decPages = kv.PagesFor(target, ps)
	}
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
	w.cacheOn = w.chance(0.7)
	w.dcacheOn = w.chance(0.6)
	w.cacheSecret = []byte(fmt.Sprintf("sim secret %d", w.rng.Uint64()))
	w.cacheFP = []byte("sim model")
	w.window = 1 + w.pick(3)
	w.streaming = w.prng.Float64() < 0.7
	w.res.Setup = fmt.Sprintf("pressure %v, page %d, decode %d pages, prefill %d pages, context %d, one-sided %v, scrub %v, prefix cache %v/%v, batch %d pages, window %d, handoff timeout %v, prefill timeout %v, streaming %v",
		w.pl.pressure, ps, w.decPages, w.prePages, w.ctx, w.pl.oneSided, w.scrub, w.cacheOn, w.dcacheOn, w.batchBytes/w.geo.PageBytes(), w.window, w.handoffTimeout, w.prefillTimeout, w.streaming)
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
			p.b.Close()
			p.pool.Close()
		}
	}()

	// The admission core: some runs bound the queue or the running
	// requests tightly, some give a short queue timeout.
	qc := admission.Config{MaxQueue: 256, QueueTimeout: 400 * msec, MaxRunning: 64, Quantum: w.ctx, RetryInterval: 10 * msec}
	if w.chance(0.3) {
		qc.MaxRunning = 1 + w.pick(6)
	}
	if w.chance(0.2) {
		qc.MaxQueue = 1 + w.pick(6)
	}
	if w.chance(0.25) {
		qc.QueueTimeout = w.between(2*msec, 30*msec)
	}
	w.res.Setup += fmt.Sprintf(", queue %d, running %d, queue timeout %v", qc.MaxQueue, qc.MaxRunning, qc.QueueTimeout)
	w.queueTimeout = qc.QueueTimeout
	w.router = &router{w: w, byHandoff: map[kv.ID]*rreq{}, bySID: map[admission.ID]*rreq{}, core: admission.New(qc),
		dead: map[int]bool{}, migrated: map[kv.ID]bool{}}
	// Some runs serve part of their requests with a colocated engine: the
	// batch core's own preemption (during a prompt, a decode or a rebuild)
	// and resume.
	coloShare := 0.0
	if w.chance(0.4) {
		if w.colo, err = w.newColo(qc); err != nil {
			w.violate("setup: %v", err)
			return w.res
		}
		defer w.colo.close()
		coloShare = 0.3 + 0.5*w.rng.Float64()
	}
	n := 8 + w.pick(13)
	window := w.between(2*msec, 30*msec)
	burst := w.chance(w.pl.p[FaultBurst])
	if burst {
		w.count(FaultBurst)
	}
	for range n {
		q := w.router.newReq(w.pick(len(env.prompts)), 1+w.pick(maxGen), tenantName(w.pick(numTenants)), w.pick(len(samplings)))
		if w.colo != nil && w.chance(coloShare) {
			q.colo = true
			q.m = request.New(request.Colocated)
		}
		at := w.between(0, window)
		if burst {
			at = w.between(0, 100*time.Microsecond)
		}
		w.after(at, "arrival", func() { w.router.submit(q) })
	}
	w.crashes()
	w.hangs()
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
			if w.pl.heartbeat {
				// kill -9: the kernel resets the connection, so the
				// router knows at once.
				w.after(netBase, "decode connection reset", func() { w.router.decodeDead(old, "its connection reset") })
			}
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

// hangs schedules the run's decode hang: the incarnation stops (SIGSTOP:
// it neither receives nor sends, its memory and state stay), the router's
// heartbeat declares it dead after peerTimeout of silence, a replacement
// starts (the supervisor's answer to a dead worker), and the stopped one
// is continued later (SIGCONT) and runs on unused: its streams of
// migrated handoffs reach the router, which must drop them.
func (w *world) hangs() {
	if w.pl.p[FaultHangPrefill] > 0 {
		w.hangPrefill()
	}
	if w.pl.p[FaultHangDecode] == 0 {
		return
	}
	if w.mchance(0.4) {
		// Armed: the decode worker stops shortly after the next resumed
		// request (it already streamed tokens) reserves on it, while its
		// KV is rebuilt: a resumed handoff that migrates before its
		// commit (router.reserved).
		w.after(w.mbetween(0, 30*msec), "arm decode hang", func() { w.decHangArmed = true })
		return
	}
	w.after(w.mbetween(0, 40*msec), "hang decode", w.stopDecode)
}

// stopDecode is hangs' stop of the running decode worker, now.
func (w *world) stopDecode() {
	w.decHangArmed = false
	d := w.dec
	if !d.up || w.res.Faults[FaultHangDecode] > 0 {
		return // crashed meanwhile, or stopped already
	}
	w.count(FaultHangDecode)
	d.up = false
	w.logf("decode#%d STOPPED (SIGSTOP)", d.gen)
	w.after(w.pl.peerTimeout, "heartbeat silence", func() {
		w.router.decodeDead(d, fmt.Sprintf("no heartbeat for %v", w.pl.peerTimeout))
		w.after(w.mbetween(msec, 20*msec), "replace decode", func() {
			if w.dec != d {
				return // already replaced (it crashed)
			}
			nd, err := w.newDecode(d.gen + 1)
			if err != nil {
				w.violate("replace decode: %v", err)
				return
			}
			w.dec = nd
			w.decs = append(w.decs, nd)
			w.logf("decode#%d up (replacing the stopped decode#%d)", nd.gen, d.gen)
			w.after(w.mbetween(0, 30*msec), "continue decode", func() {
				d.up = true
				d.stopped = true
				w.logf("decode#%d CONTINUED (SIGCONT), no longer used", d.gen)
				d.tick()
				d.kick()
			})
		})
	})
}

// hangPrefill stops the prefill worker (SIGSTOP) at a random moment: it
// computes and sends nothing more, and a one-sided copy it had under way
// stalls until it is continued (SIGCONT), after its replacement started,
// possibly past the quarantine lease: the stalled writer the generation
// word exists for. The router's heartbeat declares it dead after
// peerTimeout: its calls fail by transport, the requests fail before
// their first token, and their handoffs are aborted, so decode holds the
// pages in quarantine until the lease. The stopped one is never used
// again.
func (w *world) hangPrefill() {
	if w.pl.oneSided && w.mchance(0.7) {
		// Mostly in the middle of a copy: the first one-sided batch
		// posted after a random moment stops the writer (postOneSided).
		w.after(w.mbetween(0, 30*msec), "arm prefill hang", func() { w.hangArmed = true })
		return
	}
	w.after(w.mbetween(0, 40*msec), "hang prefill", w.stopPrefill)
}

// stopPrefill is hangPrefill's stop, now.
func (w *world) stopPrefill() {
	w.hangArmed = false
	p := w.pre
	if !p.up || w.res.Faults[FaultHangPrefill] > 0 {
		return // crashed meanwhile, or stopped already
	}
	w.count(FaultHangPrefill)
	p.up = false
	replaceIn, contIn := w.mbetween(msec, 20*msec), w.mbetween(0, 30*msec)
	p.stoppedUntil = w.now + w.pl.peerTimeout + replaceIn + contIn
	w.logf("prefill#%d STOPPED (SIGSTOP, %d jobs); continued at %v", p.gen, len(p.jobs), p.stoppedUntil)
	w.after(w.pl.peerTimeout, "prefill heartbeat silence", func() {
		w.router.prefillDead(p, fmt.Sprintf("no heartbeat for %v", w.pl.peerTimeout))
		w.after(replaceIn, "replace prefill", func() {
			if w.pre != p {
				return
			}
			np, err := w.newPrefill(p.gen + 1)
			if err != nil {
				w.violate("replace prefill: %v", err)
				return
			}
			w.pre = np
			w.pres = append(w.pres, np)
			w.logf("prefill#%d up (replacing the stopped prefill#%d)", np.gen, p.gen)
		})
	})
}

// tick drives the decode worker's clock until every request has ended and
// the drain time (leases, reservation timeouts) has passed.
func (w *world) tick() {
	for _, d := range w.decs {
		if d != w.dec && d.stopped {
			d.tick() // a continued incarnation runs on
		}
	}
	w.dec.tick()
	w.router.coreStep(admission.Event{Kind: admission.EvTick})
	if w.pre.up {
		w.pre.coreStep(admission.Event{Kind: admission.EvTick}) // the queue timeout
		// The prefill pool's quarantine leases (a cached page refused
		// on a read, wrong_tenant_lookup) run out on this clock too,
		// and the queue learns pages came back (signalFreed).
		if w.pre.pool.Expire(w.clock()) > 0 {
			w.pre.coreStep(admission.Event{Kind: admission.EvFreed})
		}
	}
	if w.colo != nil {
		w.colo.coreStep(admission.Event{Kind: admission.EvTick})
	}
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

// oracleReleased checks, outside the system, that what a decode sequence
// held just before its pages went back is the reference KV: the prompt
// (and generated tokens) of its handoff, every written slot. A late write
// landing mid-decode shows here. A mismatch is only a violation if the
// request then reports success (checked at the end).
func (w *world) oracleReleased(d *decode, o kv.Owner, refs []kv.PageRef) {
	q := w.router.byHandoff[o.ID]
	if q == nil || q.kvBad != "" {
		return
	}
	w.compareKV(d, q, o, refs)
}

func (w *world) compareKV(d *decode, q *rreq, o kv.Owner, table []kv.PageRef) {
	ref := w.env.ref(q.prompt, w.geo.PageSize, q.si)
	for b := range table {
		data, n, err := d.pool.PageData(o, table[b])
		if err != nil || n == 0 {
			// The pool refused (the system noticed something); not silent.
			return
		}
		if b >= len(ref.pages) {
			q.kvBad = fmt.Sprintf("KV block %d written past the reference's %d blocks", b, len(ref.pages))
			return
		}
		if !sameKV(w.geo, data, ref.pages[b], n) {
			q.kvBad = fmt.Sprintf("decoded KV block %d (page %d) differs from the reference", b, table[b].Page)
			w.logf("oracle: %v %s", q, q.kvBad)
			return
		}
	}
}

// check is the end-of-run verdict.
func (w *world) check() {
	for _, q := range w.router.reqs {
		ref := w.env.ref(q.prompt, w.geo.PageSize, q.si).tokens
		w.res.Ends[string(q.end)]++
		switch {
		case !q.finished:
			w.violate("%v never ended (state %v)", q, q.m.State())
			continue
		case q.end == "finished_length":
			w.res.OK++
			if q.preempts > 0 {
				w.res.ResumedOK++
			}
			if q.migrations > 0 {
				w.res.MigratedOK++
			}
			if samplings[q.si].Format.Constrained() {
				w.res.ConstrainedOK++
				if q.preempts > 0 || q.migrations > 0 {
					w.res.ConstrainedMovedOK++
				}
			}
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
			if q.preempts > 0 {
				w.res.ResumedFailed++
			}
			if q.migrations > 0 {
				w.res.MigratedFailed++
			}
		}
		if len(q.out) > len(ref) || !slices.Equal(q.out, ref[:len(q.out)]) {
			w.violate("%v streamed %v before ending %s; reference %v", q, q.out, q.end, ref)
		}
	}
	// After the drain nothing may hold a page: not a leak, not a
	// quarantine, not a forgotten reservation; on the running decode
	// worker and on a stopped one that was continued (its migrated
	// handoffs ended there too).
	for _, d := range w.decs {
		if !d.up || (d != w.dec && !d.stopped) {
			continue
		}
		d.wk.Tick(w.clock())
		if err := d.pool.CheckDrained(); err != nil {
			w.violate("decode#%d pool after drain: %v", d.gen, err)
		}
		if s := d.wk.ReceiverStats(); s.Live != 0 {
			w.violate("decode#%d receiver still has %d live handoffs", d.gen, s.Live)
		}
		if st := d.wk.SchedStats(); st.Running != 0 || st.Preempted != 0 || len(d.streams) != 0 {
			w.violate("decode#%d still has %d sequences, %d preempted and %d open streams", d.gen, st.Running, st.Preempted, len(d.streams))
		}
	}
	if c := w.colo; c != nil {
		if err := c.pool.CheckDrained(); err != nil {
			w.violate("colocated pool after drain: %v", err)
		}
		if st := c.b.Stats(); st.Running != 0 || st.Preempted != 0 {
			w.violate("the colocated batch still has %d sequences and %d preempted", st.Running, st.Preempted)
		}
		if st := c.core.Stats(); st.Waiting != 0 || st.Running != 0 {
			w.violate("the colocated admission core still has %d waiting and %d running after the drain", st.Waiting, st.Running)
		}
	}
	if st := w.router.core.Stats(); st.Waiting != 0 || st.Running != 0 {
		w.violate("the admission core still has %d waiting and %d running after the drain", st.Waiting, st.Running)
	}
	for _, p := range w.pres {
		w.res.CacheEvictions += int(p.pool.Stats().CacheEvictions)
	}
	if w.pre.up {
		if err := w.pre.pool.CheckDrained(); err != nil {
			w.violate("prefill#%d pool after drain: %v", w.pre.gen, err)
		}
		var st admission.Stats
		if w.pre.queue != nil {
			st = w.pre.queue.Stats()
		}
		if len(w.pre.jobs) != 0 || len(w.pre.calls) != 0 || st.Waiting != 0 || st.Running != 0 {
			w.violate("prefill#%d still has %d jobs and %d calls queued; its queue's core %d waiting and %d running", w.pre.gen, len(w.pre.jobs), len(w.pre.calls), st.Waiting, st.Running)
		}
	}
}
