package node

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/openai/openai-go/v3"

	"sluice/internal/router"
)

// TestSoakThreeTenantsSmallPool is the load soak (`make soak`):
// 3 tenants, 24 clients, 600 requests (a quarter of them chat requests
// without max_tokens, which reserve the rest of the context) against the
// disaggregated TCP stack on stories260K, context 256, a pool of 512
// tokens per role. Clients retry 429/503 as real ones do; the test counts
// them and requires zero 503s, and every output equal to the same request
// served alone by the colocated engine.
func TestSoakThreeTenantsSmallPool(t *testing.T) {
	if os.Getenv("SLUICE_SOAK") == "" {
		t.Skip("opt-in: set SLUICE_SOAK=1 (make soak) for the 600-request soak")
	}
	m := loadStories(t)
	keys, err := router.ParseKeys(strings.NewReader("key-a alice\nkey-b bob\nkey-c carol\n"))
	if err != nil {
		t.Fatal(err)
	}
	bases := []string{"Once upon a time", "Lily and Tom went to the park", "The little dog was sad because",
		"One day, a girl named Sue found a red ball", "Tim had a big red car. He", "The sun was hot and the bird"}
	const clients, perClient = 24, 25
	type sjob struct {
		key, prompt string
		max         int // 0: chat without max_tokens
	}
	var js []sjob
	for i := 0; i < clients*perClient; i++ {
		j := sjob{key: []string{"key-a", "key-b", "key-c"}[i%3], prompt: strings.Repeat(bases[i%len(bases)]+". ", 1+i%4), max: 16 + (i*37)%112}
		if i%4 == 3 {
			j.max = 0
		}
		js = append(js, j)
	}
	run := func(ctx context.Context, c *openai.Client, j sjob) (string, error) {
		if j.max == 0 {
			r, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(j.prompt)},
				Temperature: openai.Float(0)})
			if err != nil {
				return "", err
			}
			return r.Choices[0].Message.Content, nil
		}
		r, err := complete(ctx, c, job{prompt: j.prompt, max: j.max})
		return r.text, err
	}
	ref := serve(t, m, LocalConfig{Colocated: true, Pools: Pools{Context: 256, PoolTokens: 1024}}, keys)
	want := map[sjob]string{}
	for _, j := range js {
		if _, ok := want[j]; ok {
			continue
		}
		out, err := run(context.Background(), clientFor(ref, j.key), j)
		if err != nil {
			t.Fatal(err)
		}
		want[j] = out
	}
	s := serve(t, m, LocalConfig{Transport: TransportTCP, Pools: Pools{Context: 256, PoolTokens: 512}}, keys)
	var n503, n429, wrong, failed atomic.Int64
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range perClient {
				j := js[c*perClient+k]
				for {
					out, err := run(context.Background(), clientFor(s, j.key), j)
					var ae *openai.Error
					if errors.As(err, &ae) && (ae.StatusCode == 503 || ae.StatusCode == 429) {
						if ae.StatusCode == 503 {
							n503.Add(1)
						} else {
							n429.Add(1)
						}
						continue
					}
					if err != nil {
						failed.Add(1)
						t.Errorf("request %d: %v", c*perClient+k, err)
					} else if out != want[j] {
						wrong.Add(1)
					}
					break
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("soak: %d requests, %d 503s, %d 429s retried, %d wrong outputs, %d failed", len(js), n503.Load(), n429.Load(), wrong.Load(), failed.Load())
	if n503.Load() != 0 || wrong.Load() != 0 || failed.Load() != 0 {
		t.Fatalf("soak: %d 503s, %d wrong outputs, %d failures", n503.Load(), wrong.Load(), failed.Load())
	}
	waitPoolsFree(t, s.stack)
	body := scrape(t, s.ts.URL)
	t.Logf("soak: %s; %s", grepLines(body, "sluice_preemptions_total"), grepLines(body, "sluice_queue_wait_seconds_count"))
}
