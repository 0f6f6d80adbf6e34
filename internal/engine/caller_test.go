package engine

import (
	"context"
	"sync"
	"testing"

	"sluice/internal/handoff"
)

// The tenant and weight of a request reach the transports that order calls
// by them (the TCP client's call slots, handoff.WithCaller): the router's
// Prefill call names them in its context and carries the weight in the
// request, and the prefill worker's page writes and commit to decode name
// them in theirs. Without it every page write and commit counted as one
// tenant's (no tenant), and a flood's writes queued ahead of another
// tenant's commit on a full connection.
func TestCallsNameTheirTenant(t *testing.T) {
	m := newToy()
	dw := toyDecodeWorker(t, m, 32)
	cd := &callerDecode{Decode: dw}
	pw, err := NewPrefillWorker(toyConfig(m, 32), cd)
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	cp := &callerPrefill{p: pw}
	eng, err := NewDisaggregated(DisaggConfig{Model: "toy", Vocab: m.vocab, Context: EffectiveContext(pw.Context(), dw.Context())}, cp, cd)
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, eng)
	s, err := eng.Submit(context.Background(), &Request{Tenant: "acme", Weight: 3, Prompt: prompt(1, 20), MaxTokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	if r := collect(t, s); r.final.Err != nil {
		t.Fatal(r.final.Err)
	}
	want := caller{"acme", 3}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.got != want || cp.weight != 3 {
		t.Errorf("the Prefill call named %+v in its context and weight %d in the request, want %+v and 3", cp.got, cp.weight, want)
	}
	cd.mu.Lock()
	defer cd.mu.Unlock()
	if len(cd.got) == 0 {
		t.Fatal("no page write or commit reached decode")
	}
	for i, c := range cd.got {
		if c != want {
			t.Errorf("call %d to decode (of %d writes and the commit) named %+v, want %+v", i, len(cd.got)-1, c, want)
		}
	}
}

type caller struct {
	tenant string
	weight int
}

func callerOf(ctx context.Context) caller {
	t, w := handoff.CallerOf(ctx)
	return caller{t, w}
}

// callerDecode records the caller each page write and commit names.
type callerDecode struct {
	handoff.Decode
	mu  sync.Mutex
	got []caller
}

func (d *callerDecode) Write(ctx context.Context, ws []handoff.PageWrite) error {
	d.mu.Lock()
	d.got = append(d.got, callerOf(ctx))
	d.mu.Unlock()
	return d.Decode.Write(ctx, ws)
}

func (d *callerDecode) Commit(ctx context.Context, c *handoff.Commit) error {
	d.mu.Lock()
	d.got = append(d.got, callerOf(ctx))
	d.mu.Unlock()
	return d.Decode.Commit(ctx, c)
}

// callerPrefill records the caller the Prefill call names and its weight,
// and hands the worker a context that names nobody (as a TCP server's
// does): what the worker's calls to decode name, it names itself.
type callerPrefill struct {
	p      handoff.Prefill
	mu     sync.Mutex
	got    caller
	weight int
}

func (p *callerPrefill) Prefill(ctx context.Context, r *handoff.PrefillRequest) (*handoff.PrefillResult, error) {
	p.mu.Lock()
	p.got, p.weight = callerOf(ctx), r.Weight
	p.mu.Unlock()
	bare, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	return p.p.Prefill(bare, r)
}
