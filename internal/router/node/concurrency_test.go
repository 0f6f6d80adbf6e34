package node

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"sluice/internal/engine"
	"sluice/internal/kv"
	"sluice/internal/router"
)

type job struct {
	tenant string
	prompt string
	max    int
	temp   float64
	seed   int64
	stream bool
	cancel bool // the client goes away after its first text chunk
}

func (j job) params() openai.CompletionNewParams {
	p := openai.CompletionNewParams{Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(j.prompt)},
		MaxTokens: openai.Int(int64(j.max)), Temperature: openai.Float(j.temp)}
	if j.temp > 0 {
		p.Seed = openai.Int(j.seed)
	}
	return p
}

type result struct {
	text   string
	finish string
	usage  openai.CompletionUsage
}

func complete(ctx context.Context, c *openai.Client, j job) (result, error) {
	if !j.stream {
		r, err := c.Completions.New(ctx, j.params())
		if err != nil {
			return result{}, err
		}
		return result{text: r.Choices[0].Text, finish: string(r.Choices[0].FinishReason), usage: r.Usage}, nil
	}
	st := c.Completions.NewStreaming(ctx, j.params(), option.WithJSONSet("stream_options", map[string]any{"include_usage": true}))
	defer st.Close()
	var res result
	for st.Next() {
		ch := st.Current()
		if len(ch.Choices) == 0 {
			res.usage = ch.Usage
			continue
		}
		res.text += ch.Choices[0].Text
		if ch.Choices[0].FinishReason != "" {
			res.finish = string(ch.Choices[0].FinishReason)
		}
	}
	return res, st.Err()
}

func jobs() []job {
	bases := []string{"Once upon a time", "Lily and Tom went to the park", "The little dog was sad because",
		"One day, a girl named Sue found a red ball", "Tim had a big red car. He", "The sun was hot and the bird"}
	tenants := []string{"key-a", "key-b", "key-c"}
	var js []job
	for i := 0; i < 72; i++ {
		p := bases[i%len(bases)]
		if i%4 == 1 {
			p = strings.Repeat(p+". ", 1+i%5) // longer prompts, several pages
		}
		j := job{tenant: tenants[i%3], prompt: p, max: 8 + (i*7)%48, stream: i%3 == 1}
		if i%5 == 2 {
			j.temp, j.seed = 0.9, int64(1000+i)
		}
		if i%9 == 4 {
			// Long enough that the client leaves while decode still runs
			// (with ignore_eos, below).
			j.stream, j.cancel, j.max = true, true, 400
		}
		js = append(js, j)
	}
	return js
}

// 72 requests from 3 tenants at once over the disaggregated TCP stack,
// mixed lengths, greedy and seeded sampling, streaming and not, some
// cancelled by the client mid-way. Every finished output equals the same
// request served alone by the colocated engine (the determinism oracle);
// afterwards every pool is entirely free (cancelled requests released their
// pages, I10); goleak (TestMain) checks no goroutine was left behind.
func TestConcurrentTenantsMatchSoloColocated(t *testing.T) {
	m := loadStories(t)
	keys, err := router.ParseKeys(strings.NewReader("key-a alice\nkey-b bob\nkey-c carol\n"))
	if err != nil {
		t.Fatal(err)
	}
	js := jobs()

	// Reference: each request alone on the colocated engine.
	ref := serve(t, m, LocalConfig{Colocated: true, Pools: Pools{Context: 512, PoolTokens: 1024}}, keys)
	want := make([]result, len(js))
	for i, j := range js {
		c := clientFor(ref, j.tenant)
		r, err := complete(context.Background(), c, job{prompt: j.prompt, max: j.max, temp: j.temp, seed: j.seed})
		if err != nil {
			t.Fatalf("solo %d: %v", i, err)
		}
		want[i] = r
	}

	lifo := func(_ string, c *engine.Config) { c.Order = kv.LIFO } // freed pages are reused at once
	s := serve(t, m, LocalConfig{Transport: TransportTCP, Pools: Pools{Context: 512, PoolTokens: 8192}, MaxConcurrency: 128, Engine: lifo}, keys)
	var wg sync.WaitGroup
	got := make([]result, len(js))
	errs := make([]error, len(js))
	for i, j := range js {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clientFor(s, j.tenant)
			if !j.cancel {
				got[i], errs[i] = complete(context.Background(), c, j)
				return
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			// ignore_eos: the stream cannot end by itself before the
			// client leaves (a story of stories260K can end in fewer
			// tokens than the client, on a loaded machine, takes to
			// cancel; then it is rightly a completed request, not a 499).
			st := c.Completions.NewStreaming(ctx, j.params(), option.WithJSONSet("ignore_eos", true))
			for st.Next() {
				if ch := st.Current(); len(ch.Choices) > 0 && ch.Choices[0].Text != "" {
					cancel() // the client walks away mid-stream
				}
			}
			st.Close()
		}()
	}
	wg.Wait()
	finished := 0
	for i, j := range js {
		if j.cancel {
			continue
		}
		if errs[i] != nil {
			t.Errorf("request %d (%s): %v", i, j.tenant, errs[i])
			continue
		}
		finished++
		w := want[i]
		if got[i].text != w.text || got[i].finish != w.finish || got[i].usage.PromptTokens != w.usage.PromptTokens || got[i].usage.CompletionTokens != w.usage.CompletionTokens {
			t.Errorf("request %d (%s, temp %v, stream %v) differs from its solo colocated run:\n got  %q %s %+v\n want %q %s %+v",
				i, j.tenant, j.temp, j.stream, got[i].text, got[i].finish, got[i].usage, w.text, w.finish, w.usage)
		}
	}
	if finished < 60 {
		t.Fatalf("only %d requests finished", finished)
	}
	waitPoolsFree(t, s.stack)
	waitPoolsFree(t, ref.stack)

	// The cancelled requests really ended as client disconnects (499 in
	// the router's metrics), not as completed ones.
	resp, err := http.Get(s.ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	cancels := 0
	for _, j := range js {
		if j.cancel {
			cancels++
		}
	}
	line := fmt.Sprintf(`sluice_requests_total{code="client_disconnected",route="/v1/completions",status="499"} %d`, cancels)
	if !strings.Contains(string(body), line) {
		t.Fatalf("metrics lack %s:\n%s", line, body)
	}
}

func clientFor(s *served, key string) *openai.Client {
	c := openai.NewClient(option.WithBaseURL(s.ts.URL+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	return &c
}

// waitPoolsFree waits (the last cancelled sequences end between decode
// steps) until every page of every pool is free or an idle prefix-cache page.
func waitPoolsFree(t *testing.T, st *Stack) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var busy []string
		for role, p := range st.Pools {
			// Idle prefix-cache pages are held by no request.
			if s := p.Stats(); s.Free+s.CacheIdle != s.Pages {
				busy = append(busy, fmt.Sprintf("%s: %+v", role, s))
			}
		}
		if len(busy) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pools not free: %v", busy)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
