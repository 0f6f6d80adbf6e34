package bench

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// The interference workload: what disaggregation is for. Short requests
// (--prompt/--gen, each --concurrency level in flight) stream while long
// prompts (--long-prompt, one client sending them back to back) keep
// arriving. Colocated, a long prompt's chunks share every step with the
// short requests' decode tokens (bounded by --max-num-batched-tokens and
// --prefill-chunk, passed with --sluice-flags); disaggregated, prefill
// runs on its own worker and only the handoff reaches decode. Each
// server also runs the same short load without long prompts ("quiet"),
// so the table shows what the long prompts cost the short requests' ITL.

type interRow struct {
	Concurrency int    `json:"concurrency"`
	Server      string `json:"server"` // sluice-colocated, sluice-disaggregated, llama-server
	// Long is false for the quiet run (no long prompts).
	Long  bool      `json:"long_prompts"`
	Short sideStats `json:"short"`
	// LongStats are the long requests that completed during the run.
	LongStats *sideStats `json:"long,omitempty"`
}

type interReport struct {
	Model       string              `json:"model"`
	Threads     int                 `json:"threads_total"`
	Prompt      int                 `json:"prompt_tokens"`
	Gen         int                 `json:"generated_tokens"`
	LongPrompt  int                 `json:"long_prompt_tokens"`
	LongGen     int                 `json:"long_generated_tokens"`
	Requests    int                 `json:"short_requests_per_run"`
	Repeats     int                 `json:"repeats"`
	NProc       int                 `json:"nproc"`
	CPU         string              `json:"cpu_model"`
	LoadBefore  string              `json:"loadavg_before"`
	LoadAfter   string              `json:"loadavg_after"`
	Args        map[string][]string `json:"server_args"`
	Rows        []interRow          `json:"rows"`
	Interrupted string              `json:"interrupted,omitempty"`
}

// longFirst numbers the long requests apart from the short ones (the
// short runs use 0, 1, ...), run after run.
const longFirst = 1 << 24

// runUntil sends load's requests back to back from clients goroutines,
// numbered from first, until stop is closed; the request in flight then
// is cancelled and not counted (it did not run to its end in the
// measured window).
func runUntil(ctx context.Context, b *benchServe, base string, l serveLoad, clients, first int, stop <-chan struct{}) []streamSample {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-cctx.Done():
		}
	}()
	var next atomic.Int64
	var mu sync.Mutex
	var out []streamSample
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for cctx.Err() == nil {
				i := int(next.Add(1)) - 1
				s := streamOne(cctx, b.client, base, l, first+i)
				if cctx.Err() != nil {
					return
				}
				mu.Lock()
				out = append(out, s)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

type interTarget struct {
	name string
	srv  *server
}

func runInterference(ctx context.Context, b *benchServe) int {
	ctxLen := max(b.prompt+b.gen, b.longPrompt+b.longGen) + 1
	if ctxLen > b.ctxLen {
		return b.fail(2, "--long-prompt + --long-gen = %d exceed the model's context of %d (use a model of a longer context, e.g. one from `sluice synth`)", ctxLen-1, b.ctxLen)
	}
	maxC := slices.Max(b.levels)
	rep := interReport{Model: b.name, Threads: b.threads, Prompt: b.prompt, Gen: b.gen,
		LongPrompt: b.longPrompt, LongGen: b.longGen, Requests: b.requests, Repeats: b.repeats,
		NProc: runtime.NumCPU(), CPU: cpuModel(), LoadBefore: loadAvg(), Args: map[string][]string{}}
	// Pools for every short request in flight and one long request, with
	// a page of headroom each: the workload measures latency, not KV
	// pressure.
	pool := maxC*(b.prompt+b.gen+16) + ctxLen + 16
	var targets []interTarget
	for _, colocated := range []bool{true, false} {
		name := "sluice-disaggregated"
		if colocated {
			name = "sluice-colocated"
		}
		args := b.sluiceArgs(colocated, ctxLen, pool, maxC+1)
		rep.Args[name] = args
		sl, err := startSluice(ctx, b.sluiceBin, args)
		if err != nil {
			return b.fail(1, "%s: %v", name, err)
		}
		defer sl.stop()
		targets = append(targets, interTarget{name, sl})
	}
	if b.llamaServer != "" {
		ll, args, env, err := b.startLlama(ctx, maxC+1, ctxLen)
		if err != nil {
			return b.fail(1, "%v", err)
		}
		defer ll.stop()
		if env != "" {
			args = append([]string{env}, args...)
		}
		rep.Args["llama-server"] = args
		targets = append(targets, interTarget{"llama-server", ll})
	}
	short := b.load()
	long := serveLoad{model: b.name, prompt: b.longPrompt, gen: b.longGen, vocab: b.vocab}
	first, lfirst := 0, longFirst
	for _, c := range b.levels {
		type acc struct {
			short, long []streamSample
			wall        time.Duration
		}
		accs := map[string]*acc{}
		for r := 1; r <= b.repeats && ctx.Err() == nil; r++ {
			for _, withLong := range []bool{false, true} {
				for _, t := range targets {
					key := fmt.Sprint(t.name, withLong)
					a := accs[key]
					if a == nil {
						a = &acc{}
						accs[key] = a
					}
					fmt.Fprintf(b.stderr, "interference: %d short in flight, long prompts %v, run %d/%d: %s\n", c, withLong, r, b.repeats, t.name)
					stop := make(chan struct{})
					longDone := make(chan []streamSample, 1)
					if withLong {
						go func() { longDone <- runUntil(ctx, b, t.srv.base, long, 1, lfirst, stop) }()
					}
					smp, w := runLoad(ctx, b.client, t.srv.base, short, c, b.requests, first)
					close(stop)
					a.short, a.wall = append(a.short, smp...), a.wall+w
					if withLong {
						a.long = append(a.long, <-longDone...)
					}
				}
				// Every server of a pair gets the same prompts.
				first += b.requests
				lfirst += 1 << 16
			}
		}
		for _, withLong := range []bool{false, true} {
			for _, t := range targets {
				a := accs[fmt.Sprint(t.name, withLong)]
				if a == nil {
					continue
				}
				row := interRow{Concurrency: c, Server: t.name, Long: withLong, Short: summarize(a.short, a.wall)}
				if withLong {
					ls := summarize(a.long, a.wall)
					row.LongStats = &ls
				}
				rep.Rows = append(rep.Rows, row)
			}
		}
		if ctx.Err() != nil {
			rep.Interrupted = fmt.Sprintf("--timeout %v reached", b.timeout)
			break
		}
	}
	rep.LoadAfter = loadAvg()
	if code := b.report(rep, func() { printInterference(b.stdout, rep) }); code != 0 {
		return code
	}
	for _, r := range rep.Rows {
		if r.Short.OK != r.Short.Requests || (r.LongStats != nil && r.LongStats.OK != r.LongStats.Requests) {
			return 1
		}
	}
	if rep.Interrupted != "" {
		return 1
	}
	return 0
}

func printInterference(w io.Writer, rep interReport) {
	fmt.Fprintf(w, "model %s, %d threads each; short: prompt %d, %d generated, %d requests x %d repeats; long: prompt %d, %d generated, one client back to back\n",
		rep.Model, rep.Threads, rep.Prompt, rep.Gen, rep.Requests, rep.Repeats, rep.LongPrompt, rep.LongGen)
	fmt.Fprintf(w, "nproc %d, cpu %s, loadavg before %s, after %s\n", rep.NProc, rep.CPU, rep.LoadBefore, rep.LoadAfter)
	for _, n := range []string{"sluice-colocated", "sluice-disaggregated", "llama-server"} {
		if a, ok := rep.Args[n]; ok {
			fmt.Fprintf(w, "%s: %s\n", n, strings.Join(a, " "))
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "C\tserver\tlong prompts\tshort tok/s\tshort TTFT p50\tp99 ms\tshort ITL p50\tp99 ms\tlong done\tlong TTFT p50\tp99 ms\tok\t\n")
	for _, r := range rep.Rows {
		lp, ld, l50, l99 := "no", "", "", ""
		ok := fmt.Sprintf("%d/%d", r.Short.OK, r.Short.Requests)
		if r.LongStats != nil {
			lp, ld = "yes", fmt.Sprint(r.LongStats.OK)
			l50, l99 = fmt.Sprintf("%.0f", r.LongStats.TTFTP50), fmt.Sprintf("%.0f", r.LongStats.TTFTP99)
			ok += fmt.Sprintf(" +%d/%d", r.LongStats.OK, r.LongStats.Requests)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%.1f\t%.1f\t%.1f\t%.2f\t%.2f\t%s\t%s\t%s\t%s\t\n", r.Concurrency, r.Server, lp,
			r.Short.TokS, r.Short.TTFTP50, r.Short.TTFTP99, r.Short.ITLP50, r.Short.ITLP99, ld, l50, l99, ok)
	}
	tw.Flush()
	for _, r := range rep.Rows {
		if r.Short.FirstError != "" {
			fmt.Fprintf(w, "C=%d %s: first error: %s\n", r.Concurrency, r.Server, r.Short.FirstError)
		}
		if r.LongStats != nil && r.LongStats.FirstError != "" {
			fmt.Fprintf(w, "C=%d %s long: first error: %s\n", r.Concurrency, r.Server, r.LongStats.FirstError)
		}
	}
	if rep.Interrupted != "" {
		fmt.Fprintf(w, "interrupted: %s\n", rep.Interrupted)
	}
}
