package node

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
)

// I10 at every phase: clients that vanish right after sending (admission,
// reservation, prefill, transfer) or at various points of decoding, over
// every transport. Whatever the phase, the request ends by the normal path:
// every pool is entirely free afterwards, no goroutine is left (goleak),
// and the server still answers correctly.
func TestDisconnectAtEveryPhase(t *testing.T) {
	m := loadStories(t)
	refs := storiesRefs(t)
	for _, tr := range []string{TransportInproc, TransportTCP, TransportSHM} {
		t.Run(tr, func(t *testing.T) {
			s := serve(t, m, LocalConfig{Transport: tr, Pools: Pools{Context: 512, PoolTokens: 4096}}, nil)
			delays := []time.Duration{0, 50 * time.Microsecond, 200 * time.Microsecond, time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond, 30 * time.Millisecond}
			var wg sync.WaitGroup
			for i, d := range delays {
				for _, stream := range []bool{false, true} {
					wg.Add(1)
					go func() {
						defer wg.Done()
						ctx, cancel := context.WithCancel(context.Background())
						time.AfterFunc(d, cancel)
						j := job{prompt: refs[i%len(refs)].Prompt, max: 300, stream: stream}
						complete(ctx, s.client, j)
						cancel()
					}()
				}
			}
			wg.Wait()
			waitPoolsFree(t, s.stack)
			r, err := s.client.Completions.New(context.Background(), openai.CompletionNewParams{
				Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(refs[0].Prompt)}, MaxTokens: openai.Int(32), Temperature: openai.Float(0)})
			if err != nil || r.Choices[0].Text != refs[0].GeneratedText {
				t.Fatalf("after the disconnects: %v %+v", err, r)
			}
		})
	}
}
