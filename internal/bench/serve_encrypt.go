package bench

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"text/tabwriter"
	"time"
)

// The encryption workload (issue 28): `sluice serve` disaggregated over
// loopback TCP, without and with --encrypt (every frame between prefill
// and decode sealed with AES-256-GCM, as between hosts), both servers up
// at once and driven in turn (plain, encrypted, plain, ...) for --repeats
// runs of --requests at the first --concurrency level: output tok/s and
// TTFT of each, and the ratio encrypted / plain (the target is
// >= 0.97).

type encRow struct {
	Encrypted bool      `json:"encrypted"`
	Stats     sideStats `json:"stats"`
}

type encReport struct {
	Model      string   `json:"model"`
	Threads    int      `json:"threads_total"`
	Prompt     int      `json:"prompt_tokens"`
	Gen        int      `json:"generated_tokens"`
	InFlight   int      `json:"in_flight"`
	Requests   int      `json:"requests_per_run"`
	Repeats    int      `json:"repeats"`
	NProc      int      `json:"nproc"`
	CPU        string   `json:"cpu_model"`
	LoadBefore string   `json:"loadavg_before"`
	LoadAfter  string   `json:"loadavg_after"`
	Args       []string `json:"sluice_args_plain"`
	Rows       []encRow `json:"rows"`
	// TokSRatio is encrypted over plain output tok/s, over the summed runs;
	// TokSRatioMed the median of the per-repeat ratios (steadier when the
	// machine is shared).
	TokSRatio    float64 `json:"tok_s_encrypted_over_plain"`
	TokSRatioMed float64 `json:"tok_s_ratio_median"`
}

func runEncrypt(ctx context.Context, b *benchServe) int {
	perSeq := b.prompt + b.gen + 1
	c := b.levels[0]
	rep := encReport{Model: b.name, Threads: b.threads, Prompt: b.prompt, Gen: b.gen, InFlight: c, Requests: b.requests,
		Repeats: b.repeats, NProc: runtime.NumCPU(), CPU: cpuModel(), LoadBefore: loadAvg()}
	args := append(b.sluiceArgs(false, perSeq, c*(perSeq+16), c), "--transport", "tcp")
	rep.Args = args
	var srv [2]*server
	for i, extra := range [][]string{nil, {"--encrypt"}} {
		s, err := startSluice(ctx, b.sluiceBin, append(slices.Clone(args), extra...))
		if err != nil {
			return b.fail(1, "%v", err)
		}
		defer s.stop()
		srv[i] = s
	}
	load := b.load()
	var samples [2][]streamSample
	var walls [2]time.Duration
	var ratios []float64
	first := 0
	for r := 1; r <= b.repeats; r++ {
		var tok [2]float64
		for i := range srv {
			fmt.Fprintf(b.stderr, "encrypt run %d/%d: encrypted=%v\n", r, b.repeats, i == 1)
			smp, w := runLoad(ctx, b.client, srv[i].base, load, c, b.requests, first)
			samples[i], walls[i] = append(samples[i], smp...), walls[i]+w
			tok[i] = summarize(smp, w).TokS
		}
		first += b.requests // the same prompts for both servers, new ones each repeat
		ratios = append(ratios, ratio(tok[1], tok[0]))
		if ctx.Err() != nil {
			break
		}
	}
	for i := range srv {
		rep.Rows = append(rep.Rows, encRow{Encrypted: i == 1, Stats: summarize(samples[i], walls[i])})
	}
	rep.TokSRatio = ratio(rep.Rows[1].Stats.TokS, rep.Rows[0].Stats.TokS)
	rep.TokSRatioMed = percentile(ratios, 50)
	rep.LoadAfter = loadAvg()
	if code := b.report(rep, func() { printEncrypt(b.stdout, rep) }); code != 0 {
		return code
	}
	for _, r := range rep.Rows {
		if r.Stats.OK != r.Stats.Requests {
			return 1
		}
	}
	return 0
}

func printEncrypt(w io.Writer, rep encReport) {
	fmt.Fprintf(w, "model %s, sluice disaggregated over loopback TCP, %d threads, prompt %d tokens, %d generated, %d in flight, %d requests x %d repeats, plain and encrypted in turn\n",
		rep.Model, rep.Threads, rep.Prompt, rep.Gen, rep.InFlight, rep.Requests, rep.Repeats)
	fmt.Fprintf(w, "nproc %d, cpu %s, loadavg before %s, after %s\n", rep.NProc, rep.CPU, rep.LoadBefore, rep.LoadAfter)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "frames\tok\ttok/s\tTTFT p50 ms\tTTFT p99 ms\tITL p50 ms\t\n")
	for _, r := range rep.Rows {
		name := "plain"
		if r.Encrypted {
			name = "encrypted"
		}
		fmt.Fprintf(tw, "%s\t%d/%d\t%.1f\t%.1f\t%.1f\t%.2f\t\n", name, r.Stats.OK, r.Stats.Requests, r.Stats.TokS, r.Stats.TTFTP50, r.Stats.TTFTP99, r.Stats.ITLP50)
	}
	tw.Flush()
	fmt.Fprintf(w, "encrypted / plain tok/s: %.3f (median of the repeats' ratios %.3f)\n", rep.TokSRatio, rep.TokSRatioMed)
}
