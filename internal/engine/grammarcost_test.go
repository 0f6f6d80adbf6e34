package engine

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/grammar"
	"sluice/internal/sample"
	"sluice/internal/tokenizer"
)

// wide is the toy model with Qwen2's 151,646-token vocabulary (committed
// under testdata/vocab) and a forward step of about d: its logits are one
// of a few flat random vectors, chosen by the toy's own (KV-dependent)
// logits, so a constrained request at temperature 1 draws a token the
// grammar refuses at most structural positions and needs masks over the
// whole vocabulary, as a random large model does.
type wide struct {
	*toy
	d    time.Duration
	v    *grammar.Vocab
	flat [][]float32
}

var (
	qwen2Once  sync.Once
	qwen2Vocab *grammar.Vocab
	qwen2Tok   *tokenizer.Tokenizer
	qwen2Err   error
)

func newWide(t testing.TB, d time.Duration) *wide {
	t.Helper()
	qwen2Once.Do(func() {
		tok, err := tokenizer.Load("../../testdata/vocab/ggml-vocab-qwen2.gguf")
		if err != nil {
			qwen2Err = err
			return
		}
		qwen2Vocab, qwen2Tok = TokenizerVocab(tok), tok
	})
	if qwen2Err != nil {
		t.Fatal(qwen2Err)
	}
	m := &wide{toy: newToy(), d: d, v: qwen2Vocab}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 8 {
		l := make([]float32, m.v.Size())
		for i := range l {
			l[i] = float32(rng.NormFloat64()) * 0.5
		}
		m.flat = append(m.flat, l)
	}
	return m
}

func (m *wide) Vocab() int                   { return m.v.Size() }
func (m *wide) GrammarVocab() *grammar.Vocab { return m.v }
func (m *wide) NewForwarder(n int) Forwarder { return &wideFwd{m, m.toy.NewForwarder(n)} }
func (m *wide) EOG(tok int32) bool           { return false }
func (m *wide) logits(small []float32) []float32 {
	var h uint64
	for _, x := range small[:8] {
		h = h*31 + uint64(math.Float32bits(x))
	}
	return m.flat[h%uint64(len(m.flat))]
}

type wideFwd struct {
	m *wide
	f Forwarder
}

func (f *wideFwd) Forward(s []Step) []StepResult {
	time.Sleep(f.m.d)
	res := f.f.Forward(s)
	for i := range res {
		if res[i].Err == nil {
			res[i].Logits = f.m.logits(res[i].Logits)
		}
	}
	return res
}

// adversarialSchema is a schema no cache has seen (a fresh property name
// each time: every mask position is cold) whose strings are wide byte
// classes: masks inside them are walks of most of the 151k-token trie.
func adversarialSchema(n int) string {
	var props, req []string
	for i := range 6 {
		props = append(props, fmt.Sprintf(`"k%d_%d":{"type":"string","maxLength":%d}`, n, i, 4+i))
		req = append(req, fmt.Sprintf(`"k%d_%d"`, n, i))
	}
	return `{"type":"object","properties":{` + strings.Join(props, ",") + `},"required":[` + strings.Join(req, ",") + `],"additionalProperties":false}`
}

// itl streams one request and returns the gaps between its tokens.
func itl(t *testing.T, e Engine, r *Request) []time.Duration {
	t.Helper()
	s, err := e.Submit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	var gaps []time.Duration
	var last time.Time
	timeout := time.After(60 * time.Second)
	for {
		select {
		case ev, ok := <-s.Events():
			if !ok {
				return gaps
			}
			if ev.Err != nil {
				t.Fatalf("co-tenant: %v", ev.Err)
			}
			if ev.Done {
				continue
			}
			now := time.Now()
			if !last.IsZero() {
				gaps = append(gaps, now.Sub(last))
			}
			last = now
		case <-timeout:
			t.Fatal("co-tenant stream hung")
		}
	}
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func quantile(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}

// Tenant isolation of cost: one tenant's constrained requests must not
// slow another tenant's decode. Tenant "evil" keeps 3 requests running,
// each with a schema never seen before and wide string classes, at
// temperature 1 over a flat 151k-token distribution, so nearly every
// structural token needs a cold mask over the whole vocabulary (a trie
// walk of tens of milliseconds, where a step takes 2). Tenant "b" streams
// an unconstrained request meanwhile. The same adversary with the same
// sampling but no response_format is the baseline; the two phases
// alternate in one run, and b's inter-token latency is compared: the
// grammar work on the shared step is bounded (GrammarShare of the
// forward time) and what does not fit waits in evil's own requests.
func TestConstrainedTenantDoesNotSlowCoTenant(t *testing.T) {
	if testing.Short() {
		t.Skip("timing test; runs in the full suite")
	}
	m := newWide(t, 2*time.Millisecond)
	cfg := toyConfig(m, 512)
	cfg.Context = 256
	col, err := NewColocated(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, col)
	var schemaN int
	var mu sync.Mutex
	var advTokens [2]atomic.Int64 // index: constrained
	phase := func(constrained bool) (gaps []time.Duration, deferred int64) {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		started := make(chan struct{}, 3)
		d0 := col.sched.deferrals.Load()
		for i := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; ctx.Err() == nil; n++ {
					p := sample.Params{} // greedy: the argmax is refused at most positions, so most draws need a mask
					if constrained {
						mu.Lock()
						schemaN++
						p.Format = sample.Format{Kind: sample.FormatJSONSchema, Schema: adversarialSchema(schemaN)}
						mu.Unlock()
					}
					s, err := col.Submit(ctx, &Request{Tenant: "evil", Prompt: prompt(i*100+n, 3), MaxTokens: 60, Sampling: p, IgnoreEOS: !constrained})
					if err != nil {
						return
					}
					first := true
					for ev := range s.Events() {
						if ev.Err == nil && !ev.Done {
							advTokens[b2i(constrained)].Add(1)
						}
						if first && ev.Err == nil && !ev.Done {
							first = false
							select {
							case started <- struct{}{}:
							default:
							}
						}
					}
				}
			}()
		}
		for range 3 {
			<-started
		}
		gaps = itl(t, col, &Request{Tenant: "b", Prompt: prompt(7, 3), MaxTokens: 80, IgnoreEOS: true})
		cancel()
		wg.Wait()
		return gaps, col.sched.deferrals.Load() - d0
	}
	var alone, free, cons []time.Duration
	var deferred int64
	for range 3 {
		alone = append(alone, itl(t, col, &Request{Tenant: "b", Prompt: prompt(7, 3), MaxTokens: 80, IgnoreEOS: true})...)
		g, _ := phase(false)
		free = append(free, g...)
		g, d := phase(true)
		cons = append(cons, g...)
		deferred += d
	}
	mean := func(d []time.Duration) time.Duration {
		var s time.Duration
		for _, x := range d {
			s += x
		}
		return s / time.Duration(len(d))
	}
	rMean := float64(mean(cons)) / float64(mean(free))
	r50 := float64(quantile(cons, 0.5)) / float64(quantile(free, 0.5))
	r90 := float64(quantile(cons, 0.9)) / float64(quantile(free, 0.9))
	for _, c := range []struct {
		name string
		d    []time.Duration
	}{{"alone", alone}, {"adversary unconstrained", free}, {"adversary constrained", cons}} {
		t.Logf("co-tenant ITL %-24s mean %6.2f ms  p50 %6.2f  p90 %6.2f  max %7.2f  (x alone: mean %.2f p50 %.2f p90 %.2f)", c.name,
			ms(mean(c.d)), ms(quantile(c.d, 0.5)), ms(quantile(c.d, 0.9)), ms(slices.Max(c.d)),
			float64(mean(c.d))/float64(mean(alone)), float64(quantile(c.d, 0.5))/float64(quantile(alone, 0.5)), float64(quantile(c.d, 0.9))/float64(quantile(alone, 0.9)))
	}
	t.Logf("constrained / unconstrained adversary: mean %.2f p50 %.2f p90 %.2f; adversary tokens %d unconstrained, %d constrained, %d draws deferred",
		rMean, r50, r90, advTokens[0].Load(), advTokens[1].Load(), deferred)
	// Bounds with room for a loaded machine's noise (seen up to mean
	// 1.19, p90 1.41 at load average 15-25); masks on the shared step
	// measured mean 10-12, p90 33-38.
	if rMean > 2 || r50 > 1.5 || r90 > 3 {
		t.Fatalf("the constrained tenant slowed its co-tenant: ITL ratio mean %.2f, p50 %.2f, p90 %.2f (bounds 2, 1.5, 3)", rMean, r50, r90)
	}
	if deferred == 0 {
		t.Fatal("no adversary draw was deferred: the test did not reach the cold masks")
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
