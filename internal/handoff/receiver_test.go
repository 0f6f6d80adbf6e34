package handoff

import (
	"errors"
	"strings"
	"testing"
	"time"

	"sluice/internal/kv"
)

const (
	tPS  = 4 // slots per page
	tBPS = 8 // bytes per slot
)

var t0 = time.Unix(1000, 0)

func hid(b byte) kv.ID { return kv.ID{b, 0xAA, b} }

type rig struct {
	t    *testing.T
	pool *memPool
	r    *Receiver
	res  *Reservation
	src  *seqSource
}

func newRig(t *testing.T, cfg ReceiverConfig, prompt int) *rig {
	t.Helper()
	cfg.PageSize = tPS
	if cfg.Lease == 0 {
		cfg.Lease = time.Second
	}
	p := newMemPool(32, tPS, tPS*tBPS)
	g := &rig{t: t, pool: p, r: NewReceiver(cfg, p)}
	res, err := g.r.Reserve(t0, &Reserve{Handoff: hid(1), Tenant: "acme", PromptTokens: prompt, MaxTokens: 3})
	if err != nil {
		t.Fatalf("reserve: %v", err)
	}
	g.res, g.src = res, newSeqSource(prompt, tPS, tBPS, 1)
	return g
}

// write builds the honest write of block b.
func (g *rig) write(b int) PageWrite {
	d, n, _ := g.src.Page(b)
	return PageWrite{Handoff: g.res.Handoff, Block: b, Page: g.res.Pages[b], Slots: n,
		Data: append([]byte(nil), d...), Checksum: Checksum(d)}
}

func (g *rig) commit() *Commit {
	d, _ := g.src.Digest()
	return &Commit{Handoff: g.res.Handoff, Tokens: g.res.ExpectTokens, Digest: d, FirstToken: 42}
}

func TestReceiverHonestHandoff(t *testing.T) {
	g := newRig(t, ReceiverConfig{}, 10) // 3 prompt pages (4+4+2), 4 pages with max_tokens 3
	if len(g.res.Pages) != 3 || g.res.ExpectTokens != 10 || g.res.PageSize != tPS {
		t.Fatalf("reservation %+v, want 3 pages, 10 tokens", g.res)
	}
	for b := 0; b < 3; b++ {
		if err := g.r.Write(t0, []PageWrite{g.write(b)}); err != nil {
			t.Fatalf("write %d: %v", b, err)
		}
	}
	acc, err := g.r.Commit(t0, g.commit())
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	if acc.Tokens != 10 || acc.FirstToken != 42 || len(acc.Pages) != 4 || acc.Owner.Tenant != "acme" {
		t.Fatalf("accepted %+v", acc)
	}
	// The decoder reads what prefill wrote, byte for byte.
	for b := 0; b < 3; b++ {
		got, _, _ := g.pool.PageData(acc.Owner, acc.Pages[b])
		if string(got) != string(g.src.pages[b]) {
			t.Fatalf("block %d differs after transfer", b)
		}
	}
	// A late write after the commit is refused and counted.
	if err := g.r.Write(t0, []PageWrite{g.write(0)}); !errors.Is(err, ErrState) {
		t.Fatalf("write after commit: %v, want ErrState", err)
	}
	if s := g.r.Stats(); s.LateWrites != 1 || s.Accepted != 1 || s.Live != 0 {
		t.Fatalf("stats %+v", s)
	}
	if err := g.pool.Release(acc.Owner, acc.Pages); err != nil {
		t.Fatal(err)
	}
	if err := g.pool.CheckDrained(); err != nil {
		t.Fatal(err)
	}
}

// Every verification failure of I5/I3 fails the handoff closed: typed
// error, metric, pages back in the pool scrubbed, later messages refused.
func TestReceiverVerificationFailures(t *testing.T) {
	other := kv.PageRef{}
	cases := []struct {
		name string
		// run returns the first error the receiver reported.
		run  func(g *rig) error
		want *Error
	}{
		{"incident: one page then commit claiming all tokens", func(g *rig) error {
			if err := g.r.Write(t0, []PageWrite{g.write(0)}); err != nil {
				return err
			}
			_, err := g.r.Commit(t0, g.commit())
			return err
		}, ErrCountMismatch},
		{"commit claims fewer tokens than reserved", func(g *rig) error {
			for b := 0; b < 3; b++ {
				if err := g.r.Write(t0, []PageWrite{g.write(b)}); err != nil {
					return err
				}
			}
			c := g.commit()
			c.Tokens = 1
			_, err := g.r.Commit(t0, c)
			return err
		}, ErrCountMismatch},
		{"block written twice", func(g *rig) error {
			return g.r.Write(t0, []PageWrite{g.write(0), g.write(1), g.write(1)})
		}, ErrCoverage},
		{"digest mismatch", func(g *rig) error {
			for b := 0; b < 3; b++ {
				if err := g.r.Write(t0, []PageWrite{g.write(b)}); err != nil {
					return err
				}
			}
			c := g.commit()
			c.Digest = append([]byte(nil), c.Digest...)
			c.Digest[0] ^= 1
			_, err := g.r.Commit(t0, c)
			return err
		}, ErrDigestMismatch},
		{"digest missing", func(g *rig) error {
			for b := 0; b < 3; b++ {
				if err := g.r.Write(t0, []PageWrite{g.write(b)}); err != nil {
					return err
				}
			}
			c := g.commit()
			c.Digest = nil
			_, err := g.r.Commit(t0, c)
			return err
		}, ErrDigestMissing},
		{"data tampered after checksum", func(g *rig) error {
			w := g.write(0)
			w.Data[3] ^= 0x40
			return g.r.Write(t0, []PageWrite{w})
		}, ErrChecksum},
		{"stale generation", func(g *rig) error {
			w := g.write(1)
			w.Page.Gen--
			return g.r.Write(t0, []PageWrite{w})
		}, ErrBadWrite},
		{"page of another handoff", func(g *rig) error {
			w := g.write(1)
			w.Page = other // filled in below with the other handoff's page
			return g.r.Write(t0, []PageWrite{w})
		}, ErrBadWrite},
		{"short slot count", func(g *rig) error {
			w := g.write(0)
			w.Slots = 1
			return g.r.Write(t0, []PageWrite{w})
		}, ErrBadWrite},
		{"block outside the reservation", func(g *rig) error {
			w := g.write(2)
			w.Block = 3
			return g.r.Write(t0, []PageWrite{w})
		}, ErrBadWrite},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := newRig(t, ReceiverConfig{}, 10)
			// A second tenant's live handoff whose page an attacker names.
			ores, err := g.r.Reserve(t0, &Reserve{Handoff: hid(2), Tenant: "globex", PromptTokens: 4, MaxTokens: 0})
			if err != nil {
				t.Fatal(err)
			}
			other = ores.Pages[0]
			err = tc.run(g)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %s", err, tc.want.Code)
			}
			var he *Error
			if !errors.As(err, &he) || he.Msg == "" {
				t.Fatalf("error %v is not a *handoff.Error with a message", err)
			}
			if s := g.r.Stats(); s.Failed[tc.want.Code] != 1 || s.Accepted != 0 {
				t.Fatalf("stats %+v, want one %s failure", s, tc.want.Code)
			}
			// Fail closed: the handoff is over and its late messages are refused and counted.
			if err := g.r.Write(t0, []PageWrite{g.write(2)}); !errors.Is(err, ErrAborted) {
				t.Fatalf("write after failure: %v, want ErrAborted", err)
			}
			if _, err := g.r.Commit(t0, g.commit()); !errors.Is(err, ErrAborted) {
				t.Fatalf("commit after failure: %v, want ErrAborted", err)
			}
			if s := g.r.Stats(); s.LateWrites != 1 {
				t.Fatalf("late writes %d, want 1", s.LateWrites)
			}
			// The other tenant's page was never touched.
			if d, _, _ := g.pool.PageData(kv.Owner{Tenant: "globex", ID: hid(2)}, other); string(d) != string(make([]byte, len(d))) {
				t.Fatal("another handoff's page was written")
			}
			if !g.r.Abort(t0, hid(2), "test over") {
				t.Fatal("abort of the live second handoff reported not live")
			}
			if err := g.pool.CheckDrained(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestReceiverRefusals(t *testing.T) {
	g := newRig(t, ReceiverConfig{}, 10)
	if _, err := g.r.Reserve(t0, &Reserve{Handoff: hid(1), Tenant: "acme", PromptTokens: 4}); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("duplicate reserve: %v", err)
	}
	if _, err := g.r.Reserve(t0, &Reserve{Handoff: hid(3), Tenant: "acme", PromptTokens: 1000}); !errors.Is(err, ErrRefused) {
		t.Fatalf("oversized reserve: %v", err)
	}
	if _, err := g.r.Reserve(t0, &Reserve{Handoff: hid(3), Tenant: "acme", PromptTokens: 0}); !errors.Is(err, ErrRefused) {
		t.Fatalf("empty prompt reserve: %v", err)
	}
	if err := g.r.Write(t0, []PageWrite{{Handoff: hid(9)}}); !errors.Is(err, ErrUnknownHandoff) {
		t.Fatalf("unknown handoff write: %v", err)
	}
	if _, err := g.r.Commit(t0, &Commit{Handoff: hid(9)}); !errors.Is(err, ErrUnknownHandoff) {
		t.Fatalf("unknown handoff commit: %v", err)
	}
	// The refused reservation took nothing: only handoff 1's 4 pages are out.
	if n := len(g.pool.free); n != 32-4 {
		t.Fatalf("%d free pages, want 28", n)
	}
}

// I6: with a one-sided writer the pages of an aborted handoff stay out of
// use until the drain acknowledgement or the lease, whichever comes first.
func TestReceiverOneSidedAbortQuarantines(t *testing.T) {
	for _, how := range []string{"drain", "lease"} {
		t.Run(how, func(t *testing.T) {
			g := newRig(t, ReceiverConfig{OneSided: true, Lease: 5 * time.Second}, 10)
			// The writer places block 0 directly into pool memory, then notifies.
			d, n, _ := g.src.Page(0)
			copy(g.pool.data[g.res.Pages[0].Page], d)
			if err := g.r.Write(t0, []PageWrite{{Handoff: hid(1), Block: 0, Page: g.res.Pages[0], Slots: n,
				Checksum: Checksum(d), Placed: true}}); err != nil {
				t.Fatal(err)
			}
			g.r.Abort(t0, hid(1), "client went away")
			g.r.Tick(t0.Add(4 * time.Second))
			if g.pool.CheckDrained() == nil {
				t.Fatal("pages freed while the one-sided writer may still write (I6)")
			}
			// A stale placed write lands in quarantined memory and is dropped.
			if err := g.r.Write(t0, []PageWrite{{Handoff: hid(1), Block: 1, Page: g.res.Pages[1], Slots: tPS, Placed: true}}); !errors.Is(err, ErrAborted) {
				t.Fatalf("late placed write: %v", err)
			}
			if how == "drain" {
				if err := g.r.Drained(t0, hid(1)); err != nil {
					t.Fatal(err)
				}
			} else {
				g.r.Tick(t0.Add(5 * time.Second))
			}
			if err := g.pool.CheckDrained(); err != nil {
				t.Fatal(err)
			}
			if s := g.r.Stats(); s.LateWrites != 1 || s.Aborted != 1 {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}

func TestReceiverPlacedChecksum(t *testing.T) {
	g := newRig(t, ReceiverConfig{OneSided: true}, 4)
	d, n, _ := g.src.Page(0)
	copy(g.pool.data[g.res.Pages[0].Page], d)
	g.pool.data[g.res.Pages[0].Page][5] ^= 1 // torn or foreign bytes
	err := g.r.Write(t0, []PageWrite{{Handoff: hid(1), Block: 0, Page: g.res.Pages[0], Slots: n, Checksum: Checksum(d), Placed: true}})
	if !errors.Is(err, ErrChecksum) {
		t.Fatalf("got %v, want ErrChecksum", err)
	}
}

// Each safeguard switched off alone lets its own attack through that layer,
// and the remaining layers still stop the incident's short transfer.
func TestReceiverSafeguardsAlone(t *testing.T) {
	short := func(g *rig) error {
		if err := g.r.Write(t0, []PageWrite{g.write(0)}); err != nil {
			return err
		}
		_, err := g.r.Commit(t0, g.commit())
		return err
	}
	for _, tc := range []struct {
		sg   Safeguards
		want *Error
	}{
		{Safeguards{}, ErrCountMismatch},
		{Safeguards{NoCount: true}, ErrCoverage},
		{Safeguards{NoCount: true, NoCoverage: true}, ErrDigestMismatch},
		{Safeguards{NoCoverage: true, NoDigest: true}, ErrCountMismatch},
	} {
		g := newRig(t, ReceiverConfig{Safeguards: tc.sg}, 10)
		if err := short(g); !errors.Is(err, tc.want) {
			t.Errorf("%+v: got %v, want %s", tc.sg, err, tc.want.Code)
		}
	}
	// All of count, coverage and digest off: the short transfer is accepted,
	// which is exactly the incident. This proves the switches really switch.
	g := newRig(t, ReceiverConfig{Safeguards: Safeguards{NoCount: true, NoCoverage: true, NoDigest: true}}, 10)
	if err := short(g); err != nil {
		t.Fatalf("with every commit check off the short transfer should pass (the incident), got %v", err)
	}
	// Missing digest with only the digest check on.
	g = newRig(t, ReceiverConfig{Safeguards: Safeguards{NoCount: true, NoCoverage: true}}, 4)
	_ = g.r.Write(t0, []PageWrite{g.write(0)})
	c := g.commit()
	c.Digest = nil
	if _, err := g.r.Commit(t0, c); !errors.Is(err, ErrDigestMissing) {
		t.Fatalf("missing digest alone: %v", err)
	}
	// Reservation match off: the pool's owner tag alone refuses another handoff's page (I3).
	g = newRig(t, ReceiverConfig{Safeguards: Safeguards{NoReservationMatch: true}}, 10)
	ores, _ := g.r.Reserve(t0, &Reserve{Handoff: hid(2), Tenant: "globex", PromptTokens: 4})
	w := g.write(0)
	w.Page = ores.Pages[0]
	if err := g.r.Write(t0, []PageWrite{w}); !errors.Is(err, ErrBadWrite) || !strings.Contains(err.Error(), "foreign_owner") {
		t.Fatalf("foreign page with reservation match off: %v", err)
	}
}

// Ended handoffs are remembered for Tombstone so late messages are counted,
// then forgotten so the map does not grow without bound.
func TestReceiverTombstones(t *testing.T) {
	g := newRig(t, ReceiverConfig{Tombstone: time.Minute}, 4)
	g.r.Abort(t0, hid(1), "x")
	if err := g.r.Write(t0, []PageWrite{g.write(0)}); !errors.Is(err, ErrAborted) {
		t.Fatalf("late write: %v", err)
	}
	g.r.Tick(t0.Add(time.Minute))
	if err := g.r.Write(t0, []PageWrite{g.write(0)}); !errors.Is(err, ErrUnknownHandoff) {
		t.Fatalf("write after the tombstone expired: %v", err)
	}
	if len(g.r.live) != 0 {
		t.Fatalf("%d handoffs remembered", len(g.r.live))
	}
}
