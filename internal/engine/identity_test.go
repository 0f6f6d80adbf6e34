package engine

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/handoff/inproc"
	"sluice/internal/handoff/shm"
	"sluice/internal/kv"
	"sluice/internal/model"
)

// fingerprinted is a toy runtime that says it runs model fp.
type fingerprinted struct {
	*toy
	fp model.Fingerprint
}

func (f fingerprinted) Fingerprint() model.Fingerprint { return f.fp }

// I13 on the in-process paths (inproc, and the shm transport's control
// channel with one-sided page writes), which have no handshake: the
// router's Reserve names its model and decode refuses another; the
// reservation names decode's model and a prefill worker of another refuses
// to write KV into it, before any page is written; the same model on every
// role serves the oracle's tokens. Every pool is whole afterwards.
func TestModelMismatchInProcess(t *testing.T) {
	a := model.Fingerprint{Name: "model-a", Sum: [16]byte{0xa}}
	b := model.Fingerprint{Name: "model-b", Sum: [16]byte{0xb}}
	m := newToy()
	for _, transport := range []string{"inproc", "shm"} {
		for _, c := range []struct {
			name                   string
			router, prefill, decod model.Fingerprint
			wantOK                 bool
		}{
			{"same model", a, a, a, true},
			{"router of another model", b, a, a, false},
			{"prefill of another model", a, b, a, false},
			{"decode of another model", a, a, b, false},
		} {
			t.Run(transport+"/"+c.name, func(t *testing.T) {
				dcfg := toyConfig(fingerprinted{m, c.decod}, 32)
				if transport == "shm" {
					dcfg.SharedFile = filepath.Join(t.TempDir(), "decode.pool")
				}
				dw, err := NewDecodeWorker(dcfg)
				if err != nil {
					t.Fatal(err)
				}
				defer dw.Close()
				cd := &countingDecode{Decode: inproc.Decode(dw)}
				var toDecode handoff.Decode = cd
				if transport == "shm" {
					w, err := shm.Open(dcfg.SharedFile, kv.Geometry{Layers: m.Layers(), KVDim: m.KVDim(), PageSize: dcfg.PageSize}, cd)
					if err != nil {
						t.Fatal(err)
					}
					defer w.Close()
					toDecode = w
				}
				pw, err := NewPrefillWorker(toyConfig(fingerprinted{m, c.prefill}, 32), toDecode)
				if err != nil {
					t.Fatal(err)
				}
				defer pw.Close()
				eng, err := NewDisaggregated(DisaggConfig{Model: "toy", Vocab: m.vocab, Context: 128, Fingerprint: c.router},
					inproc.Prefill(pw), inproc.Decode(dw))
				if err != nil {
					t.Fatal(err)
				}
				defer closeWithin(t, eng)
				p := prompt(3, 9)
				var r result
				s, err := eng.Submit(context.Background(), &Request{Tenant: "a", Prompt: p, MaxTokens: 5})
				if err != nil {
					r.final.Err = err
				} else {
					r = collect(t, s)
				}
				if c.wantOK {
					if r.final.Err != nil || !slices.Equal(r.tokens, toyReference(m, p, 5, false)) {
						t.Fatalf("same model: %v %v", r.tokens, r.final.Err)
					}
				} else {
					if !errors.Is(r.final.Err, handoff.ErrModelMismatch) {
						t.Fatalf("got tokens %v, end %v; want %s", r.tokens, r.final.Err, handoff.ErrModelMismatch.Code)
					}
					if len(r.tokens) != 0 {
						t.Fatalf("tokens %v streamed from a mismatched model", r.tokens)
					}
					if n := cd.writes.Load(); n != 0 {
						t.Fatalf("%d page writes reached decode from a mismatched model", n)
					}
				}
				closeWithin(t, eng)
				dw.Tick(time.Now().Add(time.Hour)) // past any quarantine lease (shm)
				for name, pool := range map[string]*kv.Pool{"prefill": pw.Pool(), "decode": dw.Pool()} {
					if err := pool.CheckDrained(); err != nil {
						t.Errorf("%s pool: %v", name, err)
					}
				}
			})
		}
	}
}

// Each of the prefill worker's two model checks alone (I13): a request
// whose router fingerprint is another model's, and a reservation naming
// another model (a decode worker that let a lying peer reserve), are both
// refused before any page is written; the honest request passes.
func TestPrefillChecksBothModels(t *testing.T) {
	a := model.Fingerprint{Name: "model-a", Sum: [16]byte{0xa}}
	b := model.Fingerprint{Name: "model-b", Sum: [16]byte{0xb}}
	m := newToy()
	dw := toyDecodeWorker(t, fingerprinted{m, b}, 32)
	cd := &countingDecode{Decode: inproc.Decode(dw)}
	pw, err := NewPrefillWorker(toyConfig(fingerprinted{m, b}, 32), cd)
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	ctx := context.Background()
	for i, c := range []struct {
		router, reservation model.Fingerprint
		wantOK              bool
	}{
		{a, b, false}, // the router's model is not prefill's
		{b, a, false}, // the reservation's model is not prefill's
		{b, b, true},
	} {
		id := newID()
		res, err := dw.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "t", PromptTokens: 6, MaxTokens: 2, Model: b})
		if err != nil {
			t.Fatal(err)
		}
		res.Model = c.reservation
		_, err = pw.Prefill(ctx, &handoff.PrefillRequest{Handoff: id, Tenant: "t", Tokens: prompt(i, 6), Reservation: res, Model: c.router})
		if c.wantOK != (err == nil) || !c.wantOK && !errors.Is(err, handoff.ErrModelMismatch) {
			t.Fatalf("case %d: %v", i, err)
		}
		if !c.wantOK && cd.writes.Load() != 0 {
			t.Fatalf("case %d: %d pages written for a mismatched model", i, cd.writes.Load())
		}
		_ = dw.Abort(ctx, &handoff.Abort{Handoff: id})
	}
}
