package engine

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/handoff/tcp"
	"sluice/internal/kv"
)

// dialTap dials for a Redialer and keeps the latest connection, so a
// test can cut it as a failing network would.
type dialTap struct {
	mu    sync.Mutex
	last  net.Conn
	dials int
}

func (d *dialTap) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err == nil {
		d.mu.Lock()
		d.last, d.dials = c, d.dials+1
		d.mu.Unlock()
	}
	return c, err
}

func (d *dialTap) cut() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.last.Close()
}

func (d *dialTap) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dials
}

// cutPrefill is the prefill worker behind its server: while cuts last,
// a call cuts the router's connection to it before the worker sees the
// prompt.
type cutPrefill struct {
	w    handoff.Prefill
	cuts atomic.Int32
	tap  *dialTap
}

func (c *cutPrefill) Prefill(ctx context.Context, r *handoff.PrefillRequest) (*handoff.PrefillResult, error) {
	if c.cuts.Add(-1) >= 0 {
		c.tap.cut()
	}
	return c.w.Prefill(ctx, r)
}

// cutDecode is the decode worker behind its server: while cuts last, a
// stream the router opens cuts the router's connection to it.
type cutDecode struct {
	handoff.Decode
	cuts atomic.Int32
	tap  *dialTap
}

func (c *cutDecode) Stream(ctx context.Context, id kv.ID, p handoff.StreamParams) (handoff.TokenStream, error) {
	if c.cuts.Add(-1) >= 0 {
		c.tap.cut()
	}
	return c.Decode.Stream(ctx, id, p)
}

// One prefill and one decode worker (no other pair to retry on), and the
// router's connection to one of them lost before the request's first
// token (a connection declared dead under load): the request is retried
// once on the same pair, with a new handoff and reservation over a fresh
// connection, and ends with the reference output (not 502
// handoff_failed). The lost handoff is aborted (decode accepts one
// commit) and both pools drain. The same failure once more fails the
// request (a retry on the same pair happens once).
func TestLonePairRetriesAfterLostConnection(t *testing.T) {
	for _, side := range []string{"prefill", "decode"} {
		t.Run(side, func(t *testing.T) {
			m := newToy()
			tc := tcp.Config{Secret: []byte("engine-test-shared-secret-0123456789")}
			var closers []func()
			defer func() {
				for i := len(closers) - 1; i >= 0; i-- {
					closers[i]()
				}
			}()
			dw, err := NewDecodeWorker(toyConfig(m, 64))
			if err != nil {
				t.Fatal(err)
			}
			closers = append(closers, dw.Close)
			var tapP, tapD dialTap
			cd := &cutDecode{Decode: dw, tap: &tapD}
			daddr, stop := serveTCP(t, tc, cd, nil)
			closers = append(closers, stop)
			pd := dialTCP(t, tc, daddr)
			closers = append(closers, func() { pd.Close() })
			pw, err := NewPrefillWorker(toyConfig(m, 64), pd)
			if err != nil {
				t.Fatal(err)
			}
			closers = append(closers, pw.Close)
			cp := &cutPrefill{w: pw, tap: &tapP}
			cuts := &cp.cuts
			if side == "decode" {
				cuts = &cd.cuts
			}
			cuts.Store(1)
			paddr, stop2 := serveTCP(t, tc, nil, cp)
			closers = append(closers, stop2)
			pc, dc := tc, tc
			pc.DialContext, dc.DialContext = tapP.dial, tapD.dial
			rp, rd := tcp.NewRedialer(paddr, pc), tcp.NewRedialer(daddr, dc)
			closers = append(closers, func() { rp.Close(); rd.Close() })
			eng, err := NewDisaggregated(DisaggConfig{Model: "toy", Vocab: m.vocab, Context: EffectiveContext(pw.Context(), dw.Context())}, rp, rd)
			if err != nil {
				t.Fatal(err)
			}
			closers = append(closers, func() { closeWithin(t, eng) })

			p := prompt(3, 40)
			s, err := eng.Submit(context.Background(), &Request{Tenant: "a", Prompt: p, MaxTokens: 5})
			if err != nil {
				t.Fatalf("submit: %v", err)
			}
			res := collect(t, s)
			if want := toyReference(m, p, 5, false); !slices.Equal(res.tokens, want) || !res.final.Done {
				t.Fatalf("the request after its connection was lost: %v %v, want %v", res.tokens, res.final.Err, want)
			}
			if n := eng.SameRetried(); n != 1 {
				t.Fatalf("retried on the same pair %d times, want 1", n)
			}
			tap := &tapP
			if side == "decode" {
				tap = &tapD
			}
			if n := tap.count(); n != 2 {
				t.Fatalf("the router dialled the %s worker %d times, want 2 (the retry on a fresh connection)", side, n)
			}
			if st := dw.ReceiverStats(); st.Accepted != 1 {
				t.Fatalf("decode accepted %d commits, want 1: %+v", st.Accepted, st)
			}
			waitDrained(t, pw.Pool(), dw.Pool())

			// Lost twice: the request fails with the link's error; it
			// is never retried on the same pair a second time.
			cuts.Store(2)
			res, err = submitEnd(t, eng, &Request{Tenant: "a", Prompt: p, MaxTokens: 5})
			if res.final.Done || len(res.tokens) != 0 {
				t.Fatalf("a request whose connection was lost twice: %v %+v", res.tokens, res.final)
			}
			if !errors.Is(err, handoff.ErrTransport) {
				t.Fatalf("a request whose connection was lost twice: %v, want the transport error", err)
			}
			if n := eng.SameRetried(); n != 2 {
				t.Fatalf("retried on the same pair %d times over two requests, want 2", n)
			}
			waitDrained(t, pw.Pool(), dw.Pool())
		})
	}
}

// refuseOnce is a decode worker that refuses its first reservation with
// an answer of its own (not a link failure).
type refuseOnce struct {
	handoff.Decode
	n atomic.Int32
}

func (d *refuseOnce) Reserve(ctx context.Context, r *handoff.Reserve) (*handoff.Reservation, error) {
	if d.n.Add(1) == 1 {
		return nil, handoff.ErrDraining.With("the worker is shutting down")
	}
	return d.Decode.Reserve(ctx, r)
}

// A lone pair whose worker answered (a refusal) is not asked again: only
// a failure of the link is retried on the same pair; the worker's word
// would only come again.
func TestLonePairNotRetriedAfterRefusal(t *testing.T) {
	m := newToy()
	dw := toyDecodeWorker(t, m, 64)
	pw, err := NewPrefillWorker(toyConfig(m, 64), dw)
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	eng, err := NewDisaggregated(DisaggConfig{Model: "toy", Vocab: m.vocab, Context: EffectiveContext(pw.Context(), dw.Context())}, pw, &refuseOnce{Decode: dw})
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, eng)
	if _, err := submitEnd(t, eng, &Request{Tenant: "a", Prompt: prompt(3, 20), MaxTokens: 3}); !errors.Is(err, handoff.ErrDraining) {
		t.Fatalf("a lone pair's refusal: %v, want the refusal", err)
	}
	if n := eng.SameRetried(); n != 0 {
		t.Fatalf("retried on the same pair %d times after a refusal, want 0", n)
	}
	waitDrained(t, pw.Pool(), dw.Pool())
}

// forgedDigestOnce is the decode worker as the prefill worker sees it: the
// first commit carries a wrong digest (a corrupted prefill), which decode
// refuses (I5), ending its stream with the integrity failure.
type forgedDigestOnce struct {
	handoff.Decode
	n atomic.Int32
}

func (d *forgedDigestOnce) Commit(ctx context.Context, c *handoff.Commit) error {
	if d.n.Add(1) == 1 && len(c.Digest) > 0 {
		forged := *c
		forged.Digest = slices.Clone(c.Digest)
		forged.Digest[0] ^= 1
		return d.Decode.Commit(ctx, &forged)
	}
	return d.Decode.Commit(ctx, c)
}

// answerLost is the router's link to the prefill worker losing the
// worker's answer to a failed prompt (the connection ended as the reply
// was on its way): the router sees a transport error, not the worker's.
type answerLost struct{ w handoff.Prefill }

func (p answerLost) Prefill(ctx context.Context, r *handoff.PrefillRequest) (*handoff.PrefillResult, error) {
	res, err := p.w.Prefill(ctx, r)
	if err != nil {
		return nil, handoff.ErrTransport.With("connection closed")
	}
	return res, nil
}

// A handoff decode refused as failing verification (its stream ends with
// the integrity error) fails the request closed (I8), even when the
// prefill side's answer was lost to the link: the verification failure
// is not retried, on this pair or another, as a link failure would be.
func TestIntegrityFailureNotRetriedWhenPrefillAnswerLost(t *testing.T) {
	m := newToy()
	dw := toyDecodeWorker(t, m, 64)
	pw, err := NewPrefillWorker(toyConfig(m, 64), &forgedDigestOnce{Decode: dw})
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	eng, err := NewDisaggregated(DisaggConfig{Model: "toy", Vocab: m.vocab, Context: EffectiveContext(pw.Context(), dw.Context())}, answerLost{pw}, dw)
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, eng)
	s, err := eng.Submit(context.Background(), &Request{Tenant: "a", Prompt: prompt(3, 20), MaxTokens: 3})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	res := collect(t, s)
	if res.final.Done || len(res.tokens) != 0 || errorCode(res.final.Err) != CodeIntegrity {
		t.Fatalf("a handoff decode refused for its digest: tokens %v, final %+v, want the integrity failure", res.tokens, res.final)
	}
	if n := eng.SameRetried(); n != 0 {
		t.Fatalf("retried on the same pair %d times after a verification failure, want 0", n)
	}
	if st := dw.ReceiverStats(); st.Accepted != 0 {
		t.Fatalf("decode accepted %d commits after the verification failure, want 0: %+v", st.Accepted, st)
	}
	waitDrained(t, pw.Pool(), dw.Pool())
}

// answerLostAfterFirst is the router's link to the prefill worker lost
// after the commit: the worker committed (decode verified the handoff and
// sent its first token), and its answer, held until the router saw that
// token (release), never arrives: the router gets a transport error.
type answerLostAfterFirst struct {
	w       handoff.Prefill
	release chan struct{}
}

func (p answerLostAfterFirst) Prefill(ctx context.Context, r *handoff.PrefillRequest) (*handoff.PrefillResult, error) {
	if _, err := p.w.Prefill(ctx, r); err != nil {
		return nil, err
	}
	<-p.release
	return nil, handoff.ErrTransport.With("connection closed")
}

// abortSeen is decode as the router sees it, noting an abort.
type abortSeen struct {
	handoff.Decode
	once    sync.Once
	aborted chan struct{}
}

func (d *abortSeen) Abort(ctx context.Context, a *handoff.Abort) error {
	d.once.Do(func() { close(d.aborted) })
	return d.Decode.Abort(ctx, a)
}

// A prefill answer lost after decode's first token reached the router
// loses only the answer: decode verified the commit (I5) and decodes on,
// so the router does not abort the handoff (which stopped the decoding
// sequence: with no other pair to migrate to, the request failed 502
// after its first token although both workers were fine). The request
// ends with the reference output and honest usage.
func TestPrefillAnswerLostAfterFirstTokenKeepsDecoding(t *testing.T) {
	m := newToy()
	g := &gated{toy: m, after: 0, entered: make(chan struct{}), release: make(chan struct{})}
	dw := toyDecodeWorker(t, g, 64)
	pw, err := NewPrefillWorker(toyConfig(m, 64), dw)
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	lost := answerLostAfterFirst{w: pw, release: make(chan struct{})}
	ad := &abortSeen{Decode: dw, aborted: make(chan struct{})}
	eng, err := NewDisaggregated(DisaggConfig{Model: "toy", Vocab: m.vocab, Context: EffectiveContext(pw.Context(), dw.Context())}, lost, ad)
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, eng)
	defer func() {
		select {
		case <-g.release:
		default:
			close(g.release)
		}
	}()
	p := prompt(3, 20)
	s, err := eng.Submit(context.Background(), &Request{Tenant: "a", Prompt: p, MaxTokens: 8, IgnoreEOS: true})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	want := toyReference(m, p, 8, true)
	var got []int32
	select {
	case ev := <-s.Events():
		if ev.Err != nil || ev.Done {
			t.Fatalf("first event %+v, want the first token", ev)
		}
		got = append(got, ev.Token)
	case <-time.After(60 * time.Second):
		t.Fatal("no first token within 60s")
	}
	// Decode's first step is held: the prefill answer is lost now, and
	// an abort, if the router sends one, lands while the sequence is
	// still decoding.
	g.wait(t)
	close(lost.release)
	select {
	case <-ad.aborted:
	case <-time.After(200 * time.Millisecond):
	}
	close(g.release)
	res := collect(t, s)
	got = append(got, res.tokens...)
	if !slices.Equal(got, want) || !res.final.Done || res.final.Err != nil {
		t.Fatalf("after the prefill answer was lost past the first token: %v %+v, want %v", got, res.final, want)
	}
	if res.final.Usage.PromptTokens != len(p) || res.final.Usage.CompletionTokens != 8 {
		t.Fatalf("usage %+v, want %d prompt and 8 completion tokens", res.final.Usage, len(p))
	}
	waitDrained(t, pw.Pool(), dw.Pool())
}

// submitEnd runs r to its end: the error Submit or the stream ended with
// (nil when it finished), and what the stream carried.
func submitEnd(t *testing.T, eng *Disaggregated, r *Request) (result, error) {
	t.Helper()
	s, err := eng.Submit(context.Background(), r)
	if err != nil {
		return result{}, err
	}
	res := collect(t, s)
	return res, res.final.Err
}
