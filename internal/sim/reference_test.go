package sim

import (
	"context"
	"slices"
	"testing"
	"time"

	"sluice/internal/engine"
	"sluice/internal/kv"
)

// TestReferenceMatchesColocated ties the simulator's oracle to the
// engine's reference path: for every prompt and page size, the colocated
// engine (chunked prefill, continuous batching, all requests in flight at
// once) produces exactly the reference tokens.
func TestReferenceMatchesColocated(t *testing.T) {
	env := testEnv(t)
	rt := engine.NewModelRuntime("sim-default", env.model, nil)
	for _, ps := range []int{2, 4, 8} {
		e, err := engine.NewColocated(engine.Config{Model: rt, Context: 256, PoolPages: 512, PageSize: ps, Order: kv.LIFO, ChunkTokens: 5})
		if err != nil {
			t.Fatal(err)
		}
		streams := make([]engine.Stream, len(env.prompts))
		for i, p := range env.prompts {
			streams[i], err = e.Submit(context.Background(), &engine.Request{Tenant: "t", Prompt: p, MaxTokens: maxGen, IgnoreEOS: true})
			if err != nil {
				t.Fatal(err)
			}
		}
		for i, s := range streams {
			var got []int32
			deadline := time.After(60 * time.Second)
		read:
			for {
				select {
				case ev, ok := <-s.Events():
					if !ok {
						break read
					}
					if ev.Err != nil {
						t.Fatalf("page %d prompt %d: %v", ps, i, ev.Err)
					}
					if !ev.Done {
						got = append(got, ev.Token)
					}
				case <-deadline:
					t.Fatalf("page %d prompt %d: no end in 60s", ps, i)
				}
			}
			if want := env.ref(i, ps, 0).tokens; !slices.Equal(got, want) {
				t.Errorf("page %d prompt %d (%d tokens): colocated %v, simulator reference %v", ps, i, len(env.prompts[i]), got, want)
			}
		}
		if err := e.Pool().CheckDrained(); err != nil {
			t.Error(err)
		}
		if err := e.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}
