package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"sluice/internal/engine"
)

// BenchmarkClusterDecodeWorkers runs a fixed load (96 requests, 64 tokens
// each past EOS, 16 at once) through one router over 2 prefill and 1, 2
// or 3 decode workers in this process. On a 2-vCPU machine this shows the
// pairing's balance and overhead, not a speed-up: it reports aggregate
// tokens/s, requests per decode worker and max/min of them (balance).
//
//	go test ./internal/router/node -run '^$' -bench ClusterDecodeWorkers -benchtime 1x
func BenchmarkClusterDecodeWorkers(b *testing.B) {
	m := loadStories(b)
	for _, nd := range []int{1, 2, 3} {
		b.Run(fmt.Sprintf("decode=%d", nd), func(b *testing.B) {
			cs, err := BuildCluster(m, ClusterConfig{LocalConfig: LocalConfig{Pools: Pools{Context: 256, PoolTokens: 2048}, MaxConcurrency: 64},
				PrefillWorkers: 2, DecodeWorkers: nd, Routers: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer cs.Close(context.Background())
			var rs []*engine.Request
			for i := 0; i < 96; i++ {
				rs = append(rs, &engine.Request{Tenant: fmt.Sprint("t", i%3), Prompt: m.Tok.Encode("Once upon a time", true, false), MaxTokens: 64, IgnoreEOS: true})
			}
			b.ResetTimer()
			var tokens int
			start := time.Now()
			for i := 0; i < b.N; i++ {
				for _, g := range runAll(cs, rs, 16, nil) {
					if g.err != nil {
						b.Fatal(g.err)
					}
					tokens += len(g.toks)
				}
			}
			el := time.Since(start)
			b.ReportMetric(float64(tokens)/el.Seconds(), "tok/s")
			ws, _, _ := cs.Clusters[0].Stats()
			lo, hi := uint64(1<<62), uint64(0)
			for _, w := range ws {
				if w.Role == "decode" {
					lo, hi = min(lo, w.Picks), max(hi, w.Picks)
					b.Logf("decode %s: %d requests", w.Name, w.Picks)
				}
			}
			b.ReportMetric(float64(hi)/float64(max(lo, 1)), "max/min-requests")
		})
	}
}
