package engine

import (
	"slices"
	"time"
)

// The prefill worker steps aside for a finished prompt's handoff.
//
// When a streamed prompt's last chunk is computed, its scheduler's
// goroutine tells the push (handoff.Progress.Finish), whose goroutine then
// sends the last pages and, once decode acknowledged them, the commit; the
// decode worker sends the first token as it accepts the commit. Each of
// those hops wakes a goroutine (the push, decode's connection reader, the
// push's reply reader, decode's commit handler), and a woken goroutine
// needs a core. While another tenant's prompts keep the prefill worker's
// thread computing and decode's thread decoding, both cores are busy and
// every hop waits for the kernel to preempt one: measured per request
// (benchmarks.md, "The push to the commit, hop by hop"), the push
// goroutine's own wake-up after the last chunk took 1.2-1.4 ms on average
// under a flood (0.6-1.2 ms alone, medians 0.1 ms), the largest part of
// the push. Stepping aside, the scheduler's goroutine blocks until the
// push has landed (the commit accepted or the handoff failed), so its
// thread runs the push's goroutines at once and polls the network for the
// replies, and only then computes the next step: the light tenant's first
// token does not queue behind the heavy tenant's compute.
//
// It costs the other tenants' prompts the push's time on this thread
// (about half a millisecond on an idle core, at most Config.CommitAside
// per step of the batch, its nested passes included), once per prompt
// that ends while another tenant's prompt is in the batch: a tenant alone
// never waits for its own handoffs, so stepping aside costs a single
// tenant's throughput nothing.

// DefaultCommitAside is Config.CommitAside's default: off. Stepping
// aside shortens the push hop by hop (benchmarks.md, "The push to the
// commit, hop by hop"), but a quiet-machine A/B with it on against off
// (6 rounds, 1,536 of b's requests a side) resolves no gain in b's time
// to first token (p50 1.05x, 95% CI 0.99-1.12x) and costs the flooding
// tenant about a tenth of its tokens per second (median of the rounds
// 0.89x). A positive Config.CommitAside (1 ms is about twice a
// push on an idle core) turns it on.
const DefaultCommitAside = -1

// asideFor reports whether the scheduler steps aside for the handoff of a
// prompt of tenant that just ended: only when the prompts it would
// compute meanwhile (work: the tenants of the batch's prompts with tokens
// left, in any order, repeats allowed) include another tenant's. A step
// of the same tenant's prompts does not wait for its own handoff: the
// tenant is not crowded by itself, and its throughput pays nothing for
// stepping aside.
func asideFor(tenant string, work []string) bool {
	return slices.ContainsFunc(work, func(t string) bool { return t != tenant })
}

// promptTenants appends to buf the tenants of the prompts the scheduler
// holds with tokens left to compute: in its batch, and handed to it but
// not yet joined. On the scheduler's goroutine only (it reads the batch).
func (s *scheduler) promptTenants(buf []string) []string {
	for _, q := range s.active {
		if q.emit != nil && len(q.prompt) > 0 {
			buf = append(buf, q.owner.Tenant)
		}
	}
	s.mu.Lock()
	for _, q := range s.joining {
		if len(q.prompt) > 0 {
			buf = append(buf, q.owner.Tenant)
		}
	}
	s.mu.Unlock()
	return buf
}

// aside is the prefill worker's state for stepping aside, touched by the
// scheduler's goroutine only.
type aside struct {
	// pass is the batch's step the deadline is for (its nested passes
	// included): the prompts ending in one step share one bound.
	pass  int64
	until time.Time
	buf   []string
}

// left is how long a prompt ending at now in the batch's step pass may
// still be waited for: the prompts ending in one step share one bound,
// counted from the first of them, so a step ending many prompts holds the
// other tenants' work for at most bound in all, not bound per prompt.
// The nested passes a step yields to (yield.go) are part of it: a tenant's
// burst of tiny prompts, each ending in a nested pass of its own, would
// otherwise hold the paused step a bound per pass (the nested budget
// counts tokens, not these waits).
func (a *aside) left(pass int64, now time.Time, bound time.Duration) time.Duration {
	if pass != a.pass || a.until.IsZero() {
		a.pass, a.until = pass, now.Add(bound)
	}
	return a.until.Sub(now)
}

// stepAside runs on the scheduler's goroutine as a streamed prompt of
// tenant ended and its push was told (Progress.Finish): when another
// tenant's prompt waits to be computed (asideFor), it waits until landed
// is closed (the push returned) or the pass's bound (Config.CommitAside)
// passed, whichever comes first.
func (w *PrefillWorker) stepAside(tenant string, landed <-chan struct{}) {
	if w.cfg.CommitAside < 0 {
		return
	}
	a := &w.aside
	a.buf = w.sched.promptTenants(a.buf[:0])
	if !asideFor(tenant, a.buf) {
		return
	}
	left := a.left(w.sched.steps.Load(), time.Now(), w.cfg.CommitAside)
	if left <= 0 {
		return
	}
	w.stats.asides.Add(1)
	select {
	case <-landed:
		return
	default:
	}
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-landed:
	case <-t.C:
		w.stats.asideTimeouts.Add(1)
	}
}
