package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"sluice/internal/kv"
)

// --kv-verify sample end to end: a request decoding over cached prompt
// pages; one cached page's bytes are changed behind the pool's back (a
// write into the pool's shared file, as a stray one-sided writer would).
// The per-step sweep finds it within ceil(pages/VerifyPages) steps and the
// request fails with an integrity error at the next step: it never
// finishes on the changed bytes. Steps are gated, so the count is exact.
func TestVerifySampleFailsReaderOfCorruptCachedPage(t *testing.T) {
	const pages = 32
	g := &stepGated{Runtime: defaultRuntime(t)}
	file := filepath.Join(t.TempDir(), "kv")
	cfg := Config{Model: g, Context: 256, PoolPages: pages, PageSize: 16, Order: kv.LIFO, ChunkTokens: 64, StepTokens: 128,
		PrefixCache: true, Verify: kv.VerifySample, VerifyPages: 1, VerifyShare: 1, SharedFile: file}
	col, err := NewColocated(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, col)
	pool := col.Pool()
	base := make([]int32, 83)
	for i := range base {
		base[i] = int32((i*37 + 1) % g.Vocab())
	}
	run1(t, col, &Request{ID: "a", Tenant: "t", Prompt: base[:80], MaxTokens: 1})
	cached := pool.CachedPagesForTest()
	if len(cached) != 5 {
		t.Fatalf("%d cached pages, want 5", len(cached))
	}

	gate := make(chan struct{})
	g.gate.Store(&gate)
	defer g.gate.Store(nil)
	s, err := col.Submit(context.Background(), &Request{ID: "b", Tenant: "t", Prompt: base, MaxTokens: 160, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	gate <- struct{}{} // the uncached tail and the first token
	if ev := <-s.Events(); ev.Err != nil || ev.Done {
		t.Fatalf("first event: %+v", ev)
	}
	if st := pool.Stats(); st.CacheReaders != 5 {
		t.Fatalf("b reads %d cached pages, want 5", st.CacheReaders)
	}

	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var b [4]byte
	off := pool.SharedOffset(kv.PageRef{Page: cached[2]}) + 40
	if _, err := f.ReadAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint32(b[:], binary.LittleEndian.Uint32(b[:])^1) // one bit
	if _, err := f.WriteAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	f.Close()

	bound := pages + 1 // sweeps to reach the page, then the step that reads it
	steps, tokens := 0, 0
	var final Event
wait:
	for {
		select {
		case gate <- struct{}{}:
			if steps++; steps > bound+1 {
				t.Fatalf("the corrupt page was not found within %d steps (%d tokens decoded over it)", bound, tokens)
			}
		case ev := <-s.Events():
			if ev.Err != nil || ev.Done {
				final = ev
				break wait
			}
			tokens++
		}
	}
	var e *Error
	if !errors.As(final.Err, &e) || e.Code != CodeIntegrity {
		t.Fatalf("b ended with %+v, want an %s error", final, CodeIntegrity)
	}
	if steps > bound {
		t.Fatalf("found after %d steps, bound %d", steps, bound)
	}
	if n := pool.Stats().Violations[kv.KindDigestMismatch]; n != 1 {
		t.Fatalf("%d digest mismatches counted, want 1", n)
	}
	// The changed page is found by no lookup any more.
	g.gate.Store(nil)
	if c := run1(t, col, &Request{ID: "c", Tenant: "t", Prompt: base, MaxTokens: 1}); c.final.Usage.CachedTokens >= 80 {
		t.Fatalf("a later request still hit every cached page (%d tokens)", c.final.Usage.CachedTokens)
	}
	t.Logf("found after %d steps (bound %d), %d tokens decoded meanwhile", steps, bound, tokens)
}

// The sweep's time budget: a step sweeps only while the time spent
// sweeping is within VerifyShare of the forward steps' time; --kv-verify
// all is never held back; hit does not sweep; a driven batch (no clock)
// sweeps every step.
func TestVerifySweepTimeBudget(t *testing.T) {
	mk := func(v kv.Verify) *kv.Pool {
		p, err := kv.New(kv.Config{Geometry: kv.Geometry{Layers: 1, KVDim: 4, PageSize: 4}, Pages: 4, Verify: v})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		o := kv.Owner{Tenant: "t", ID: kv.ID{1}}
		refs, _ := p.Reserve(o, 4)
		for _, r := range refs {
			_ = p.MarkWritten(o, r, 4)
		}
		_ = p.Seal(o, refs)
		return p
	}
	for _, tc := range []struct {
		mode         kv.Verify
		spent, fwd   int64
		share        float64
		wantVerified uint64
		driven       bool // no clock: a sweep every step
	}{
		{kv.VerifySample, 10_000, 1_000_000, 0, 0, false},    // 1% spent > 0.5%: skip
		{kv.VerifySample, 1_000, 1_000_000, 0, 1, false},     // 0.1%: sweep one page
		{kv.VerifySample, 10_000, 1_000_000, 0.02, 1, false}, // a larger share allows it
		{kv.VerifySample, 10_000, 1_000_000, 1, 1, false},    // share 1: every step
		{kv.VerifyAll, 10_000, 1_000_000, 0, 4, false},       // all: unbounded
		{kv.VerifyHit, 0, 1_000_000, 0, 0, false},            // no sweep
	} {
		p := mk(tc.mode)
		s := &batch{cfg: Config{VerifyShare: tc.share}, pool: kvPool{p}, clock: time.Now}
		if tc.driven {
			s.clock = nil
		}
		s.verifyTime.Store(tc.spent)
		s.fwdTime.Store(tc.fwd)
		s.verify()
		if got := p.Stats().Verified; got != tc.wantVerified {
			t.Errorf("%v, %d ns spent of %d, share %v: %d pages verified, want %d", tc.mode, tc.spent, tc.fwd, tc.share, got, tc.wantVerified)
		}
	}
}
