package engine

import (
	"context"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"sluice/internal/handoff"
	"sluice/internal/handoff/shm"
	"sluice/internal/handoff/tcp"
	"sluice/internal/kv"
)

// remoteRig wires router -> prefill -> decode over real loopback TCP
// connections (and, for shm, one-sided writes into the decode pool's
// shared mapping), as separate processes would be.
type remoteRig struct {
	eng *Disaggregated
	// rp and rd are the router's links to the two workers.
	rp      handoff.Prefill
	rd      handoff.Decode
	pw      *PrefillWorker
	dw      *DecodeWorker
	closers []func()
	once    sync.Once
}

// close stops the rig's roles and links, newest first; it runs once, also
// as the test's cleanup when a t.Fatal skipped the test's own call.
func (r *remoteRig) close() {
	r.once.Do(func() {
		for i := len(r.closers) - 1; i >= 0; i-- {
			r.closers[i]()
		}
	})
}

func serveTCP(t *testing.T, cfg tcp.Config, d handoff.Decode, p handoff.Prefill) (string, func()) {
	t.Helper()
	s, err := tcp.NewServer(cfg, d, p)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	return l.Addr().String(), func() { s.Close() }
}

func dialTCP(t *testing.T, cfg tcp.Config, addr string) *tcp.Client {
	t.Helper()
	c, err := tcp.Dial(context.Background(), addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newRemoteRig(t *testing.T, transport string, pcfg, dcfg Config) *remoteRig {
	t.Helper()
	return newRemoteRigWrap(t, transport, pcfg, dcfg, nil)
}

// newRemoteRigWrap is newRemoteRig with the prefill worker's link to
// decode (TCP, or the shm writer over it) passed through wrap when set.
func newRemoteRigWrap(t *testing.T, transport string, pcfg, dcfg Config, wrap func(handoff.Decode) handoff.Decode) *remoteRig {
	t.Helper()
	tc := tcp.Config{Secret: []byte("engine-test-shared-secret-0123456789"), Model: FingerprintOf(dcfg.Model)}
	r := &remoteRig{}
	// A t.Fatal between here and the test's r.close must still stop the
	// workers before the test's earlier cleanups (a model file's mapping
	// unmapped under a running forward pass is a SIGSEGV, not a failure).
	t.Cleanup(r.close)
	if transport == "shm" {
		dcfg.SharedFile = filepath.Join(t.TempDir(), "decode.pool")
	}
	dw, err := NewDecodeWorker(dcfg)
	if err != nil {
		t.Fatal(err)
	}
	r.dw = dw
	r.closers = append(r.closers, dw.Close)
	daddr, stop := serveTCP(t, tc, dw, nil)
	r.closers = append(r.closers, stop)

	// The prefill worker's link to decode.
	dc := dialTCP(t, tc, daddr)
	r.closers = append(r.closers, func() { dc.Close() })
	var toDecode handoff.Decode = dc
	if transport == "shm" {
		w, err := shm.Open(dcfg.SharedFile, kv.Geometry{Layers: dcfg.Model.Layers(), KVDim: dcfg.Model.KVDim(), PageSize: dcfg.PageSize, Type: dcfg.KVType}, dc)
		if err != nil {
			t.Fatal(err)
		}
		r.closers = append(r.closers, func() { w.Close() })
		toDecode = w
	}
	if wrap != nil {
		toDecode = wrap(toDecode)
	}
	pw, err := NewPrefillWorker(pcfg, toDecode)
	if err != nil {
		t.Fatal(err)
	}
	r.pw = pw
	r.closers = append(r.closers, pw.Close)
	paddr, stop2 := serveTCP(t, tc, nil, pw)
	r.closers = append(r.closers, stop2)

	// The router's links to both.
	rp := dialTCP(t, tc, paddr)
	rd := dialTCP(t, tc, daddr)
	r.rp, r.rd = rp, rd
	r.closers = append(r.closers, func() { rp.Close(); rd.Close() })
	eng, err := NewDisaggregated(DisaggConfig{Model: dcfg.Model.Name(), Vocab: dcfg.Model.Vocab(), Fingerprint: FingerprintOf(dcfg.Model),
		Context: EffectiveContext(pw.Context(), dw.Context()),
		// The router's queue takes the prefill config's bounds (zero:
		// the defaults).
		MaxQueue: pcfg.MaxQueue, QueueTimeout: pcfg.QueueTimeout}, rp, rd)
	if err != nil {
		t.Fatal(err)
	}
	r.eng = eng
	r.closers = append(r.closers, func() { closeWithin(t, eng) })
	return r
}

// TestOracleStoriesTransports is the determinism oracle across real
// transports: TCP and one-sided shared memory, each between three
// separately connected roles, equal to colocated and to llama.cpp.
func TestOracleStoriesTransports(t *testing.T) {
	rt := storiesRuntime(t)
	n := 36
	if testing.Short() {
		n = 12
	}
	reqs, want := storiesRequests(t, n)
	col, err := NewColocated(storiesConfig(rt, 24))
	if err != nil {
		t.Fatal(err)
	}
	ref := runMany(t, col, reqs)
	closeWithin(t, col)
	for _, transport := range []string{"tcp", "shm"} {
		t.Run(transport, func(t *testing.T) {
			r := newRemoteRig(t, transport, storiesConfig(rt, 16), storiesConfig(rt, 24))
			got := runMany(t, r.eng, reqs)
			for i := range reqs {
				if got[i].final.Err != nil {
					t.Fatalf("request %d: %v", i, got[i].final.Err)
				}
				if !slices.Equal(got[i].tokens, ref[i].tokens) || !slices.Equal(got[i].tokens, want[i]) {
					t.Errorf("request %d: %s %v, colocated %v, llama.cpp %v", i, transport, got[i].tokens, ref[i].tokens, want[i])
				}
				if got[i].final.Usage.PromptTokens != len(reqs[i].Prompt) {
					t.Errorf("request %d: usage %+v (I9)", i, got[i].final.Usage)
				}
			}
			for name, p := range map[string]*kv.Pool{"prefill": r.pw.Pool(), "decode": r.dw.Pool()} {
				if err := p.CheckDrained(); err != nil {
					t.Errorf("%s pool over %s not drained: %v", name, transport, err)
				}
			}
			r.close()
		})
	}
}

// TestQ8PagesOverTransports: with Q8_0 pages on both roles (stories260K's
// KV row is one block), prefill -> decode over TCP and over one-sided
// shared memory gives the colocated Q8_0 tokens (the page images, their
// digests and the decode side's reads agree), and both pools drain.
func TestQ8PagesOverTransports(t *testing.T) {
	rt := storiesRuntime(t)
	reqs, _ := storiesRequests(t, 8)
	q8 := func(ps int) Config {
		c := storiesConfig(rt, ps)
		c.KVType = kv.Q8_0
		return c
	}
	col, err := NewColocated(q8(24))
	if err != nil {
		t.Fatal(err)
	}
	ref := runMany(t, col, reqs)
	closeWithin(t, col)
	for _, transport := range []string{"tcp", "shm"} {
		t.Run(transport, func(t *testing.T) {
			r := newRemoteRig(t, transport, q8(16), q8(24))
			defer r.close()
			if g := r.dw.Pool().Geometry(); g.Type != kv.Q8_0 {
				t.Fatalf("decode pool of %v pages", g.Type)
			}
			got := runMany(t, r.eng, reqs)
			for i := range reqs {
				if got[i].final.Err != nil {
					t.Fatalf("request %d: %v", i, got[i].final.Err)
				}
				if len(ref[i].tokens) == 0 || !slices.Equal(got[i].tokens, ref[i].tokens) {
					t.Errorf("request %d: %s %v, colocated %v", i, transport, got[i].tokens, ref[i].tokens)
				}
			}
			for name, p := range map[string]*kv.Pool{"prefill": r.pw.Pool(), "decode": r.dw.Pool()} {
				if err := p.CheckDrained(); err != nil {
					t.Errorf("%s pool over %s not drained: %v", name, transport, err)
				}
			}
		})
	}
}
