package engine

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"sluice/internal/handoff"
)

// A committed handoff's first token reaches its stream as the commit is
// accepted, not when the decode batch next takes joiners: here the batch
// is held inside another tenant's decode step the whole time, so no step
// boundary comes between b's commit and the check. Counted in steps, not
// time: the token is on the stream when Commit (inside the prefill
// worker's Prefill) returned, with the stream opened before the commit
// and, the other order, when Stream returned. Then the sequence decodes
// on from it: every token once, the reference's, to max_tokens (a first
// token sent twice, or counted twice, shows here), and one that ends at
// its first token (max_tokens 1) ends right after it.
func TestFirstTokenOnStreamAtCommit(t *testing.T) {
	for _, c := range []struct {
		name        string
		streamFirst bool
		max         int
	}{{"stream before commit", true, 9}, {"stream after commit", false, 9}, {"max_tokens 1", true, 1}} {
		t.Run(c.name, func(t *testing.T) {
			m := newToy()
			g := &gated{toy: m, after: 0, entered: make(chan struct{}), release: make(chan struct{})}
			released := false
			release := func() {
				if !released {
					released = true
					close(g.release)
				}
			}
			dw := toyDecodeWorker(t, g, 40)
			pw, err := NewPrefillWorker(toyConfig(m, 40), dw)
			if err != nil {
				t.Fatal(err)
			}
			defer pw.Close()
			defer release() // first: the workers' Close waits for the held step
			ctx := context.Background()
			handoffTo := func(tenant string, p []int32, max int, streamFirst bool) (handoff.TokenStream, *handoff.PrefillResult) {
				t.Helper()
				id := newID()
				res, err := dw.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: tenant, PromptTokens: len(p), MaxTokens: max, Model: FingerprintOf(m)})
				if err != nil {
					t.Fatal(err)
				}
				var ts handoff.TokenStream
				if streamFirst {
					if ts, err = dw.Stream(ctx, id, handoff.StreamParams{IgnoreEOS: true}); err != nil {
						t.Fatal(err)
					}
				}
				pr, err := pw.Prefill(ctx, &handoff.PrefillRequest{Handoff: id, Tenant: tenant, Tokens: p, Reservation: res, Model: FingerprintOf(m)})
				if err != nil {
					t.Fatal(err)
				}
				if !streamFirst {
					if ts, err = dw.Stream(ctx, id, handoff.StreamParams{IgnoreEOS: true}); err != nil {
						t.Fatal(err)
					}
				}
				return ts, pr
			}
			// a's sequence joins and its first decode step (the decode
			// forwarder's first) is held.
			tsA, _ := handoffTo("a", prompt(3, 11), 20, true)
			g.wait(t)
			pb := prompt(7, 9)
			tsB, pr := handoffTo("b", pb, c.max, c.streamFirst)
			want := toyReference(m, pb, c.max, true)
			if pr.FirstToken != want[0] {
				t.Fatalf("prefill's first token %d, reference %d", pr.FirstToken, want[0])
			}
			tok, ok, err := tsB.(*tokenStream).TryRecv()
			if err != nil || !ok || tok.Err != nil || tok.Done || tok.ID != want[0] {
				t.Fatalf("with the batch held mid-step, b's stream has %+v (ok %v, %v), want its first token %d at once", tok, ok, err, want[0])
			}
			if _, ok, _ := tsB.(*tokenStream).TryRecv(); ok {
				t.Fatal("b's stream has a second item before any step ran")
			}
			release()
			got := []int32{tok.ID}
			for {
				tok, err := tsB.Recv()
				if err != nil || tok.Err != nil {
					t.Fatalf("b's stream: %v %v", err, tok.Err)
				}
				if tok.Done {
					if tok.Finish != "length" || tok.CompletionTokens != c.max {
						t.Fatalf("b ended %q after %d tokens counted, want length after %d", tok.Finish, tok.CompletionTokens, c.max)
					}
					break
				}
				got = append(got, tok.ID)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("b's tokens %v, reference %v", got, want)
			}
			if n, err := drainStream(t, tsA); err != nil || n != 20 {
				t.Fatalf("a's stream: %d tokens, %v", n, err)
			}
			waitDrained(t, dw.Pool(), pw.Pool())
		})
	}
}

// commitSeen is a decode client that closes seen at the first Commit.
type commitSeen struct {
	handoff.Decode
	once sync.Once
	seen chan struct{}
}

func (d *commitSeen) Commit(ctx context.Context, c *handoff.Commit) error {
	d.once.Do(func() { close(d.seen) })
	return d.Decode.Commit(ctx, c)
}

// A streamed prompt's end tells the push itself, from the scheduler's
// goroutine: the last pages and the commit go without waiting for the
// Prefill call's goroutine to learn that the prompt ended (one thread
// crossing less before the first token). Here that goroutine is held as
// it learns it until decode has the commit: the commit comes anyway, and
// the request completes as before.
func TestPrefillCommitsBeforeItsCallerWakes(t *testing.T) {
	m := newToy()
	l := toyLocal(t, m)
	cs := &commitSeen{Decode: l.Prefill.decode, seen: make(chan struct{})}
	l.Prefill.decode = cs
	held := make(chan bool, 1)
	l.Prefill.promptEnded = func() {
		select {
		case <-cs.seen:
			held <- true
		case <-time.After(10 * time.Second):
			held <- false
		}
	}
	st, err := l.Submit(context.Background(), &Request{Tenant: "t1", Prompt: prompt(4, 21), MaxTokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	if got := collect(t, st); got.final.Err != nil || len(got.tokens) != 3 {
		t.Fatalf("request ended %+v with %d tokens", got.final, len(got.tokens))
	}
	if !<-held {
		t.Fatal("the commit waited for the Prefill call's goroutine to learn the prompt ended")
	}
}
