package engine

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"sluice/internal/grammar"
	"sluice/internal/handoff"
	"sluice/internal/sample"
)

// waitSchema is the schema the compile-wait tests hold.
const waitSchema = `{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false}`

// waitRequest is tenant a's constrained request of waitSchema.
func waitRequest(id string) *Request {
	return &Request{ID: id, Tenant: "a", Prompt: []int32{1, 365, 117, 263}, MaxTokens: 12,
		Sampling: sample.Params{Temperature: 1, Seed: 5, Format: sample.Format{Kind: sample.FormatJSONSchema, Schema: waitSchema}}}
}

// holdCompiles makes f's grammar cache hold every compile until the
// returned release runs; entered receives one value per compile begun.
func holdCompiles(t *testing.T, f *formats) (cache *grammar.Cache, entered <-chan struct{}, release func()) {
	t.Helper()
	cache = f.get()
	if cache == nil {
		t.Fatal("no grammar cache: the model has no vocabulary")
	}
	in, gate := make(chan struct{}, 8), make(chan struct{})
	cache.CompileWith(func(schema []byte) (*grammar.Grammar, error) {
		in <- struct{}{}
		<-gate
		return grammar.CompileSchema(schema)
	})
	var closed bool
	release = func() {
		if !closed {
			closed = true
			close(gate)
		}
	}
	t.Cleanup(release)
	return cache, in, release
}

// await receives from ch within 20 s (a loaded machine) or fails.
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// soloTokens is r's output alone on a colocated engine of its own.
func soloTokens(t *testing.T, rt *ModelRuntime, r *Request) []int32 {
	t.Helper()
	col, err := NewColocated(storiesConfig(rt, 32))
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, col)
	s, err := col.Submit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	res := collect(t, s)
	if res.final.Err != nil || len(res.tokens) == 0 {
		t.Fatalf("the reference run: %d tokens, %v", len(res.tokens), res.final.Err)
	}
	return res.tokens
}

type submitted struct {
	s   Stream
	err error
}

func submitAsync(e Engine, ctx context.Context, r *Request) <-chan submitted {
	ch := make(chan submitted, 1)
	go func() {
		s, err := e.Submit(ctx, r)
		ch <- submitted{s, err}
	}()
	return ch
}

// A colocated request whose client leaves while it waits for the same
// tenant's compile of its schema (another request's) ends at once with
// 499 cancelled (the router's client_disconnected), holding no pages;
// the request that compiles is not touched: once its compile ends it
// runs to the output it has alone.
func TestColocatedCancelWhileWaitingForCompile(t *testing.T) {
	rt := storiesRuntime(t)
	want := soloTokens(t, rt, waitRequest("A"))
	col, err := NewColocated(storiesConfig(rt, 32))
	if err != nil {
		t.Fatal(err)
	}
	// Closed after the compiles are released (cleanups run last first).
	t.Cleanup(func() { closeWithin(t, col) })
	cache, entered, release := holdCompiles(t, col.cfg.formats)
	a := submitAsync(col, context.Background(), waitRequest("A"))
	await(t, entered, "A's compile")
	ctx, cancel := context.WithCancel(context.Background())
	b := submitAsync(col, ctx, waitRequest("B"))
	waitFor(t, "B to wait for A's compile", func() bool { return cache.Waiting() == 1 })
	cancel()
	got := await(t, b, "B's end")
	var e *Error
	if !errors.As(got.err, &e) || e.Code != CodeCancelled || e.Status != StatusClientClosed {
		t.Fatalf("B, cancelled while it waited for A's compile: %v, want a 499 %s", got.err, CodeCancelled)
	}
	if n := cache.Waiting(); n != 0 {
		t.Fatalf("%d Gets still wait after B left", n)
	}
	if c := col.Pool().Counts(); c.Free != c.Pages {
		t.Fatalf("pages held while A still compiles and B has ended: %+v", c)
	}
	release()
	ra := await(t, a, "A's Submit")
	if ra.err != nil {
		t.Fatal(ra.err)
	}
	if res := collect(t, ra.s); res.final.Err != nil || !slices.Equal(res.tokens, want) {
		t.Fatalf("A after B left: %v %v, want %v as alone", res.tokens, res.final.Err, want)
	}
	waitFreePool(t, col.Pool())
}

// A prefill worker given a prompt up (the router's close frame, a
// revoked reservation: the Prefill call's ctx ends) while the prompt
// waits for the same tenant's compile of its schema (another prompt's)
// aborts its handoff at once: decode's reservation for it is released,
// and the other prompt, once its compile ends, hands off and decodes to
// the output it has alone.
func TestPrefillAbortWhileWaitingForCompile(t *testing.T) {
	rt := storiesRuntime(t)
	want := soloTokens(t, rt, waitRequest("A"))
	loc, err := NewLocal(storiesConfig(rt, 32), storiesConfig(rt, 32))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeWithin(t, loc) })
	cache, entered, release := holdCompiles(t, loc.Prefill.cfg.formats)
	a := submitAsync(loc, context.Background(), waitRequest("A"))
	await(t, entered, "A's compile on the prefill worker")
	dpool := loc.Decode.Pool()
	free := dpool.Counts().Free // A's reservation taken

	rb := waitRequest("B")
	id := newID()
	fp := FingerprintOf(rt)
	res, err := loc.Decode.Reserve(context.Background(), &handoff.Reserve{Handoff: id, Tenant: rb.Tenant,
		PromptTokens: len(rb.Prompt), MaxTokens: rb.MaxTokens, Model: fp})
	if err != nil {
		t.Fatal(err)
	}
	if dpool.Counts().Free >= free {
		t.Fatal("B's reservation took no decode pages")
	}
	failed := loc.Prefill.stats.failed.Load()
	ctx, cancel := context.WithCancel(context.Background())
	perr := make(chan error, 1)
	go func() {
		_, err := loc.Prefill.Prefill(ctx, &handoff.PrefillRequest{Handoff: id, Tenant: rb.Tenant, Tokens: rb.Prompt,
			Reservation: res, Sampling: rb.Sampling, Model: fp, Weight: 1})
		perr <- err
	}()
	waitFor(t, "B's prompt to wait for A's compile", func() bool { return cache.Waiting() == 1 })
	cancel()
	if err := await(t, perr, "B's Prefill"); !errors.Is(err, handoff.ErrAborted) {
		t.Fatalf("B, given up while it waited for A's compile: %v, want %v", err, handoff.ErrAborted)
	}
	if n := loc.Prefill.stats.failed.Load() - failed; n != 1 {
		t.Fatalf("%d failed handoffs counted for B, want 1", n)
	}
	waitFor(t, "B's decode reservation to be released", func() bool { return dpool.Counts().Free == free })
	if c := loc.Prefill.Pool().Counts(); c.Free != c.Pages {
		t.Fatalf("prefill pages held while A still compiles and B has ended: %+v", c)
	}
	release()
	ra := await(t, a, "A's Submit")
	if ra.err != nil {
		t.Fatal(ra.err)
	}
	if r := collect(t, ra.s); r.final.Err != nil || !slices.Equal(r.tokens, want) {
		t.Fatalf("A after B was given up: %v %v, want %v as alone", r.tokens, r.final.Err, want)
	}
	waitFreePool(t, loc.Prefill.Pool())
	waitFreePool(t, dpool)
}
