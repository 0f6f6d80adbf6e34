package sim

import "time"

// Fault is one kind of injected fault.
type Fault int

const (
	FaultDelay        Fault = iota // a message delayed past later ones (reordering)
	FaultDup                       // a message delivered twice
	FaultLoss                      // a message lost
	FaultCrashPrefill              // the prefill worker crashes and restarts empty
	FaultCrashDecode               // the decode worker crashes and restarts empty
	FaultDisconnect                // a client goes away (any phase)
	FaultAbortRouter               // the router aborts a request (any phase)
	FaultAbortPrefill              // the prefill worker gives a handoff up (any phase)
	FaultLateWrite                 // a one-sided write lands long after it was posted
	FaultSlowTransfer              // a transfer's batches are slower than the lease in total
	FaultBurst                     // requests arrive at once into small pools
	FaultShort                     // misbehaving prefill: one page, full-count commit
	FaultWrongDigest               // misbehaving prefill: digest corrupted
	FaultNoDigest                  // misbehaving prefill: digest omitted
	FaultStaleData                 // misbehaving prefill: a page carries another page's bytes
	FaultStaleWriter               // misbehaving prefill: re-sends a write after its abort
	FaultForeign                   // misbehaving prefill: writes into another handoff's page
	FaultAfterPreempt              // a disconnect or router abort strikes a preempted request while it resumes
	FaultWrongTenant               // prefill's cache lookup made under another tenant (an index bug): the shares are the reader's
	FaultHangDecode                // the decode worker stops (SIGSTOP): silent until the heartbeat declares it dead; continued later
	FaultMigrate                   // a stream cut after its first token by its decode worker's death or hang, moved to another worker
	FaultHangPrefill               // the prefill worker stops mid-transfer (its posted one-sided writes still land): the heartbeat declares it dead
	numFaults
)

var faultNames = [numFaults]string{"delay", "dup", "loss", "crash_prefill", "crash_decode",
	"disconnect", "abort_router", "abort_prefill", "late_write", "slow_transfer", "burst",
	"short_transfer", "wrong_digest", "no_digest", "stale_data", "stale_writer", "foreign_pages", "after_preempt",
	"wrong_tenant_lookup", "hang_decode", "migrate", "hang_prefill"}

func (f Fault) String() string { return faultNames[f] }

// FaultNames lists every fault kind in order, for reports.
func FaultNames() []string { return faultNames[:] }

// plan is the per-run fault mix: each kind is on with some probability for
// the run, and when on, its per-opportunity probability is drawn too. Many
// runs therefore have few faults (so successes are common and checked),
// some have many.
type plan struct {
	p        [numFaults]float64
	jitter   time.Duration // extra random message delay (reordering)
	oneSided bool          // shm-like transport: page bytes land in decode memory one-sidedly
	retry    float64       // chance a client retries a failed request at once
	// pressure: an honest run (no misbehaving peer, no crash) into one
	// request's worth of decode pages, arriving at once: most requests
	// reach decoding together and grow into each other (preemption).
	pressure bool
	// heartbeat: the router's connections to decode carry heartbeats
	// (--peer-timeout peerTimeout): a crashed decode worker is noticed at
	// once (its connection resets), a stopped one after peerTimeout of
	// silence, and a stream cut after its first token migrates, at most
	// maxMigrations times (--max-migrations). Off, a worker's death is
	// noticed by no one and its streams end at their deadline, as before
	// heartbeats existed.
	heartbeat     bool
	peerTimeout   time.Duration
	maxMigrations int
}

func newPlan(s *sched) plan {
	var pl plan
	rate := func(on float64, lo, hi float64) float64 {
		if !s.chance(on) {
			return 0
		}
		return lo + s.rng.Float64()*(hi-lo)
	}
	pl.p[FaultDelay] = rate(0.5, 0.05, 0.4)
	pl.p[FaultDup] = rate(0.25, 0.01, 0.08)
	pl.p[FaultLoss] = rate(0.25, 0.01, 0.06)
	pl.p[FaultCrashPrefill] = rate(0.12, 1, 1)
	pl.p[FaultCrashDecode] = rate(0.12, 1, 1)
	pl.p[FaultDisconnect] = rate(0.4, 0.1, 0.4)
	pl.p[FaultAbortRouter] = rate(0.4, 0.1, 0.3)
	pl.p[FaultAbortPrefill] = rate(0.25, 0.05, 0.2)
	pl.p[FaultLateWrite] = rate(0.6, 0.1, 0.5)
	pl.p[FaultSlowTransfer] = rate(0.2, 0.2, 0.6)
	pl.p[FaultBurst] = rate(0.4, 1, 1)
	for _, f := range []Fault{FaultShort, FaultWrongDigest, FaultNoDigest, FaultStaleData, FaultStaleWriter, FaultForeign} {
		pl.p[f] = rate(0.2, 0.1, 0.4)
	}
	pl.p[FaultAfterPreempt] = rate(0.4, 0.2, 0.6)
	if s.chance(0.25) {
		pl.pressure = true
		for _, f := range []Fault{FaultShort, FaultWrongDigest, FaultNoDigest, FaultStaleData, FaultStaleWriter, FaultForeign, FaultCrashPrefill, FaultCrashDecode} {
			pl.p[f] = 0
		}
		pl.p[FaultBurst] = 1
	}
	if pl.p[FaultDelay] > 0 {
		pl.jitter = s.between(200*time.Microsecond, 3*time.Millisecond)
	}
	pl.oneSided = s.chance(0.5)
	pl.retry = rate(0.6, 0.5, 1)
	// The prefix cache's faults draw from their own stream, so that adding
	// them left every other choice of a seed (and the seeds that find the
	// other bugs) as it was.
	if s.cchance(0.5) {
		pl.p[FaultWrongTenant] = 0.2 + 0.4*s.crng.Float64()
	}
	// Heartbeats, hangs and migration: their own stream too.
	if s.mchance(0.6) {
		pl.heartbeat = true
		pl.peerTimeout = s.mbetween(2*msec, 12*msec)
		pl.maxMigrations = 1 + s.mrng.IntN(3)
		// Pressure runs too: a preempted request rebuilding its KV on a
		// worker that stops is the resumed handoff that migrates before
		// its commit.
		if s.mchance(0.25) {
			pl.p[FaultHangDecode] = 1
		}
		if !pl.pressure && s.mchance(0.25) {
			pl.p[FaultHangPrefill] = 1
		}
	}
	return pl
}

// faultTime is when a per-request fault strikes after arrival: mostly
// within a request's typical life (a few ms), so every phase gets hit, and
// sometimes much later.
func (w *world) faultTime() time.Duration {
	if w.chance(0.8) {
		return w.between(0, 12*time.Millisecond)
	}
	return w.between(0, 40*time.Millisecond)
}

// misbehaving reports whether the run has misbehaving prefill peers,
// whose writes may land in an honest handoff's pages.
func (pl *plan) misbehaving() bool {
	for _, f := range []Fault{FaultShort, FaultWrongDigest, FaultNoDigest, FaultStaleData, FaultStaleWriter, FaultForeign} {
		if pl.p[f] > 0 {
			return true
		}
	}
	return false
}
