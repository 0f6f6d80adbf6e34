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
)

// The long-context workload (issue 31): the time to first token of one
// long prompt (--long-prompt, 32k by default in `make bench-longctx`)
// served colocated, disaggregated over TCP, disaggregated over shm (each
// prompt's pages streamed to decode while the rest of it computes), the
// same over TCP with --handoff-after-prefill (the transfer after the
// compute, to show what streaming hides), and llama-server, one prompt at
// a time, the servers interleaved in a rotating order within each repeat
// so every one sees the same minutes of a shared machine. Every sluice
// topology must answer exactly what colocated answers (greedy, ignore_eos:
// the same streamed text, --long-gen tokens); llama-server's text is only
// reported. The figure of merit is the median TTFT of each sluice
// topology over colocated's, and each over llama-server's.

type longTarget struct {
	name string
	args []string // nil: llama-server
	srv  *server
}

type longRow struct {
	Server  string    `json:"server"`
	TTFTms  []float64 `json:"ttft_ms"` // every repeat, in order
	Median  float64   `json:"ttft_median_ms"`
	VsColoc float64   `json:"ttft_vs_colocated,omitempty"`
	VsLlama float64   `json:"ttft_vs_llama_server,omitempty"`
	// SameAsColocated counts repeats whose output equalled colocated's.
	SameAsColocated int    `json:"same_as_colocated"`
	Errors          int    `json:"errors"`
	FirstError      string `json:"first_error,omitempty"`
}

type longReport struct {
	Model      string              `json:"model"`
	Threads    int                 `json:"threads_total"`
	LongPrompt int                 `json:"prompt_tokens"`
	LongGen    int                 `json:"generated_tokens"`
	Repeats    int                 `json:"repeats"`
	NProc      int                 `json:"nproc"`
	CPU        string              `json:"cpu_model"`
	LoadBefore string              `json:"loadavg_before"`
	LoadAfter  string              `json:"loadavg_after"`
	Args       map[string][]string `json:"server_args"`
	Rows       []longRow           `json:"rows"`
	// Interference: short requests' ITL with no long prompt, and while a
	// long prompt prefills on the same server (gaps that ended between
	// its send and its first token).
	Short       int       `json:"short_prompt_tokens"`
	ShortGen    int       `json:"short_generated_tokens"`
	ShortConc   int       `json:"short_in_flight"`
	Interfere   []longITL `json:"interference,omitempty"`
	Interrupted string    `json:"interrupted,omitempty"`
}

type longITL struct {
	Server     string  `json:"server"`
	QuietP50   float64 `json:"quiet_itl_p50_ms"`
	QuietP99   float64 `json:"quiet_itl_p99_ms"`
	LongP50    float64 `json:"during_long_itl_p50_ms"`
	LongP99    float64 `json:"during_long_itl_p99_ms"`
	QuietMean  float64 `json:"quiet_itl_mean_ms"`
	LongMean   float64 `json:"during_long_itl_mean_ms"`
	Gaps       int     `json:"during_long_gaps"`
	LongTTFT   float64 `json:"long_ttft_median_ms"`
	Errors     int     `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
}

func runLongctx(ctx context.Context, b *benchServe) int {
	ctxLen := b.longPrompt + b.longGen + 1
	if ctxLen > b.ctxLen {
		return b.fail(2, "--long-prompt + --long-gen = %d exceed the model's context of %d (make one with `sluice synth --context`)", ctxLen-1, b.ctxLen)
	}
	rep := longReport{Model: b.name, Threads: b.threads, LongPrompt: b.longPrompt, LongGen: b.longGen, Repeats: b.repeats,
		NProc: runtime.NumCPU(), CPU: cpuModel(), LoadBefore: loadAvg(), Args: map[string][]string{}}
	// One long prompt at a time, and with --interference the short
	// requests in flight beside it, each with a page or so of headroom.
	conc, pool := 1, ctxLen+64
	if b.interfere {
		conc += b.levels[0]
		pool += b.levels[0] * (b.prompt + b.gen + 64)
	}
	targets := []*longTarget{
		{name: "sluice-colocated", args: b.sluiceArgs(true, ctxLen, pool, conc)},
		{name: "sluice-pd-tcp", args: append(b.sluiceArgs(false, ctxLen, pool, conc), "--transport", "tcp")},
		{name: "sluice-pd-shm", args: append(b.sluiceArgs(false, ctxLen, pool, conc), "--transport", "shm")},
		{name: "sluice-pd-tcp-after-prefill", args: append(b.sluiceArgs(false, ctxLen, pool, conc), "--transport", "tcp", "--handoff-after-prefill")},
	}
	for _, t := range targets {
		rep.Args[t.name] = t.args
		s, err := startSluice(ctx, b.sluiceBin, t.args)
		if err != nil {
			return b.fail(1, "%s: %v", t.name, err)
		}
		defer s.stop()
		t.srv = s
	}
	if b.llamaServer != "" {
		ll, args, env, err := b.startLlama(ctx, conc, ctxLen)
		if err != nil {
			return b.fail(1, "%v", err)
		}
		defer ll.stop()
		if env != "" {
			args = append([]string{env}, args...)
		}
		rep.Args["llama-server"] = args
		targets = append(targets, &longTarget{name: "llama-server", srv: ll})
	}
	load := serveLoad{model: b.name, prompt: b.longPrompt, gen: b.longGen, vocab: b.vocab}
	// A short request to each first: weights paged in, threads started.
	warm := serveLoad{model: b.name, prompt: min(128, b.longPrompt), gen: 2, vocab: b.vocab}
	for _, t := range targets {
		if s := streamOne(ctx, b.client, t.srv.base, warm, longFirst-1); s.err != nil {
			return b.fail(1, "%s: warm-up request: %v", t.name, s.err)
		}
	}
	rows := make([]longRow, len(targets))
	for i, t := range targets {
		rows[i].Server = t.name
	}
	for r := 0; r < b.repeats && ctx.Err() == nil; r++ {
		// One prompt per repeat, new to every server; colocated's answer
		// to it is the reference.
		var ref *streamSample
		texts := make([]*streamSample, len(targets))
		for k := range targets {
			i := (k + r) % len(targets) // rotate who goes first
			t := targets[i]
			fmt.Fprintf(b.stderr, "longctx: prompt of %d tokens, run %d/%d: %s\n", b.longPrompt, r+1, b.repeats, t.name)
			s := streamOne(ctx, b.client, t.srv.base, load, longFirst+r)
			texts[i] = &s
			row := &rows[i]
			d, ok := s.ttft()
			if s.err != nil || !ok {
				row.Errors++
				if row.FirstError == "" {
					row.FirstError = fmt.Sprint(s.err)
				}
				continue
			}
			row.TTFTms = append(row.TTFTms, ms(d))
		}
		ref = texts[0]
		for i, t := range targets {
			if t.args != nil && ref.err == nil && texts[i].err == nil && texts[i].text == ref.text && texts[i].tokens == b.longGen {
				rows[i].SameAsColocated++
			}
		}
	}
	if b.interfere {
		rep.Short, rep.ShortGen, rep.ShortConc = b.prompt, b.gen, b.levels[0]
		rep.Interfere = longInterference(ctx, b, targets)
	}
	if ctx.Err() != nil {
		rep.Interrupted = fmt.Sprintf("--timeout %v reached", b.timeout)
	}
	for i := range rows {
		rows[i].Median = percentile(rows[i].TTFTms, 50)
	}
	llama := -1.0
	if b.llamaServer != "" {
		llama = rows[len(rows)-1].Median
	}
	for i := range rows {
		rows[i].VsColoc = ratio(rows[i].Median, rows[0].Median)
		if llama > 0 {
			rows[i].VsLlama = ratio(rows[i].Median, llama)
		}
	}
	rep.Rows = rows
	rep.LoadAfter = loadAvg()
	if code := b.report(rep, func() { printLongctx(b.stdout, rep) }); code != 0 {
		return code
	}
	for _, r := range rep.Interfere {
		if r.Errors > 0 {
			return 1
		}
	}
	for i, r := range rows {
		if r.Errors > 0 || (targets[i].args != nil && r.SameAsColocated != b.repeats) {
			return 1
		}
	}
	if rep.Interrupted != "" {
		return 1
	}
	return 0
}

func printLongctx(w io.Writer, rep longReport) {
	fmt.Fprintf(w, "model %s, %d threads each; one prompt of %d tokens at a time, %d generated, %d repeats, servers interleaved\n",
		rep.Model, rep.Threads, rep.LongPrompt, rep.LongGen, rep.Repeats)
	fmt.Fprintf(w, "nproc %d, cpu %s, loadavg before %s, after %s\n", rep.NProc, rep.CPU, rep.LoadBefore, rep.LoadAfter)
	names := make([]string, 0, len(rep.Args))
	for n := range rep.Args {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(w, "%s: %s\n", n, strings.Join(rep.Args[n], " "))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "server\tTTFT median ms\tvs colocated\tvs llama-server\toutput = colocated\truns (ms)\t\n")
	for _, r := range rep.Rows {
		vl, same := "", fmt.Sprintf("%d/%d", r.SameAsColocated, rep.Repeats)
		if r.VsLlama > 0 {
			vl = fmt.Sprintf("%.2fx", r.VsLlama)
		}
		if r.Server == "llama-server" {
			same = "(not compared)"
		}
		runs := make([]string, len(r.TTFTms))
		for i, v := range r.TTFTms {
			runs[i] = fmt.Sprintf("%.0f", v)
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.3fx\t%s\t%s\t%s\t\n", r.Server, r.Median, r.VsColoc, vl, same, strings.Join(runs, " "))
	}
	tw.Flush()
	for _, r := range rep.Rows {
		if r.FirstError != "" {
			fmt.Fprintf(w, "%s: %d errors, first: %s\n", r.Server, r.Errors, r.FirstError)
		}
	}
	if len(rep.Interfere) > 0 {
		fmt.Fprintf(w, "\ninterference: %d short requests in flight (prompt %d, %d generated), ITL ms with no long prompt, and while a %d-token prompt prefills on the same server\n",
			rep.ShortConc, rep.Short, rep.ShortGen, rep.LongPrompt)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprint(tw, "server\tquiet ITL mean\tp50\tp99\tduring long mean\tp50\tp99\tmean vs quiet\tgaps\tlong TTFT median ms\t\n")
		for _, r := range rep.Interfere {
			fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2fx\t%d\t%.0f\t\n", r.Server, r.QuietMean, r.QuietP50, r.QuietP99,
				r.LongMean, r.LongP50, r.LongP99, ratio(r.LongMean, r.QuietMean), r.Gaps, r.LongTTFT)
		}
		tw.Flush()
		for _, r := range rep.Interfere {
			if r.FirstError != "" {
				fmt.Fprintf(w, "%s: %d errors, first: %s\n", r.Server, r.Errors, r.FirstError)
			}
		}
	}
	if rep.Interrupted != "" {
		fmt.Fprintf(w, "interrupted: %s\n", rep.Interrupted)
	}
}

// longInterference measures, on every target but the after-prefill one,
// the short requests' ITL with no long prompt (--requests of them,
// --concurrency in flight) and while one long prompt prefills: the same
// clients send short requests back to back from the long request's send
// until it returns, and only the gaps that ended between its send and its
// first token count (the prefill's window). The long request runs to its
// end, so no abandoned prompt keeps a server busy into the next run.
func longInterference(ctx context.Context, b *benchServe, targets []*longTarget) []longITL {
	short := b.load()
	long := serveLoad{model: b.name, prompt: b.longPrompt, gen: b.longGen, vocab: b.vocab}
	c := b.levels[0]
	type acc struct {
		quiet, during, ttft []float64
		errs                int
		first               string
	}
	var ts []*longTarget
	for _, t := range targets {
		if !slices.Contains(t.args, "--handoff-after-prefill") {
			ts = append(ts, t)
		}
	}
	accs := make([]acc, len(ts))
	note := func(a *acc, s streamSample) bool {
		if s.err != nil {
			a.errs++
			if a.first == "" {
				a.first = s.err.Error()
			}
			return false
		}
		return true
	}
	first := 1 << 20
	for r := 0; r < b.repeats && ctx.Err() == nil; r++ {
		for k := range ts {
			i := (k + r) % len(ts)
			t, a := ts[i], &accs[i]
			fmt.Fprintf(b.stderr, "longctx interference run %d/%d: %s\n", r+1, b.repeats, t.name)
			smp, _ := runLoad(ctx, b.client, t.srv.base, short, c, b.requests, first)
			for _, s := range smp {
				if note(a, s) {
					for _, d := range s.itls() {
						a.quiet = append(a.quiet, ms(d))
					}
				}
			}
			stop := make(chan struct{})
			var mu sync.Mutex
			var during []streamSample
			var wg sync.WaitGroup
			var next atomic.Int64
			for range c {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						s := streamOne(ctx, b.client, t.srv.base, short, first+b.requests+int(next.Add(1)))
						mu.Lock()
						during = append(during, s)
						mu.Unlock()
						if ctx.Err() != nil {
							return
						}
					}
				}()
			}
			ls := streamOne(ctx, b.client, t.srv.base, long, longFirst+(1<<16)+r)
			close(stop)
			wg.Wait()
			first += 1 << 12
			lt, ok := ls.ttft()
			if !note(a, ls) || !ok {
				continue
			}
			a.ttft = append(a.ttft, ms(lt))
			end := ls.chunks[0]
			for _, s := range during {
				if !note(a, s) {
					continue
				}
				for j := 1; j < len(s.chunks); j++ {
					if !s.chunks[j].After(end) && !s.chunks[j-1].Before(ls.start) {
						a.during = append(a.during, ms(s.chunks[j].Sub(s.chunks[j-1])))
					}
				}
			}
		}
	}
	out := make([]longITL, len(ts))
	for i, t := range ts {
		a := accs[i]
		out[i] = longITL{Server: t.name, QuietP50: percentile(a.quiet, 50), QuietP99: percentile(a.quiet, 99),
			LongP50: percentile(a.during, 50), LongP99: percentile(a.during, 99), Gaps: len(a.during),
			QuietMean: mean(a.quiet), LongMean: mean(a.during),
			LongTTFT: percentile(a.ttft, 50), Errors: a.errs, FirstError: a.first}
	}
	return out
}

func mean(x []float64) float64 {
	if len(x) == 0 {
		return 0
	}
	t := 0.0
	for _, v := range x {
		t += v
	}
	return t / float64(len(x))
}
