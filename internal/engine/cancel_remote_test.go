package engine

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/handoff/tcp"
	"sluice/internal/kv"
)

// stepCounter is the toy model counting its forward steps; step number
// at (from 0) blocks until release, so a prompt is caught mid-prefill.
type stepCounter struct {
	*toy
	at               int
	entered, release chan struct{}
	mu               sync.Mutex
	steps            int
}

func (m *stepCounter) NewForwarder(n int) Forwarder {
	return &stepCounterFwd{m: m, f: m.toy.NewForwarder(n)}
}

func (m *stepCounter) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.steps
}

type stepCounterFwd struct {
	m *stepCounter
	f Forwarder
}

func (f *stepCounterFwd) Forward(s []Step) []StepResult {
	f.m.mu.Lock()
	n := f.m.steps
	f.m.steps++
	f.m.mu.Unlock()
	if n == f.m.at {
		close(f.m.entered)
		<-f.m.release
	}
	return f.f.Forward(s)
}

// watchedPrefill is the prefill worker as its server (or the router, in
// process) calls it: it tells when the first call's context ended (the
// router's word reached the worker) and how many forward steps the
// worker had run when that call returned.
type watchedPrefill struct {
	w        handoff.Prefill
	m        *stepCounter
	once     sync.Once
	stopped  chan struct{} // the first call's ctx ended
	returned chan int      // the first call returned: steps run by then
}

func (w *watchedPrefill) Prefill(ctx context.Context, r *handoff.PrefillRequest) (*handoff.PrefillResult, error) {
	first := false
	w.once.Do(func() { first = true })
	if !first {
		return w.w.Prefill(ctx, r)
	}
	stop := context.AfterFunc(ctx, func() { close(w.stopped) })
	defer stop()
	res, err := w.w.Prefill(ctx, r)
	w.returned <- w.m.count()
	return res, err
}

// idTap records the handoff id of the first Reserve decode sees.
type idTap struct {
	handoff.Decode
	mu sync.Mutex
	id kv.ID
	n  int
}

func (t *idTap) Reserve(ctx context.Context, r *handoff.Reserve) (*handoff.Reservation, error) {
	t.mu.Lock()
	if t.n == 0 {
		t.id = r.Handoff
	}
	t.n++
	t.mu.Unlock()
	return t.Decode.Reserve(ctx, r)
}

// A reservation decode revokes while its prompt is being prefilled (the
// KV quota) stops the prompt at the prefill worker at once, also when
// that worker is remote: the router ends the Prefill call (over TCP a
// close frame on its id), and the worker drops the prompt at its next step
// boundary, aborts the handoff and frees its pages. Counted in steps, not
// time: the prompt caught in step `at` runs that step and no other (with
// the streaming handoff, and after the prefill, when decode's refusal of
// a write cannot stop it). The
// request then re-pairs and finishes with the reference output (nothing
// of the revoked handoff was committed: decode accepted one commit), both
// pools drain, and another tenant's prompt runs.
func TestRevokedPrefillStopsAtRemoteWorker(t *testing.T) {
	for _, c := range []struct {
		transport string
		after     bool // HandoffAfterPrefill: nothing is written before the prompt's end
	}{{"inproc", false}, {"tcp", false}, {"inproc", true}, {"tcp", true}} {
		transport := c.transport
		name := transport + "/streaming"
		if c.after {
			name = transport + "/after-prefill"
		}
		t.Run(name, func(t *testing.T) {
			m := newToy()
			const at = 2
			sm := &stepCounter{toy: m, at: at, entered: make(chan struct{}), release: make(chan struct{})}
			dcfg := toyConfig(m, 64)
			pcfg := toyConfig(m, 64)
			pcfg.Model = sm
			pcfg.HandoffAfterPrefill = c.after
			dw, err := NewDecodeWorker(dcfg)
			if err != nil {
				t.Fatal(err)
			}
			var closers []func()
			defer func() {
				for i := len(closers) - 1; i >= 0; i-- {
					closers[i]()
				}
			}()
			closers = append(closers, dw.Close)
			var toDecode, routerDecode handoff.Decode = dw, dw
			tc := tcp.Config{Secret: []byte("engine-test-shared-secret-0123456789")}
			if transport == "tcp" {
				daddr, stop := serveTCP(t, tc, dw, nil)
				closers = append(closers, stop)
				pd, rd := dialTCP(t, tc, daddr), dialTCP(t, tc, daddr)
				closers = append(closers, func() { pd.Close(); rd.Close() })
				toDecode, routerDecode = pd, rd
			}
			pw, err := NewPrefillWorker(pcfg, toDecode)
			if err != nil {
				t.Fatal(err)
			}
			closers = append(closers, pw.Close)
			wp := &watchedPrefill{w: pw, m: sm, stopped: make(chan struct{}), returned: make(chan int, 1)}
			var routerPrefill handoff.Prefill = wp
			if transport == "tcp" {
				paddr, stop := serveTCP(t, tc, nil, wp)
				closers = append(closers, stop)
				rp := dialTCP(t, tc, paddr)
				closers = append(closers, func() { rp.Close() })
				routerPrefill = rp
			}
			tp := &idTap{Decode: routerDecode}
			eng, err := NewDisaggregated(DisaggConfig{Model: "toy", Vocab: m.vocab, Context: EffectiveContext(pw.Context(), dw.Context())}, routerPrefill, tp)
			if err != nil {
				t.Fatal(err)
			}
			closers = append(closers, func() { closeWithin(t, eng) })

			p := prompt(7, 200) // 40 chunks of 5 tokens: 40 steps when whole
			s, err := eng.Submit(context.Background(), &Request{Tenant: "a", Prompt: p, MaxTokens: 4})
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-sm.entered:
			case <-time.After(60 * time.Second):
				t.Fatal("the prompt never reached its gated step")
			}
			tp.mu.Lock()
			id := tp.id
			tp.mu.Unlock()
			dw.mu.Lock()
			revoked := false
			if h := dw.handoffs[id]; h != nil && !h.committed {
				revoked = dw.revokeOneLocked(dw.now(), id, h)
			}
			dw.mu.Unlock()
			if !revoked {
				t.Fatal("the reservation could not be revoked mid-prefill")
			}
			select {
			case <-wp.stopped:
			case <-time.After(30 * time.Second):
				close(sm.release)
				t.Fatal("the router's giving the revoked prompt up never reached the prefill worker")
			}
			close(sm.release)
			var steps int
			select {
			case steps = <-wp.returned:
			case <-time.After(60 * time.Second):
				t.Fatal("the revoked prompt's Prefill call never returned")
			}
			if steps != at+1 {
				t.Fatalf("the revoked prompt ran %d forward steps, want %d: it went on past the step boundary after the router gave it up (40 when whole)", steps, at+1)
			}
			res := collect(t, s)
			if want := toyReference(m, p, 4, false); !slices.Equal(res.tokens, want) || !res.final.Done {
				t.Fatalf("the re-paired request: %v %v, want %v", res.tokens, res.final.Err, want)
			}
			if n := eng.Revoked(); n != 1 {
				t.Fatalf("revoked %d times, want 1", n)
			}
			if st := dw.ReceiverStats(); st.Accepted != 1 {
				t.Fatalf("decode accepted %d commits, want 1 (the re-paired handoff's; nothing of the revoked one): %+v", st.Accepted, st)
			}
			waitDrained(t, pw.Pool(), dw.Pool())
			q := prompt(8, 30)
			s2, err := eng.Submit(context.Background(), &Request{Tenant: "b", Prompt: q, MaxTokens: 5})
			if err != nil {
				t.Fatal(err)
			}
			if res := collect(t, s2); !slices.Equal(res.tokens, toyReference(m, q, 5, false)) || !res.final.Done {
				t.Fatalf("tenant b after the revoked prompt: %v %v", res.tokens, res.final.Err)
			}
			waitDrained(t, pw.Pool(), dw.Pool())
		})
	}
}

// cancelOnStream is a decode link that ends the client's context while
// the router opens the decode stream: the client is gone by the time
// Submit watches its context, so the watch cancels at once, on another
// goroutine, while Submit is still returning.
type cancelOnStream struct {
	handoff.Decode
	cancel func()
}

func (c *cancelOnStream) Stream(ctx context.Context, id kv.ID, p handoff.StreamParams) (handoff.TokenStream, error) {
	ts, err := c.Decode.Stream(ctx, id, p)
	c.cancel()
	return ts, err
}

// A client that leaves as Submit returns (after its reservation, before
// its prompt was sent) ends its request cancelled (I10: after the handoff
// ran to its commit; the tokens that reached the stream before the cancel
// was seen are a prefix of the output: the watch runs on its own
// goroutine, so how many is not fixed — once all 4 under -race) unless
// it finished first, race-free against Submit's own
// end (-race caught the stream's end reading its close hook while Submit
// wrote it, in TestDisconnectAtEveryPhase), and nothing is left reserved.
func TestCancelAsSubmitReturns(t *testing.T) {
	m := newToy()
	dw, pw := toyWorkers(t, m, 32)
	for i := range 20 {
		ctx, cancel := context.WithCancel(context.Background())
		link := &cancelOnStream{Decode: dw, cancel: cancel}
		eng, err := NewDisaggregated(DisaggConfig{Model: "toy", Vocab: m.vocab, Context: 128}, pw, link)
		if err != nil {
			t.Fatal(err)
		}
		s, err := eng.Submit(ctx, &Request{Tenant: "acme", Prompt: prompt(i, 9), MaxTokens: 4})
		if err != nil {
			t.Fatal(err)
		}
		// The cancel runs on its own goroutine: the request may also
		// have finished before it.
		res := collect(t, s)
		var e *Error
		ref := toyReference(m, prompt(i, 9), 4, false)
		cancelled := errors.As(res.final.Err, &e) && e.Code == CodeCancelled && slices.Equal(res.tokens, ref[:len(res.tokens)])
		if !cancelled && !(res.final.Done && slices.Equal(res.tokens, ref)) {
			t.Fatalf("a client gone as Submit returned: %v %v, want a cancelled end after a prefix of the output, or the whole output", res.tokens, res.final.Err)
		}
		closeWithin(t, eng)
	}
	waitDrained(t, pw.Pool(), dw.Pool())
}
