package node

import (
	"context"
	"testing"
	"time"

	"sluice/internal/engine"
)

// BenchmarkRouterOverhead measures what the HTTP layer (JSON, tokenizer,
// detokenizer, SSE, the OpenAI client) adds over driving the engine
// directly, on stories260K over the TCP stack: the same greedy requests,
// reported as ratios to the direct engine time.
//
//	go test -run '^$' -bench RouterOverhead -benchtime 3x ./internal/router/node
func BenchmarkRouterOverhead(b *testing.B) {
	m := loadStories(b)
	s := serve(b, m, LocalConfig{Transport: TransportTCP, Pools: Pools{Context: 256, PoolTokens: 1024}}, nil)
	refs := storiesRefs(b)
	ctx := context.Background()
	direct := func() {
		for _, rc := range refs {
			st, err := s.stack.Engine.Submit(ctx, &engine.Request{ID: "bench", Tenant: "bench", Prompt: rc.PromptIDs, MaxTokens: 32})
			if err != nil {
				b.Fatal(err)
			}
			for range st.Events() {
			}
		}
	}
	viaHTTP := func(stream bool) {
		for _, rc := range refs {
			if _, err := complete(ctx, s.client, job{prompt: rc.Prompt, max: 32, stream: stream}); err != nil {
				b.Fatal(err)
			}
		}
	}
	var tDirect, tHTTP, tSSE time.Duration
	for b.Loop() {
		// Interleaved so machine noise hits all three alike.
		t0 := time.Now()
		direct()
		t1 := time.Now()
		viaHTTP(false)
		t2 := time.Now()
		viaHTTP(true)
		t3 := time.Now()
		tDirect += t1.Sub(t0)
		tHTTP += t2.Sub(t1)
		tSSE += t3.Sub(t2)
	}
	b.ReportMetric(float64(tHTTP)/float64(tDirect), "http/direct")
	b.ReportMetric(float64(tSSE)/float64(tDirect), "sse/direct")
	b.ReportMetric(float64(tDirect.Microseconds())/float64(b.N*len(refs)), "direct-us/req")
}
