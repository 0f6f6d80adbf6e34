package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/kv"
)

// reserveRec is one Reserve a decode worker saw.
type reserveRec struct {
	worker string
	id     kv.ID
	prompt int
}

// repairDecode is a decode worker (in-process, or the router's TCP link
// to one) that ends its FIRST handoff early the way decode does when its
// pool runs dry: preempted after preemptAfter tokens (the real sequence
// is cancelled, so its pages come back), or revoked as its stream opens
// (through the worker's own revocation, w). After that first handoff it
// is full (full): every Reserve is refused for room, as a worker that
// just preempted or revoked for want of pages refuses one. It records
// every Reserve.
type repairDecode struct {
	handoff.Decode
	w            *DecodeWorker // the worker itself, for revocation
	name         string
	log          *repairLog
	preemptAfter int
	revoke       bool
	full         bool

	mu       sync.Mutex
	reserves int
	streams  int
	prompts  map[kv.ID]int
}

type repairLog struct {
	mu       sync.Mutex
	reserves []reserveRec
}

func (d *repairDecode) Reserve(ctx context.Context, r *handoff.Reserve) (*handoff.Reservation, error) {
	d.mu.Lock()
	d.reserves++
	n := d.reserves
	if d.prompts == nil {
		d.prompts = map[kv.ID]int{}
	}
	d.prompts[r.Handoff] = r.PromptTokens
	d.mu.Unlock()
	d.log.mu.Lock()
	d.log.reserves = append(d.log.reserves, reserveRec{d.name, r.Handoff, r.PromptTokens})
	d.log.mu.Unlock()
	if d.full && n > 1 {
		return nil, handoff.ErrNoRoom.With("the pool is full (test)")
	}
	return d.Decode.Reserve(ctx, r)
}

func (d *repairDecode) Stream(ctx context.Context, id kv.ID, p handoff.StreamParams) (handoff.TokenStream, error) {
	ts, err := d.Decode.Stream(ctx, id, p)
	if err != nil {
		return ts, err
	}
	d.mu.Lock()
	d.streams++
	first := d.streams == 1
	prompt := d.prompts[id]
	d.mu.Unlock()
	if !first {
		return ts, nil
	}
	if d.revoke {
		w := d.w
		w.mu.Lock()
		if h := w.handoffs[id]; h != nil && !h.committed {
			w.revokeOneLocked(w.now(), id, h)
		}
		w.mu.Unlock()
		return ts, nil
	}
	if d.preemptAfter > 0 {
		return &preemptingStream{TokenStream: ts, d: d.Decode, id: id, after: d.preemptAfter, prompt: prompt}, nil
	}
	return ts, nil
}

// preemptingStream passes after tokens, then cancels the real sequence
// (its pages come back) and ends the stream "preempted", as decode ends a
// sequence it could not grow.
type preemptingStream struct {
	handoff.TokenStream
	d      handoff.Decode
	id     kv.ID
	after  int
	prompt int
	n      int
}

func (s *preemptingStream) Recv() (handoff.Token, error) {
	if s.n == s.after {
		s.n++
		_ = s.d.Cancel(context.Background(), s.id)
		return handoff.Token{Done: true, Finish: "preempted", PromptTokens: s.prompt, CompletionTokens: s.after}, nil
	}
	tok, err := s.TokenStream.Recv()
	if err == nil && !tok.Done && tok.Err == nil {
		s.n++
	}
	return tok, err
}

// repairPairs hands out its pairs in order (the last again once they run
// out, or an error with none: no other pair), and records what each call
// was asked to avoid and what each pair was told when its attempt ended.
type repairPairs struct {
	mu     sync.Mutex
	pairs  []Pair
	names  []string
	calls  int
	avoids [][]*Pair
	told   map[string][][2]error
}

func (p *repairPairs) Pair(_ *Request, avoid []*Pair) (*Pair, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.avoids = append(p.avoids, avoid)
	if p.calls >= len(p.pairs) {
		return nil, handoff.ErrTransport.With("no other pair (test)")
	}
	c, name := p.pairs[p.calls], p.names[p.calls]
	p.calls++
	c.Done = func(perr, derr error) {
		p.mu.Lock()
		p.told[name] = append(p.told[name], [2]error{perr, derr})
		p.mu.Unlock()
	}
	return &c, nil
}

// repairRig is two prefill/decode pairs, a and b, in process or over
// loopback TCP (the router's links to each worker).
type repairRig struct {
	pre   [2]handoff.Prefill
	dec   [2]handoff.Decode
	dw    [2]*DecodeWorker
	pools []*kv.Pool
}

func newRepairRig(t *testing.T, m *toy, transport string) *repairRig {
	t.Helper()
	r := &repairRig{}
	for i := range 2 {
		if transport == "inproc" {
			l := toyLocal(t, m)
			r.pre[i], r.dec[i], r.dw[i] = l.Prefill, l.Decode, l.Decode
			r.pools = append(r.pools, l.Prefill.Pool(), l.Decode.Pool())
			continue
		}
		rig := newRemoteRig(t, transport, toyConfig(m, 40), toyConfig(m, 40))
		t.Cleanup(rig.close)
		r.pre[i], r.dec[i], r.dw[i] = rig.rp, rig.rd, rig.dw
		r.pools = append(r.pools, rig.pw.Pool(), rig.dw.Pool())
	}
	return r
}

// A request that decode preempts (or whose reservation decode revokes
// before its commit) is paired afresh for its next handoff (repairAfresh):
// the pairer is asked again, with nothing to avoid (neither is a
// failure), the old pair is told its attempt ended well, and the request
// moves, prefill and decode, to the pair it gets, under a NEW handoff id
// and a new reservation there; the old worker, which just ran out of
// pages, is not asked again. The client's stream is the reference bit for
// bit, and every pool is whole after. With no other pair to be had, the
// request stays on its own pair, still under a new handoff id.
// In process and over TCP.
func TestPreemptedOrRevokedRepairsAfresh(t *testing.T) {
	m := newToy()
	r := &Request{Tenant: "t", Prompt: prompt(3, 9), MaxTokens: 12}
	want := toyReference(m, r.Prompt, r.MaxTokens, false)
	const after = 3 // tokens sent before the preemption
	for _, transport := range []string{"inproc", "tcp"} {
		for _, how := range []string{"preempted", "revoked"} {
			for _, other := range []bool{true, false} {
				name := fmt.Sprintf("%s/%s/other pair %v", transport, how, other)
				t.Run(name, func(t *testing.T) {
					rig := newRepairRig(t, m, transport)
					log := &repairLog{}
					a := &repairDecode{Decode: rig.dec[0], w: rig.dw[0], name: "a", log: log, full: other}
					b := &repairDecode{Decode: rig.dec[1], w: rig.dw[1], name: "b", log: log}
					if how == "preempted" {
						a.preemptAfter = after
					} else {
						a.revoke = true
					}
					rp := &repairPairs{pairs: []Pair{{Prefill: rig.pre[0], Decode: a}}, names: []string{"a"}, told: map[string][][2]error{}}
					if other {
						rp.pairs = append(rp.pairs, Pair{Prefill: rig.pre[1], Decode: b})
						rp.names = append(rp.names, "b")
					}
					d, err := NewDisaggregatedPairs(DisaggConfig{Model: "toy", Vocab: m.Vocab(), Fingerprint: FingerprintOf(m), Context: 160, MaxRetries: -1}, rp)
					if err != nil {
						t.Fatal(err)
					}
					defer closeWithin(t, d)
					// A request left waiting for room on the full worker
					// would wait for ever: the client leaves after a while
					// (the request is a few milliseconds of work).
					ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
					defer cancel()
					st, err := d.Submit(ctx, r)
					if err != nil {
						t.Fatal(err)
					}
					got := collect(t, st)
					if got.final.Err != nil || !slices.Equal(got.tokens, want) {
						t.Fatalf("got %v (%v), want %v", got.tokens, got.final.Err, want)
					}
					log.mu.Lock()
					res := slices.Clone(log.reserves)
					log.mu.Unlock()
					// The resumed handoff's prompt is the prompt plus every
					// token sent (a revoked one sent none).
					resumed := len(r.Prompt)
					if how == "preempted" {
						resumed += after
					}
					second := "a"
					if other {
						second = "b"
					}
					if len(res) != 2 || res[0].worker != "a" || res[0].prompt != len(r.Prompt) || res[1].worker != second || res[1].prompt != resumed {
						t.Fatalf("reserves %+v: want one on a of %d tokens, then one on %s of %d", res, len(r.Prompt), second, resumed)
					}
					if res[0].id == res[1].id {
						t.Fatalf("the new handoff reuses the old id %x: an id names one handoff on every worker (the old one's late abort or prefill would be taken for the new one)", res[0].id)
					}
					// Each pair is told once that its attempt ended, with no
					// failure of decode (a revoked handoff's prefill ends
					// with the abort, which is no failure of the worker).
					wantTold := map[string]int{"a": 1}
					if other {
						wantTold["b"] = 1
					}
					// The last attempt's Done runs on the request's goroutine
					// after the stream's final result: wait for it (a copy
					// taken under the lock, not the live map).
					var avoids [][]*Pair
					told := map[string][][2]error{}
					for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
						rp.mu.Lock()
						n := 0
						avoids = slices.Clone(rp.avoids)
						clear(told)
						for name, errs := range rp.told {
							told[name] = slices.Clone(errs)
							n += len(errs)
						}
						rp.mu.Unlock()
						if n >= len(wantTold) || time.Now().After(deadline) {
							break
						}
					}
					if len(avoids) != 2 || avoids[0] != nil || avoids[1] != nil {
						t.Fatalf("the pairer was asked %d times avoiding %v: want twice, avoiding nothing (not a failure)", len(avoids), avoids)
					}
					for name, errs := range told {
						for _, e := range errs {
							if e[1] != nil || e[0] != nil && !(how == "revoked" && name == "a" && errors.Is(e[0], handoff.ErrAborted)) {
								t.Fatalf("pair %s told %v, want no failure", name, e)
							}
						}
						if len(errs) != wantTold[name] {
							t.Fatalf("pair %s told %d times, want %d", name, len(errs), wantTold[name])
						}
					}
					if len(told) != len(wantTold) {
						t.Fatalf("pairs told %v, want %v", told, wantTold)
					}
					switch how {
					case "preempted":
						if d.Migrated() != 0 || d.Revoked() != 0 {
							t.Fatalf("%d migrations, %d revocations counted for a preemption", d.Migrated(), d.Revoked())
						}
					case "revoked":
						if d.Revoked() != 1 || rig.dw[0].SchedStats().Revoked != 1 {
							t.Fatalf("router counted %d revocations, decode %d; want 1", d.Revoked(), rig.dw[0].SchedStats().Revoked)
						}
					}
					waitDrained(t, rig.pools...)
				})
			}
		}
	}
}
