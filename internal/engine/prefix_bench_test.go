package engine

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"sluice/internal/kv"
)

// BenchmarkPrefixCacheChat: multi-turn chat on the built-in model, colocated,
// with the prefix cache on and off, interleaved in one run. Each of 4
// conversations (2 tenants) runs 4 turns; every prompt is a shared
// 496-token system prompt, the conversation so far and a 24-token user
// turn; 16 tokens are generated. Reported: TTFT medians (ms) and off/on.
func BenchmarkPrefixCacheChat(b *testing.B) {
	rt := defaultRuntime(b)
	mk := func(cache bool) *Colocated {
		e, err := NewColocated(Config{Model: rt, Context: 1024, PoolPages: 512, PageSize: 16, Order: kv.LIFO, ChunkTokens: 64, StepTokens: 256, PrefixCache: cache})
		if err != nil {
			b.Fatal(err)
		}
		return e
	}
	on, off := mk(true), mk(false)
	defer closeWithin(b, on)
	defer closeWithin(b, off)
	chatTTFT(b, on, off)
}

// BenchmarkDecodePrefixCacheChat: the same chat traffic disaggregated
// (in-process link), the prefill worker's cache on in both engines and the
// decode worker's cache on in one: with it, decode already holds each
// turn's earlier pages, so prefill sends only the pages after them
// (decode_prefix_len). Reported: TTFT medians (ms), off/on, and the prompt
// pages each engine transferred per request.
func BenchmarkDecodePrefixCacheChat(b *testing.B) {
	rt := defaultRuntime(b)
	cfg := Config{Model: rt, Context: 1024, PoolPages: 512, PageSize: 16, Order: kv.LIFO, ChunkTokens: 64, StepTokens: 256, PrefixCache: true}
	mk := func(decodeCache bool) *Local {
		d := cfg
		d.PrefixCache = decodeCache
		e, err := NewLocal(cfg, d)
		if err != nil {
			b.Fatal(err)
		}
		return e
	}
	on, off := mk(true), mk(false)
	defer closeWithin(b, on)
	defer closeWithin(b, off)
	n := chatTTFT(b, on, off)
	b.ReportMetric(float64(on.Decode.ReceiverStats().PagesTransferred)/float64(n), "pages_sent_on")
	b.ReportMetric(float64(off.Decode.ReceiverStats().PagesTransferred)/float64(n), "pages_sent_off")
}

// chatTTFT runs the chat traffic of the benchmarks above on two engines,
// alternating which goes first, requires both to generate the same tokens,
// reports the TTFT medians (ms) and off/on, and returns the requests run
// per engine.
func chatTTFT(b *testing.B, on, off Engine) int {
	system := prompt(7, 496)
	var tOn, tOff []float64
	ttft := func(e Engine, r *Request) ([]int32, float64) {
		start := time.Now()
		s, err := e.Submit(context.Background(), r)
		if err != nil {
			b.Fatal(err)
		}
		var first time.Duration
		var out []int32
		for ev := range s.Events() {
			if ev.Err != nil {
				b.Fatal(ev.Err)
			}
			if !ev.Done {
				if out == nil {
					first = time.Since(start)
				}
				out = append(out, ev.Token)
			}
		}
		return out, first.Seconds() * 1e3
	}
	n := 0
	for i := 0; i < b.N; i++ {
		for c := range 4 {
			hist := slices.Clone(system)
			for turn := range 4 {
				hist = append(hist, prompt(100*c+turn, 24)...)
				r := &Request{Tenant: fmt.Sprint("t", c%2), Prompt: slices.Clone(hist), MaxTokens: 16, IgnoreEOS: true}
				var a, bb []int32
				var x, y float64
				if (c+turn)%2 == 0 {
					a, x = ttft(on, r)
					bb, y = ttft(off, r)
				} else {
					bb, y = ttft(off, r)
					a, x = ttft(on, r)
				}
				if !slices.Equal(a, bb) {
					b.Fatal("the two engines generated different tokens")
				}
				tOn, tOff = append(tOn, x), append(tOff, y)
				hist = append(hist, a...)
				n++
			}
		}
	}
	med := func(v []float64) float64 { s := slices.Clone(v); slices.Sort(s); return s[len(s)/2] }
	b.ReportMetric(med(tOn), "ttft_on_ms")
	b.ReportMetric(med(tOff), "ttft_off_ms")
	b.ReportMetric(med(tOff)/med(tOn), "off/on")
	return n
}
