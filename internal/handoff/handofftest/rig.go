// Package handofftest wires real kv pools, a Receiver and a Sender source
// together for the handoff's transport tests and benchmarks.
package handofftest

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/kv"
	"sluice/internal/model"
)

// Clock is a settable clock for the Server.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *Clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

// Advance moves the clock.
func (c *Clock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// Options shape a Rig.
type Options struct {
	Geometry kv.Geometry // default 2 layers, KV dim 8, 4 slots
	Pages    int         // per pool, default 64
	// SharedFile backs the decode pool with a MAP_SHARED file (shm transport).
	SharedFile string
	Lease      time.Duration // default 1 s (of the fake clock)
	Safeguards handoff.Safeguards
	// Model is the decode side's model fingerprint (I13; zero: none).
	Model model.Fingerprint
}

// Rig is a decode pool behind a Receiver/Server and a prefill pool.
type Rig struct {
	Geo     kv.Geometry
	Decode  *kv.Pool
	Prefill *kv.Pool
	Recv    *handoff.Receiver
	Server  *handoff.Server
	Clock   *Clock
	Dec     *Decoder
}

// New builds a Rig; t.Cleanup closes the pools.
func New(t testing.TB, o Options) *Rig {
	t.Helper()
	if o.Geometry.Layers == 0 {
		o.Geometry = kv.Geometry{Layers: 2, KVDim: 8, PageSize: 4}
	}
	if o.Pages == 0 {
		o.Pages = 64
	}
	if o.Lease == 0 {
		o.Lease = time.Second
	}
	dp, err := kv.New(kv.Config{Geometry: o.Geometry, Pages: o.Pages, Order: kv.LIFO, Lease: o.Lease, SharedFile: o.SharedFile})
	if err != nil {
		t.Fatal(err)
	}
	pp, err := kv.New(kv.Config{Geometry: o.Geometry, Pages: o.Pages, Order: kv.LIFO, Lease: o.Lease})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close(); pp.Close() })
	clk := &Clock{now: time.Unix(1_000_000, 0)}
	recv := handoff.NewReceiver(handoff.ReceiverConfig{PageSize: o.Geometry.PageSize, OneSided: o.SharedFile != "",
		Lease: o.Lease, Safeguards: o.Safeguards, Model: o.Model}, dp)
	dec := &Decoder{pool: dp, accepted: map[kv.ID]*handoff.Accepted{}, ended: map[kv.ID]error{}}
	return &Rig{Geo: o.Geometry, Decode: dp, Prefill: pp, Recv: recv, Clock: clk, Dec: dec,
		Server: handoff.NewServer(recv, clk.Now, dec)}
}

// ID returns a deterministic handoff id.
func ID(n int) kv.ID {
	h := sha256.Sum256([]byte(fmt.Sprint("handoff", n)))
	var id kv.ID
	copy(id[:], h[:])
	return id
}

// Sequence prefills a fake sequence of tokens into the prefill pool: every
// valid slot holds bytes derived from (id, seed), never zero.
func (r *Rig) Sequence(t testing.TB, id kv.ID, tenant string, tokens int, seed byte) *handoff.PoolSource {
	t.Helper()
	g := r.Geo
	o := kv.Owner{Tenant: tenant, ID: id}
	n := (tokens + g.PageSize - 1) / g.PageSize
	refs, err := r.Prefill.Reserve(o, n)
	if err != nil {
		t.Fatal(err)
	}
	img := make([]byte, g.PageBytes())
	for b, ref := range refs {
		slots := min(g.PageSize, tokens-b*g.PageSize)
		for i := range img {
			img[i] = seed ^ byte(i*31+b*7) | 0x10
		}
		if err := r.Prefill.WritePage(o, ref, slots, img); err != nil {
			t.Fatal(err)
		}
	}
	return &handoff.PoolSource{Pool: r.Prefill, Owner: o, Pages: refs, Tokens: tokens}
}

// ReleaseSource frees a sequence's prefill pages.
func (r *Rig) ReleaseSource(t testing.TB, s *handoff.PoolSource) {
	t.Helper()
	if err := r.Prefill.Release(s.Owner, s.Pages); err != nil {
		t.Fatal(err)
	}
}

// SameKV reports whether the accepted handoff's pages hold exactly the
// source's KV (digests of both pools over the prompt).
func (r *Rig) SameKV(a *handoff.Accepted, s *handoff.PoolSource) error {
	n := (a.Tokens + r.Geo.PageSize - 1) / r.Geo.PageSize
	d1, err := r.Decode.Digest(a.Owner, a.Pages[:n], a.Tokens)
	if err != nil {
		return err
	}
	d2, err := s.Digest()
	if err != nil {
		return err
	}
	if string(d1[:]) != string(d2) {
		return fmt.Errorf("decode KV differs from prefill KV")
	}
	return nil
}

// CheckDrained checks both pools are entirely free, after expiring leases.
func (r *Rig) CheckDrained(t testing.TB) {
	t.Helper()
	r.Clock.Advance(time.Hour)
	r.Server.Tick()
	r.Prefill.Expire(r.Clock.Now())
	if err := r.Decode.CheckDrained(); err != nil {
		t.Fatalf("decode pool: %v", err)
	}
	if err := r.Prefill.CheckDrained(); err != nil {
		t.Fatalf("prefill pool: %v", err)
	}
}

// Decoder is a stand-in decode worker: it records accepted handoffs and
// streams FirstToken then Extra counting tokens; Release frees the pages.
type Decoder struct {
	pool     *kv.Pool
	mu       sync.Mutex
	accepted map[kv.ID]*handoff.Accepted
	ended    map[kv.ID]error
	Extra    int
}

func (d *Decoder) Accept(a *handoff.Accepted) {
	d.mu.Lock()
	d.accepted[a.Handoff] = a
	d.mu.Unlock()
}

// Ended records the end; after Accept it releases the pages (an abort of
// a decoding request ends it the normal way).
func (d *Decoder) Ended(id kv.ID, err error) {
	d.mu.Lock()
	d.ended[id] = err
	a := d.accepted[id]
	delete(d.accepted, id)
	d.mu.Unlock()
	if a != nil {
		_ = d.pool.Release(a.Owner, a.Pages)
	}
}

// Accepted returns the accepted handoff, if any.
func (d *Decoder) Accepted(id kv.ID) *handoff.Accepted {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.accepted[id]
}

// Release frees an accepted handoff's pages (the decoder's normal path).
func (d *Decoder) Release(id kv.ID) error {
	d.mu.Lock()
	a := d.accepted[id]
	delete(d.accepted, id)
	d.mu.Unlock()
	if a == nil {
		return fmt.Errorf("handoff not accepted")
	}
	return d.pool.Release(a.Owner, a.Pages)
}

func (d *Decoder) Stream(ctx context.Context, id kv.ID, p handoff.StreamParams) (handoff.TokenStream, error) {
	d.mu.Lock()
	a := d.accepted[id]
	err := d.ended[id]
	d.mu.Unlock()
	if a == nil {
		if err == nil {
			err = handoff.ErrUnknownHandoff.With("not committed")
		}
		return nil, err
	}
	toks := []handoff.Token{{ID: a.FirstToken}}
	for i := 0; i < d.Extra; i++ {
		toks = append(toks, handoff.Token{ID: a.FirstToken + int32(i) + 1})
	}
	toks = append(toks, handoff.Token{Done: true, Finish: "length", PromptTokens: a.Tokens, CompletionTokens: len(toks)})
	// Pages are released by the test (Release) in the goroutine that read
	// them, so the race detector sees the order: it cannot see through TCP.
	return &sliceStream{toks: toks}, nil
}

func (d *Decoder) Cancel(ctx context.Context, id kv.ID) error { return nil }

type sliceStream struct {
	toks []handoff.Token
	i    int
	done func()
}

func (s *sliceStream) Recv() (handoff.Token, error) {
	if s.i >= len(s.toks) {
		return handoff.Token{}, io.EOF
	}
	t := s.toks[s.i]
	s.i++
	if s.i == len(s.toks) && s.done != nil {
		s.done()
		s.done = nil
	}
	return t, nil
}

func (s *sliceStream) Close() error { return nil }
