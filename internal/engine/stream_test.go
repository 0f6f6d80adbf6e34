package engine

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/kv"
)

// longStoriesRequests are n requests whose prompts span many prefill
// chunks and pages (storiesConfig: chunks of 7 tokens, pages of 16), up
// to most of the 256-token context.
func longStoriesRequests(n int) []*Request {
	var reqs []*Request
	for i := range n {
		p := make([]int32, 120+i*23%110)
		p[0] = 1 // BOS
		for j := 1; j < len(p); j++ {
			p[j] = int32(3 + (i*131+j*37)%500)
		}
		reqs = append(reqs, &Request{Tenant: []string{"acme", "globex"}[i%2], Prompt: p, MaxTokens: 6, IgnoreEOS: true})
	}
	return reqs
}

// The streaming handoff over real transports: long prompts whose pages go
// to decode chunk by chunk while the rest of the prompt computes give
// outputs bitwise equal to colocated ones, most pages did travel before
// their prompt was done, and both pools end whole.
func TestStreamingHandoffEqualsColocated(t *testing.T) {
	rt := storiesRuntime(t)
	reqs := longStoriesRequests(6)
	col, err := NewColocated(storiesConfig(rt, 96))
	if err != nil {
		t.Fatal(err)
	}
	ref := runMany(t, col, reqs)
	closeWithin(t, col)
	pages := 0
	for i, r := range reqs {
		if ref[i].final.Err != nil || len(ref[i].tokens) != 6 {
			t.Fatalf("colocated request %d: %v %+v", i, ref[i].tokens, ref[i].final)
		}
		pages += kv.PagesFor(len(r.Prompt), 16)
	}
	for _, transport := range []string{"tcp", "shm"} {
		t.Run(transport, func(t *testing.T) {
			// Every page but the last few of each prompt can go before the
			// prompt ends; at least half of them must have, in one of three
			// runs. That overlap needs a second CPU here: with one P the
			// compute goroutine runs a prompt's chunks (microseconds each on
			// this model) before the pusher is scheduled (0 of 62 streamed
			// in most runs under taskset -c 0); on a model whose chunks take
			// milliseconds Go's preemption (every ~10 ms) lets the pusher run
			// and pages stream with one P too (docs/operations.md). Two Ps
			// are not two CPUs on a loaded machine either (4 of 62 streamed
			// once in a -count=3 run beside two CPU hogs): the code promises
			// the overlap when the pusher gets a CPU, not that it gets one,
			// so a run that streamed too few is tried again. The sender's
			// streaming itself is checked without timing in handoff's
			// TestStreamingSenderSendsEachChunksPages.
			for attempt := 1; ; attempt++ {
				st := streamingRun(t, transport, rt, reqs, ref, pages)
				if t.Failed() {
					return
				}
				switch {
				case runtime.GOMAXPROCS(0) < 2:
					t.Logf("one P: %d of %d pages streamed, not checked", st.PagesStreamed, st.PagesSent)
				case 2*st.PagesStreamed >= st.PagesSent:
				case attempt < 3:
					t.Logf("run %d: %d of %d pages streamed (the pusher did not get a CPU while the prompts computed); again", attempt, st.PagesStreamed, st.PagesSent)
					continue
				default:
					t.Errorf("prefill stats %+v: want most of the %d pages streamed in one of 3 runs", st, pages)
				}
				return
			}
		})
	}
}

// streamingRun sends reqs through a fresh disaggregated rig over
// transport, checks each output against ref and the pools, and returns the
// prefill worker's stats.
func streamingRun(t *testing.T, transport string, rt Runtime, reqs []*Request, ref []result, pages int) PrefillStats {
	t.Helper()
	r := newRemoteRig(t, transport, storiesConfig(rt, 96), storiesConfig(rt, 96))
	defer r.close()
	got := runMany(t, r.eng, reqs)
	for i := range reqs {
		if got[i].final.Err != nil {
			t.Fatalf("request %d: %v", i, got[i].final.Err)
		}
		if !slices.Equal(got[i].tokens, ref[i].tokens) {
			t.Errorf("request %d (prompt %d): %s %v, colocated %v", i, len(reqs[i].Prompt), transport, got[i].tokens, ref[i].tokens)
		}
	}
	st := r.pw.Stats()
	if st.Committed != int64(len(reqs)) || st.PagesSent != int64(pages) {
		t.Errorf("prefill stats %+v: want %d committed, %d pages sent", st, len(reqs), pages)
	}
	for name, p := range map[string]*kv.Pool{"prefill": r.pw.Pool(), "decode": r.dw.Pool()} {
		waitFreePool(t, p)
		if err := p.CheckDrained(); err != nil {
			t.Errorf("%s pool over %s not drained: %v", name, transport, err)
		}
	}
	return st
}

// faultyLink is the prefill worker's link to decode with a fault put into
// the n-th Write call (counting from 1): before sends the batch it returns
// instead, after runs once the call returned. Register is passed on (the
// shm writer needs it).
type faultyLink struct {
	handoff.Decode
	n      int
	before func(ws []handoff.PageWrite) []handoff.PageWrite
	after  func(ws []handoff.PageWrite)

	mu    sync.Mutex
	calls int
}

func (f *faultyLink) Register(res *handoff.Reservation) error {
	if r, ok := f.Decode.(handoff.Registrar); ok {
		return r.Register(res)
	}
	return nil
}

func (f *faultyLink) Write(ctx context.Context, ws []handoff.PageWrite) error {
	f.mu.Lock()
	f.calls++
	hit := f.calls == f.n
	f.mu.Unlock()
	if hit && f.before != nil {
		ws = f.before(ws)
	}
	err := f.Decode.Write(ctx, ws)
	if hit && f.after != nil {
		f.after(ws)
	}
	return err
}

// A handoff that fails in the middle of its prompt, over TCP and shm:
// decode aborts it after the second batch (the router's abort, a decode
// that gave up), a mid-prompt page arrives corrupted (its write checksum
// made to match), or one is missing. Each fails closed: the request ends
// with an error and no token (decode read nothing: the commit never
// verified), and both pools end whole, nothing of the handoff reachable.
func TestStreamingHandoffFailsMidPrompt(t *testing.T) {
	rt := storiesRuntime(t)
	req := longStoriesRequests(1)[0] // 120 tokens: 8 pages, 18 chunks
	corrupt := func(ws []handoff.PageWrite) []handoff.PageWrite {
		out := slices.Clone(ws)
		w := &out[0]
		w.Data = slices.Clone(w.Data) // it aliases the prefill pool
		w.Data[3] ^= 0x40
		w.Checksum = handoff.Checksum(w.Data)
		return out
	}
	missing := func(ws []handoff.PageWrite) []handoff.PageWrite { return ws[1:] }
	for _, transport := range []string{"tcp", "shm"} {
		for _, c := range []struct {
			name   string
			before func([]handoff.PageWrite) []handoff.PageWrite
			abort  bool
			want   error
		}{
			{"abort", nil, true, handoff.ErrAborted},
			{"corrupt", corrupt, false, handoff.ErrDigestMismatch},
			{"missing", missing, false, nil},
		} {
			t.Run(transport+"/"+c.name, func(t *testing.T) {
				var dw atomic.Pointer[DecodeWorker] // set once the rig is up; read by the push
				link := &faultyLink{n: 2, before: c.before}
				if c.abort {
					link.after = func(ws []handoff.PageWrite) {
						_ = dw.Load().Abort(context.Background(), &handoff.Abort{Handoff: ws[0].Handoff, Reason: "test: decode gave up mid-prompt"})
					}
				}
				cfg := storiesConfig(rt, 32)
				cfg.BatchBytes = 20480 // one page a batch: the second is block 1
				r := newRemoteRigWrap(t, transport, cfg, storiesConfig(rt, 32), func(d handoff.Decode) handoff.Decode {
					link.Decode = d
					return link
				})
				defer r.close()
				dw.Store(r.dw)
				s, err := r.eng.Submit(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				res := collect(t, s)
				if res.final.Err == nil || len(res.tokens) != 0 {
					t.Fatalf("got %v %+v, want an error and no token", res.tokens, res.final)
				}
				if c.want != nil && !errors.Is(res.final.Err, c.want) {
					t.Errorf("error %v, want %v", res.final.Err, c.want)
				}
				st := r.pw.Stats()
				if st.Committed != 0 || st.Failed != 1 {
					t.Errorf("prefill stats %+v, want one failed handoff", st)
				}
				for name, p := range map[string]*kv.Pool{"prefill": r.pw.Pool(), "decode": r.dw.Pool()} {
					waitFreePool(t, p)
					if err := p.CheckDrained(); err != nil {
						t.Errorf("%s pool not drained: %v", name, err)
					}
				}
			})
		}
	}
}

// A long prompt's prefill may outlast HandoffTimeout while its pages keep
// arriving: each applied page write is progress. Silence for the timeout
// still reclaims the reservation.
func TestHandoffTimeoutCountsFromLastWrite(t *testing.T) {
	cfg := toyConfig(newToy(), 32)
	cfg.HandoffTimeout = time.Minute
	dw, err := NewDecodeWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer dw.Close()
	t0 := time.Now()
	clock := t0
	dw.now = func() time.Time { return clock }
	res, err := dw.Reserve(context.Background(), &handoff.Reserve{Handoff: newID(), Tenant: "a", PromptTokens: 9, MaxTokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, cfg.geometry().PageBytes())
	clock = t0.Add(50 * time.Second)
	if err := dw.Write(context.Background(), []handoff.PageWrite{{Handoff: res.Handoff, Block: 0, Page: res.Pages[0],
		Slots: cfg.PageSize, Data: data, Checksum: handoff.Checksum(data)}}); err != nil {
		t.Fatal(err)
	}
	dw.Tick(t0.Add(100 * time.Second)) // 100s since the reservation, 50s since the write
	if dw.Pool().CheckDrained() == nil {
		t.Fatal("a handoff whose pages were still arriving was reclaimed")
	}
	dw.Tick(t0.Add(111 * time.Second)) // 61s of silence
	waitFreePool(t, dw.Pool())
	if st := dw.ReceiverStats(); st.Aborted != 1 {
		t.Fatalf("stats %+v", st)
	}
}
