package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"sluice/internal/handoff"
)

// A decode worker shut down between accepting a commit and the batch's
// join has sent the commit's first token to the stream already (at the
// commit, TestFirstTokenOnStreamAtCommit); the shutdown error that ends
// the stream then counts it: one completion token, the one the client got.
// Counted only at the join, it would say 0, and usage would disagree
// with the stream. The worker is driven (never stepped), so the
// sequence is certainly still waiting to join when Close comes.
func TestShutdownBeforeJoinCountsFirstToken(t *testing.T) {
	m := newToy()
	cfg := toyConfig(m, 40).withDefaults()
	pool, err := cfg.newPool()
	if err != nil {
		t.Fatal(err)
	}
	dw, err := NewDrivenDecodeWorker(toyConfig(m, 40), Driven{Pool: pool, Now: time.Now, Wake: func() {}})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			dw.Close()
		}
	}()
	pw, err := NewPrefillWorker(toyConfig(m, 40), dw)
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	ctx := context.Background()
	p := prompt(5, 9)
	id := newID()
	res, err := dw.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "t", PromptTokens: len(p), MaxTokens: 6, Model: FingerprintOf(m)})
	if err != nil {
		t.Fatal(err)
	}
	ts, err := dw.Stream(ctx, id, handoff.StreamParams{IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	pr, err := pw.Prefill(ctx, &handoff.PrefillRequest{Handoff: id, Tenant: "t", Tokens: p, Reservation: res, Model: FingerprintOf(m)})
	if err != nil {
		t.Fatal(err)
	}
	first, err := ts.Recv()
	if err != nil || first.Err != nil || first.Done || first.ID != pr.FirstToken {
		t.Fatalf("the stream's first item %+v (%v), want the first token %d", first, err, pr.FirstToken)
	}
	dw.Close()
	closed = true
	end, err := ts.Recv()
	if err != nil || end.Err == nil {
		t.Fatalf("after the shutdown the stream has %+v (%v), want the shutdown error", end, err)
	}
	if !strings.Contains(end.Err.Error(), "shut down") {
		t.Fatalf("the stream ended with %v, want the shutdown error", end.Err)
	}
	if end.CompletionTokens != 1 || end.PromptTokens != len(p) {
		t.Fatalf("the shutdown error counts %d completion and %d prompt tokens; the stream carried 1 token of a %d-token prompt", end.CompletionTokens, end.PromptTokens, len(p))
	}
}

// The other way a sequence ends before it joins: its start reaches a
// scheduler already shut down (add). Its first token, sent, is counted.
func TestAddAfterShutdownCountsFirstToken(t *testing.T) {
	cfg := toyConfig(newToy(), 8).withDefaults()
	pool, err := cfg.newPool()
	if err != nil {
		t.Fatal(err)
	}
	s := newDrivenScheduler(cfg, pool, func() {})
	s.stop()
	var got []outcome
	q := &seq{promptTokens: 3, maxTokens: 4, first: 1, hasFirst: true, firstSent: true, emit: func(o outcome) { got = append(got, o) }}
	s.add(q)
	if len(got) != 1 || got[0].err == nil || got[0].completion != 1 || got[0].prompt != 3 {
		t.Fatalf("a sequence added after the shutdown ended with %+v, want the shutdown error counting its sent first token", got)
	}
}
