package sim

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/kv"
)

// injected is one safeguard (or one layered set) switched off.
type injected struct {
	name string // SLUICE_SIM_BUG value
	inv  string // the invariant the safeguard enforces
	what string
	bugs Bugs
	// bound: the simulator must find a violation within this many seeds
	// (mustFind), or find none in this many (holdsAlone).
	bound uint64
	// want is what the finding must say (alternatives split by "|"); ""
	// means a leak (a client got success over data that was not its own,
	// or wrong tokens).
	want string
}

// mustFind are bugs no other layer catches: the simulator must find each.
// Bounds are five to twenty times the seed that finds it today, at least
// 50 (runs are deterministic, so the count is exact, not a probability;
// the room is for the seed stream shifting when the simulator draws more):
// no-digest, count-only and incident seed 11, no-generation 17,
// release-before-drain 14, early-drain 14, short-lease 23,
// foreign-placement 4, cancel-queued-reserves 2, cache-tenant-blind 4,
// cache-no-salt 4, cache-no-tenant-check 5, resume-no-offset 2 (since
// the prefill batch computes the prompts, engine.DrivenPrefill).
var mustFind = []injected{
	{"no-digest", "I5", "commit digest not compared (a page with wrong bytes but a matching checksum is accepted)",
		Bugs{Receiver: handoff.Safeguards{NoDigest: true}}, 250, ""},
	{"count-only", "I5", "commit accepted on count alone (no coverage, no digest)",
		Bugs{Receiver: handoff.Safeguards{NoCoverage: true, NoDigest: true}}, 250, ""},
	{"incident", "I5", "the incident's decode: no count, coverage or digest check",
		Bugs{Receiver: handoff.Safeguards{NoCount: true, NoCoverage: true, NoDigest: true}}, 250, ""},
	{"no-generation", "I3", "no owner/generation check at the protocol layer nor in the pool",
		// A stale write may land in a cached page first, which the pool's
		// seal check then finds (the leak it would become, caught early).
		Bugs{Receiver: handoff.Safeguards{NoReservationMatch: true}, KV: kv.Unsafe{NoOwnerCheck: true}}, 200, "integrity violation|streamed|no longer matches its seal digest"},
	// The I6 rows switch the shared generation word off too: it alone
	// stops each of them (holdsAlone, "...-gen-word", whose bounds reach past
	// the seed that finds the bug with the word off: runs are
	// deterministic, so they fail if the word stops working).
	{"release-before-drain", "I6", "an ended one-sided handoff's pages released at once, not quarantined",
		Bugs{NoQuarantine: true, NoGenFence: true}, 100, ""},
	// (Also found as an idle prefix-cache page that a late copy changed
	// after its seal, caught only by the drain's re-hash.)
	{"early-drain", "I6", "the writer acknowledges its drain with one-sided writes in flight",
		Bugs{EarlyDrain: true, NoGenFence: true}, 600, "integrity violation|streamed|no longer matches its seal digest"},
	{"short-lease", "I6", "quarantine lease shorter than the transport's worst in-flight time",
		Bugs{ShortLease: true, NoGenFence: true}, 400, ""},
	{"foreign-placement", "I3", "the one-sided writer's reservation fence off: a peer places bytes in another handoff's page",
		Bugs{ForeignPlacement: true, NoGenFence: true}, 100, ""},
	// The page-lifetime paths of queueing and preemption (issue 11).
	// (Found as decode pages reserved for it, or as the core timing out a
	// request that already ended.)
	{"cancel-queued-reserves", "I1", "a request whose client left while it was queued stays in the admission core and reserves when its turn comes",
		Bugs{CancelQueuedReserves: true}, 50, "left the queue|illegal transition: fail in state finished"},
	// The prefix cache (issue 12): both of its tenant layers off at once.
	{"cache-tenant-blind", "I11", "prefix cache keyed without the tenant salt AND index and shared read ignoring the tenant (engine.Unsafe.TenantBlindCache)",
		Bugs{CacheNoSalt: true, KV: kv.Unsafe{CacheIgnoresTenant: true}}, 50, "the prefix cache crossed tenants"},
	// Each tenant layer of the cache alone (issue 12): found by the key
	// invariant (two tenants' keys equal, though the tenant-keyed index
	// still keeps their entries apart) and by the wrong_tenant_lookup
	// fault (another tenant's shares handed to a reader: the pool's
	// read-time tenant check is the only layer left).
	{"cache-no-salt", "I11", "prefix cache keys without the tenant salt, on both roles (the index is still keyed by tenant)",
		Bugs{CacheNoSalt: true}, 50, "cache keys crossed tenants"},
	{"cache-no-tenant-check", "I11", "no tenant check on a shared read of a cached page (kv.Unsafe.NoCacheTenantCheck; index and keys still per tenant)",
		Bugs{KV: kv.Unsafe{NoCacheTenantCheck: true}}, 50, "crossed tenants on a shared read"},
	{"resume-no-offset", "exact resume", "a resumed request's new handoff carries neither the generated tokens to decode's sampler nor the prefill sampler offset",
		Bugs{ResumeNoOffset: true}, 50, ""},
	// Migration after a decode worker's death or hang (issue 27).
	{"migrate-no-exclude", "exact migration", "a migrated request is paired again without avoiding the decode worker declared dead",
		Bugs{MigrateNoExclude: true}, 50, "did not exclude the failed worker"},
	{"migrate-wrong-offset", "exact migration", "a migrated request's prefill samples at an offset one short of the tokens already sent",
		Bugs{MigrateWrongOffset: true}, 50, ""},
	// Against a CRASHED incarnation's posted writes the commit digest,
	// re-read from memory, backs the new file up; against a STOPPED one
	// continued after its replacement started (hang_decode) nothing does:
	// its own decode steps write the file the replacement maps in place.
	{"restart-same-file", "I6", "a decode worker replacing a stopped or crashed one maps its shared file in place, not a new file",
		Bugs{RestartSameFile: true}, 250, "integrity violation|streamed|no longer matches its seal digest"},
	{"heartbeat-release", "I6", "a prefill worker declared dead by the heartbeat is taken as drained: its handoffs' pages are freed at once, not after the lease",
		Bugs{HeartbeatRelease: true, NoGenFence: true}, 600, ""},
}

// holdsAlone are safeguards another layer backs up: with only this one
// off, the simulator must find nothing ("each layer alone stops it",
// DESIGN.md), over bound seeds.
var holdsAlone = []injected{
	{"no-count", "I5", "count check off (coverage and slot counts still hold)", Bugs{Receiver: handoff.Safeguards{NoCount: true}}, 250, ""},
	{"no-coverage", "I5", "coverage check off (count and digest still hold)", Bugs{Receiver: handoff.Safeguards{NoCoverage: true}}, 250, ""},
	{"no-reservation-match", "I3", "protocol-layer page/generation match off (the pool's tags still hold)", Bugs{Receiver: handoff.Safeguards{NoReservationMatch: true}}, 250, ""},
	{"no-checksum", "I5", "per-write checksum off (the digest still holds)", Bugs{Receiver: handoff.Safeguards{NoChecksum: true}}, 250, ""},
	{"no-owner-check", "I3", "pool owner/generation check off (the protocol-layer match still holds)", Bugs{KV: kv.Unsafe{NoOwnerCheck: true}}, 250, ""},
	{"no-extent-check", "I4", "pool written-extent check off (nothing accepted has gaps)", Bugs{KV: kv.Unsafe{NoExtentCheck: true}}, 250, ""},
	{"no-scrub", "I7", "released pages not scrubbed (only written slots are read)", Bugs{NoScrub: true}, 250, ""},
	{"release-before-drain-gen-word", "I6", "pages released at once, not quarantined (the shared generation word, closed at the release, stops every late copy)",
		Bugs{NoQuarantine: true}, 500, ""},
	{"early-drain-gen-word", "I6", "drain acknowledged with writes in flight (the generation word stops them landing in re-used pages)",
		Bugs{EarlyDrain: true}, 500, ""},
	{"short-lease-gen-word", "I6", "lease shorter than the in-flight time (the generation word stops late copies)",
		Bugs{ShortLease: true}, 250, ""},
	{"heartbeat-release-gen-word", "I6", "pages freed when the prefill's heartbeat stops (the generation word, closed at the release, stops the stopped writer's copies)",
		Bugs{HeartbeatRelease: true}, 500, ""},
}

func allInjected() []injected {
	return append(append([]injected(nil), mustFind...), holdsAlone...)
}

func bugByName(t testing.TB, name string) Bugs {
	for _, b := range allInjected() {
		if b.name == name {
			return b.bugs
		}
	}
	t.Fatalf("SLUICE_SIM_BUG=%q: unknown; one of the names in bugs_test.go", name)
	return Bugs{}
}

func replayBugCmd(seed uint64, bug string) string {
	return fmt.Sprintf("SLUICE_SIM_BUG=%s SLUICE_SIM_SEED=%d go test -count=1 -run 'TestInjectedBugs/replay' -v ./internal/sim/", bug, seed)
}

// firstBad runs seeds 1..bound (stopping at the first bad one) and returns
// the lowest bad seed, or 0.
func firstBad(env *Env, bugs Bugs, bound uint64) (*Result, int) {
	rs := runSeeds(env, 1, bound, bugs, 1)
	ran := 0
	for _, r := range rs {
		if r == nil {
			continue
		}
		ran++
		if r.Bad() {
			return r, ran
		}
	}
	return nil, ran
}

// TestInjectedBugs switches safeguards off and checks that the simulator
// finds each bug no other layer catches within a bounded number of seeds,
// and finds nothing when a backed-up layer alone is off.
// SLUICE_SIM_BUG=name SLUICE_SIM_SEED=S replays one seed with one bug.
func TestInjectedBugs(t *testing.T) {
	env := testEnv(t)
	if name := os.Getenv("SLUICE_SIM_BUG"); name != "" {
		t.Run("replay", func(t *testing.T) {
			seed := envInt(t, "SLUICE_SIM_SEED", 1)
			r := Run(env, Config{Seed: seed, Bugs: bugByName(t, name), Trace: true})
			t.Logf("trace of seed %d with bug %s:\n%s", seed, name, r.TraceText())
			for _, v := range r.Violations {
				t.Logf("violation: %s", v)
			}
			if !r.Bad() {
				t.Logf("seed %d finds nothing with bug %s", seed, name)
			}
		})
		return
	}
	for _, b := range mustFind {
		t.Run("finds/"+b.name, func(t *testing.T) {
			start := time.Now()
			r, ran := firstBad(env, b.bugs, b.bound)
			if r == nil {
				t.Fatalf("%s (%s): no violation in %d seeds; the simulator cannot see this bug", b.what, b.inv, ran)
			}
			t.Logf("%s (%s): found at seed %d (%d seeds, %v): %s\n  replay: %s", b.what, b.inv, r.Seed, ran,
				time.Since(start).Round(time.Millisecond), r.Violations[0], replayBugCmd(r.Seed, b.name))
			// The finding is the leak itself: a client got success over
			// data that was not its own, or wrong tokens (or what the row
			// names).
			all := strings.Join(r.Violations, "\n")
			if b.want != "" {
				found := false
				for _, w := range strings.Split(b.want, "|") {
					found = found || strings.Contains(all, w)
				}
				if !found {
					t.Errorf("found something other than %q: %v", b.want, r.Violations)
				}
			} else if !strings.Contains(all, "integrity violation") && !strings.Contains(all, "streamed") {
				t.Errorf("found something other than a leak: %v", r.Violations)
			}
		})
	}
	for _, b := range holdsAlone {
		t.Run("holds/"+b.name, func(t *testing.T) {
			r, ran := firstBad(env, b.bugs, b.bound)
			if r != nil {
				t.Fatalf("%s (%s): seed %d breaks an invariant with only this layer off: %s\n  replay: %s",
					b.what, b.inv, r.Seed, r.Violations[0], replayBugCmd(r.Seed, b.name))
			}
			t.Logf("%s (%s): nothing found in %d seeds", b.what, b.inv, ran)
		})
	}
}

// TestInjectedBugRates (SLUICE_SIM_BUG_RATES=N) runs N seeds per injected
// bug (or only SLUICE_SIM_BUG) and reports the fraction of seeds that find
// it, for the closing note.
func TestInjectedBugRates(t *testing.T) {
	n := envInt(t, "SLUICE_SIM_BUG_RATES", 0)
	if n == 0 {
		t.Skip("opt-in: set SLUICE_SIM_BUG_RATES=N to measure how many seeds find each injected bug")
	}
	env := testEnv(t)
	only := os.Getenv("SLUICE_SIM_BUG")
	for _, b := range allInjected() {
		if only != "" && b.name != only {
			continue
		}
		start := time.Now()
		rs := runSeeds(env, 1, n, b.bugs, 0)
		bad, first := 0, uint64(0)
		for _, r := range rs {
			if r.Bad() {
				bad++
				if first == 0 {
					first = r.Seed
				}
			}
		}
		if bad == 0 {
			t.Logf("%-22s %s: none of %d seeds finds it (%v)", b.name, b.inv, n, time.Since(start).Round(time.Millisecond))
			continue
		}
		t.Logf("%-22s %s: %d of %d seeds find it (1 in %.0f), first at seed %d (%v)", b.name, b.inv, bad, n,
			float64(n)/float64(bad), first, time.Since(start).Round(time.Millisecond))
	}
}
