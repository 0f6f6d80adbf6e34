package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"sluice/internal/gguf"
	"sluice/internal/kv"
	"sluice/internal/synth"
)

// BenchmarkDecodeSafeguards measures decode throughput of the disaggregated
// engine with every safeguard on against every safeguard off (owner and
// generation tags, written extents, scrub, count/coverage, digest and
// checksum), interleaved in one run so machine noise hits both alike. The
// number to read is on/off (target >= 0.99).
func BenchmarkDecodeSafeguards(b *testing.B) {
	rt := defaultRuntime(b)
	const conc, promptLen, gen = 8, 16, 96
	mk := func(u Unsafe) *Local {
		cfg := Config{Model: rt, Context: 256, PoolPages: 128, PageSize: 16, Order: kv.LIFO, Unsafe: u}
		l, err := NewLocal(cfg, cfg)
		if err != nil {
			b.Fatal(err)
		}
		return l
	}
	on := mk(Unsafe{})
	off := mk(Unsafe{NoCountCheck: true, NoDigest: true, NoOwnerCheck: true, NoExtentCheck: true, NoScrub: true})
	defer closeWithin(b, on)
	defer closeWithin(b, off)
	run := func(e Engine) time.Duration {
		start := time.Now()
		var streams []Stream
		for i := 0; i < conc; i++ {
			s, err := e.Submit(context.Background(), &Request{Tenant: fmt.Sprint(i % 3), Prompt: prompt(i, promptLen), MaxTokens: gen, IgnoreEOS: true})
			if err != nil {
				b.Fatal(err)
			}
			streams = append(streams, s)
		}
		for _, s := range streams {
			if r := collect(b, s); r.final.Err != nil || len(r.tokens) != gen {
				b.Fatalf("%v, %d tokens", r.final.Err, len(r.tokens))
			}
		}
		return time.Since(start)
	}
	run(on)
	run(off)
	b.ResetTimer()
	var tOn, tOff time.Duration
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			tOn += run(on)
			tOff += run(off)
		} else {
			tOff += run(off)
			tOn += run(on)
		}
	}
	toks := float64(conc * gen * b.N)
	b.ReportMetric(toks/tOn.Seconds(), "tok/s-on")
	b.ReportMetric(toks/tOff.Seconds(), "tok/s-off")
	b.ReportMetric(tOff.Seconds()/tOn.Seconds(), "on/off")
}

// defaultRuntime is the built-in synthetic model.
func defaultRuntime(t testing.TB) Runtime {
	t.Helper()
	b, err := synth.Default()
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	rt, _, err := LoadRuntime("default", f)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}
