package engine

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/handoff/shm"
	"sluice/internal/handoff/tcp"
	"sluice/internal/kv"
)

// tap sits between the roles and lets a test act at an exact point of the
// handoff protocol.
type tap struct {
	handoff.Decode
	mu          sync.Mutex
	id          kv.ID
	writes      int
	beforeWrite func(t *tap, n int) // n: index of the Write call
	afterCommit func(t *tap)
	// Decode prefix-cache tests: pages counts the page writes sent;
	// onReserve may change the Reserve and the Reservation (a confused or
	// hostile router or decode), beforeCommit the Commit (a forged digest).
	pages        int
	onReserve    func(r *handoff.Reserve, res *handoff.Reservation)
	beforeCommit func(c *handoff.Commit)
}

func (t *tap) Reserve(ctx context.Context, r *handoff.Reserve) (*handoff.Reservation, error) {
	t.mu.Lock()
	t.id = r.Handoff
	or := t.onReserve
	t.mu.Unlock()
	if or != nil {
		cp := *r
		or(&cp, nil)
		r = &cp
	}
	res, err := t.Decode.Reserve(ctx, r)
	if err == nil && or != nil {
		cp := *res
		cp.Pages = append([]kv.PageRef(nil), res.Pages...)
		or(nil, &cp)
		res = &cp
	}
	return res, err
}

func (t *tap) Write(ctx context.Context, ws []handoff.PageWrite) error {
	t.mu.Lock()
	n := t.writes
	t.writes++
	t.pages += len(ws)
	bw := t.beforeWrite
	t.mu.Unlock()
	if bw != nil {
		bw(t, n)
	}
	return t.Decode.Write(ctx, ws)
}

func (t *tap) Commit(ctx context.Context, c *handoff.Commit) error {
	t.mu.Lock()
	bc := t.beforeCommit
	t.mu.Unlock()
	if bc != nil {
		cp := *c
		cp.Digest = append([]byte(nil), c.Digest...)
		bc(&cp)
		c = &cp
	}
	err := t.Decode.Commit(ctx, c)
	t.mu.Lock()
	ac := t.afterCommit
	t.mu.Unlock()
	if err == nil && ac != nil {
		ac(t)
	}
	return err
}

func (t *tap) abort() {
	t.mu.Lock()
	id := t.id
	t.mu.Unlock()
	_ = t.Decode.Abort(context.Background(), &handoff.Abort{Handoff: id, Reason: "test abort"})
}

// gated blocks forward step number `after` (0 = the first) until
// released: a prompt is then caught mid-prefill, a sequence mid-decode.
type gated struct {
	*toy
	after            int
	entered, release chan struct{}
	once             sync.Once
	n                int
}

func (g *gated) NewForwarder(n int) Forwarder { return &gatedFwd{g, g.toy.NewForwarder(n)} }

// wait returns once the gated step is reached. A request that fails before
// it (a forward error, a refused admission) would otherwise leave the test
// blocked until the go test timeout, with no word of what went wrong.
func (g *gated) wait(t testing.TB) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(60 * time.Second):
		t.Fatalf("forward step %d (counting from 0) was never reached within 60s", g.after)
	}
}

type gatedFwd struct {
	g *gated
	f Forwarder
}

func (f *gatedFwd) Forward(s []Step) []StepResult {
	if f.g.n == f.g.after {
		f.g.once.Do(func() {
			close(f.g.entered)
			<-f.g.release
		})
	}
	f.g.n++
	return f.f.Forward(s)
}

type abortRig struct {
	m   *toy
	dw  *DecodeWorker
	pw  *PrefillWorker
	eng *Disaggregated
	tp  *tap
}

// transports are the links between prefill and decode every abort test
// runs over: direct calls, loopback TCP, and TCP notices plus one-sided
// writes into the decode pool's shared mapping.
var transports = []string{"inproc", "tcp", "shm"}

func forTransports(t *testing.T, f func(t *testing.T, transport string)) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) { f(t, tr) })
	}
}

func newAbortRig(t *testing.T, transport string, prefillModel Runtime) *abortRig {
	return newAbortRig2(t, transport, prefillModel, nil)
}

func newAbortRig2(t *testing.T, transport string, prefillModel, decodeModel Runtime) *abortRig {
	t.Helper()
	return newAbortRigCfg(t, transport, prefillModel, decodeModel, nil)
}

// newAbortRigCfg is newAbortRig2 whose worker configs tweak may change.
func newAbortRigCfg(t *testing.T, transport string, prefillModel, decodeModel Runtime, tweak func(pcfg, dcfg *Config)) *abortRig {
	t.Helper()
	m := newToy()
	dcfg := toyConfig(m, 32)
	if decodeModel != nil {
		dcfg.Model = decodeModel
	}
	pcfg := toyConfig(m, 32)
	if prefillModel != nil {
		pcfg.Model = prefillModel
	}
	pcfg.BatchBytes = 1 // one page per Write call
	if tweak != nil {
		tweak(&pcfg, &dcfg)
	}
	if transport == "shm" {
		dcfg.SharedFile = filepath.Join(t.TempDir(), "decode.pool")
	}
	dw, err := NewDecodeWorker(dcfg)
	if err != nil {
		t.Fatal(err)
	}
	var link handoff.Decode = dw
	var closers []func()
	if transport != "inproc" {
		tc := tcp.Config{Secret: []byte("engine-test-shared-secret-0123456789")}
		addr, stop := serveTCP(t, tc, dw, nil)
		dc := dialTCP(t, tc, addr)
		closers = append(closers, stop, func() { dc.Close() })
		link = dc
		if transport == "shm" {
			w, err := shm.Open(dcfg.SharedFile, kv.Geometry{Layers: m.layers, KVDim: m.kvdim, PageSize: dcfg.PageSize}, dc)
			if err != nil {
				t.Fatal(err)
			}
			closers = append(closers, func() { w.Close() })
			link = w
		}
	}
	tp := &tap{Decode: link}
	pw, err := NewPrefillWorker(pcfg, tp)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := NewDisaggregated(DisaggConfig{Model: "toy", Vocab: m.vocab, Context: 128}, pw, tp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		closeWithin(t, eng)
		pw.Close()
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
		dw.Close()
	})
	return &abortRig{m: m, dw: dw, pw: pw, eng: eng, tp: tp}
}

// after checks what every abort must leave behind: both pools entirely
// free, and a fresh request through the same (LIFO, so just-freed) pages
// producing exactly the reference output, i.e. no stale read.
func (r *abortRig) after(t *testing.T) {
	t.Helper()
	r.tp.mu.Lock()
	r.tp.beforeWrite, r.tp.afterCommit = nil, nil
	r.tp.mu.Unlock()
	for _, p := range []*kv.Pool{r.pw.Pool(), r.dw.Pool()} {
		// Pages a one-sided writer might still write stay quarantined until
		// its drain acknowledgement or the lease (I6): give that a moment.
		deadline := time.Now().Add(5 * time.Second)
		for p.CheckDrained() != nil && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if err := p.CheckDrained(); err != nil {
			t.Fatalf("pool not drained after the abort: %v", err)
		}
	}
	p := prompt(99, 13)
	s, err := r.eng.Submit(context.Background(), &Request{Tenant: "other", Prompt: p, MaxTokens: 6})
	if err != nil {
		t.Fatal(err)
	}
	res := collect(t, s)
	if want := toyReference(r.m, p, 6, false); !slices.Equal(res.tokens, want) || !res.final.Done {
		t.Fatalf("request after the abort: %v %v, want %v", res.tokens, res.final.Err, want)
	}
}

func wantErr(t *testing.T, r result) {
	t.Helper()
	var e *Error
	if r.final.Done || !errors.As(r.final.Err, &e) {
		t.Fatalf("an aborted handoff must end in an error, got done=%v err=%v tokens=%v", r.final.Done, r.final.Err, r.tokens)
	}
}

func TestAbortReserved(t *testing.T) {
	forTransports(t, func(t *testing.T, transport string) {
		r := newAbortRig(t, transport, nil)
		// The abort lands after Reserve, before any page write: every write of
		// the prefill that follows is late and dropped (I6 fencing).
		r.tp.beforeWrite = func(tp *tap, n int) {
			if n == 0 {
				tp.abort()
			}
		}
		s, err := r.eng.Submit(context.Background(), &Request{Tenant: "a", Prompt: prompt(1, 13), MaxTokens: 6})
		if err != nil {
			t.Fatal(err)
		}
		wantErr(t, collect(t, s))
		if st := r.dw.ReceiverStats(); st.LateWrites == 0 {
			t.Fatalf("the write after the abort was not counted as late: %+v", st)
		}
		r.after(t)
	})
}

func TestAbortPrefilling(t *testing.T) {
	forTransports(t, func(t *testing.T, transport string) {
		g := &gated{toy: newToy(), entered: make(chan struct{}), release: make(chan struct{})}
		r := newAbortRig(t, transport, g)
		s, err := r.eng.Submit(context.Background(), &Request{Tenant: "a", Prompt: prompt(2, 13), MaxTokens: 6})
		if err != nil {
			t.Fatal(err)
		}
		g.wait(t)
		r.tp.abort() // decode gives up while the prompt is still running
		close(g.release)
		wantErr(t, collect(t, s))
		if st := r.dw.ReceiverStats(); st.LateWrites == 0 {
			t.Fatalf("writes after the abort were not counted as late: %+v", st)
		}
		r.after(t)
	})
}

func TestAbortTransferring(t *testing.T) {
	forTransports(t, func(t *testing.T, transport string) {
		r := newAbortRig(t, transport, nil)
		r.tp.beforeWrite = func(tp *tap, n int) {
			if n == 1 { // one page applied, the rest still to come
				tp.abort()
			}
		}
		s, err := r.eng.Submit(context.Background(), &Request{Tenant: "a", Prompt: prompt(3, 13), MaxTokens: 6})
		if err != nil {
			t.Fatal(err)
		}
		wantErr(t, collect(t, s))
		if st := r.dw.ReceiverStats(); st.LateWrites == 0 || st.Aborted == 0 {
			t.Fatalf("abort mid-transfer: want a counted abort and late write, got %+v", st)
		}
		r.after(t)
	})
}

func TestAbortCommitted(t *testing.T) {
	forTransports(t, func(t *testing.T, transport string) {
		// Decoding is held at its first step so the abort surely lands between
		// the accepted commit and the end of decoding.
		g := &gated{toy: newToy(), after: 0, entered: make(chan struct{}), release: make(chan struct{})}
		r := newAbortRig2(t, transport, nil, g)
		r.tp.afterCommit = func(tp *tap) { tp.abort(); close(g.release) }
		s, err := r.eng.Submit(context.Background(), &Request{Tenant: "a", Prompt: prompt(4, 13), MaxTokens: 50, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		wantErr(t, collect(t, s))
		r.after(t)
	})
}

func TestAbortDecoding(t *testing.T) {
	forTransports(t, func(t *testing.T, transport string) {
		g := &gated{toy: newToy(), after: 2, entered: make(chan struct{}), release: make(chan struct{})}
		r := newAbortRig2(t, transport, nil, g)
		s, err := r.eng.Submit(context.Background(), &Request{Tenant: "a", Prompt: prompt(5, 13), MaxTokens: 60, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		g.wait(t) // two decode steps done, the third is waiting
		r.tp.abort()
		close(g.release)
		res := collect(t, s)
		wantErr(t, res)
		if len(res.tokens) >= 60 {
			t.Fatalf("decoding ran to the end despite the abort")
		}
		r.after(t)
	})
}

// TestCancelDuringTransferRunsToCommit is I10: a client disconnect in the
// middle of the transfer does not tear it; the commit happens, decode
// reaches its first token, then the request ends as cancelled and every
// page goes back by the normal path.
func TestCancelDuringTransferRunsToCommit(t *testing.T) {
	forTransports(t, func(t *testing.T, transport string) {
		r := newAbortRig(t, transport, nil)
		var s Stream
		ready := make(chan struct{})
		r.tp.beforeWrite = func(tp *tap, n int) {
			if n == 1 {
				<-ready
				s.Cancel()
			}
		}
		var err error
		s, err = r.eng.Submit(context.Background(), &Request{Tenant: "a", Prompt: prompt(6, 13), MaxTokens: 40, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		close(ready)
		res := collect(t, s)
		var e *Error
		if !errors.As(res.final.Err, &e) || e.Code != CodeCancelled {
			t.Fatalf("want a cancelled end, got %+v", res.final)
		}
		st := r.dw.ReceiverStats()
		if st.Accepted != 1 || st.Aborted != 0 || st.LateWrites != 0 {
			t.Fatalf("the transfer was torn: %+v", st)
		}
		if res.final.Usage.PromptTokens != 13 {
			t.Fatalf("usage after a cancel: %+v", res.final.Usage)
		}
		// Decode may finish its step after the cancel: wait for its release.
		deadline := time.Now().Add(5 * time.Second)
		for r.dw.Pool().CheckDrained() != nil && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		r.after(t)
	})
}
