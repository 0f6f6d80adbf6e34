package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
)

// The KV-pressure workload (the "Done when"): each --concurrency
// level's requests in flight against a KV pool holding a quarter of their
// demand (in flight x (prompt + gen) tokens, at least one context). The
// queue holds every request, so no request may get a 5xx or a 429; pages
// grow on demand and sequences are preempted and resumed as the pool runs
// dry, and every output must equal the same request's unloaded run (one
// request at a time on the same server, before the loaded run; the prefix
// cache is off so the loaded run recomputes every prompt).

type kvRow struct {
	Concurrency int       `json:"concurrency"`
	PoolTokens  int       `json:"pool_tokens"`
	Demand      int       `json:"demand_tokens"`
	Loaded      sideStats `json:"loaded"`
	// Status5xx and Status429 count loaded requests by refusal; Mismatch
	// those whose text or token count differs from their solo run.
	Status5xx   int   `json:"status_5xx"`
	Status429   int   `json:"status_429"`
	Mismatch    int   `json:"mismatches"`
	Preemptions int64 `json:"preemptions"`
	// SoloFailed counts requests whose unloaded run itself failed (no
	// reference to compare with).
	SoloFailed int `json:"solo_failed"`
	// Equal counts loaded requests that succeeded and equal their solo run.
	Equal     int    `json:"equal_to_solo"`
	FirstDiff string `json:"first_difference,omitempty"`
}

type kvReport struct {
	Model      string   `json:"model"`
	Threads    int      `json:"threads_total"`
	Prompt     int      `json:"prompt_tokens"`
	Gen        int      `json:"generated_tokens"`
	Requests   int      `json:"requests_per_level"`
	NProc      int      `json:"nproc"`
	CPU        string   `json:"cpu_model"`
	LoadBefore string   `json:"loadavg_before"`
	LoadAfter  string   `json:"loadavg_after"`
	Colocated  bool     `json:"colocated"`
	Args       []string `json:"sluice_args_last"`
	Rows       []kvRow  `json:"rows"`
}

// kvPool is the pool of the KV-pressure run at c in flight: a quarter of
// the demand, never less than one whole sequence (the context, I2).
func kvPool(c, perSeq int) int { return max(c*perSeq/4, perSeq) }

// scrapeCounter sums the samples of a Prometheus counter (every label set)
// on base's /metrics.
func scrapeCounter(ctx context.Context, client *http.Client, base, name string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("/metrics: HTTP %d", resp.StatusCode)
	}
	var sum int64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		rest, ok := strings.CutPrefix(l, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += int64(v)
		}
	}
	return sum, sc.Err()
}

func runKVPressure(ctx context.Context, b *benchServe) int {
	perSeq := b.prompt + b.gen + 1
	rep := kvReport{Model: b.name, Threads: b.threads, Prompt: b.prompt, Gen: b.gen, Requests: b.requests,
		NProc: runtime.NumCPU(), CPU: cpuModel(), LoadBefore: loadAvg(), Colocated: b.colocated}
	load := b.load()
	first := 0
	bad := false
	for _, c := range b.levels {
		row := kvRow{Concurrency: c, PoolTokens: kvPool(c, perSeq), Demand: c * (perSeq - 1)}
		args := append(b.sluiceArgs(b.colocated, perSeq, row.PoolTokens, c), "--prefix-cache", "off")
		rep.Args = args
		sl, err := startSluice(ctx, b.sluiceBin, args)
		if err != nil {
			return b.fail(1, "%v", err)
		}
		fmt.Fprintf(b.stderr, "kv-pressure %d in flight, pool %d tokens: solo runs\n", c, row.PoolTokens)
		solo, _ := runLoad(ctx, b.client, sl.base, load, 1, b.requests, first)
		before, err1 := scrapeCounter(ctx, b.client, sl.base, "sluice_preemptions_total")
		fmt.Fprintf(b.stderr, "kv-pressure %d in flight: loaded run\n", c)
		loaded, wall := runLoad(ctx, b.client, sl.base, load, c, b.requests, first)
		after, err2 := scrapeCounter(ctx, b.client, sl.base, "sluice_preemptions_total")
		sl.stop()
		first += b.requests
		if err1 == nil && err2 == nil {
			row.Preemptions = after - before
		} else {
			row.Preemptions = -1
		}
		row.Loaded = summarize(loaded, wall)
		for i, s := range loaded {
			switch {
			case s.status >= 500:
				row.Status5xx++
			case s.status == http.StatusTooManyRequests:
				row.Status429++
			}
			if solo[i].err != nil {
				row.SoloFailed++
				continue
			}
			if s.err == nil && s.text == solo[i].text && s.tokens == solo[i].tokens {
				row.Equal++
			}
			if s.err == nil && (s.text != solo[i].text || s.tokens != solo[i].tokens) {
				row.Mismatch++
				if row.FirstDiff == "" {
					row.FirstDiff = fmt.Sprintf("request %d: loaded %d tokens %.60q, solo %d tokens %.60q", first-b.requests+i, s.tokens, s.text, solo[i].tokens, solo[i].text)
				}
			}
		}
		if row.Equal != row.Loaded.Requests {
			bad = true
		}
		rep.Rows = append(rep.Rows, row)
		if ctx.Err() != nil {
			bad = true
			break
		}
	}
	rep.LoadAfter = loadAvg()
	if code := b.report(rep, func() { printKVPressure(b.stdout, rep) }); code != 0 {
		return code
	}
	if bad {
		return 1
	}
	return 0
}

func printKVPressure(w io.Writer, rep kvReport) {
	topo := "disaggregated"
	if rep.Colocated {
		topo = "colocated"
	}
	fmt.Fprintf(w, "model %s, sluice %s, %d threads, prompt %d tokens, %d generated, %d requests per level, prefix cache off\n",
		rep.Model, topo, rep.Threads, rep.Prompt, rep.Gen, rep.Requests)
	fmt.Fprintf(w, "nproc %d, cpu %s, loadavg before %s, after %s\n", rep.NProc, rep.CPU, rep.LoadBefore, rep.LoadAfter)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "C\tpool tokens\tdemand\tok\t5xx\t429\terrors\tequal to solo\tpreemptions\ttok/s\tTTFT p99 ms\tITL p99 ms\t\n")
	for _, r := range rep.Rows {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d/%d\t%d\t%d\t%d\t%d/%d\t%d\t%.1f\t%.1f\t%.2f\t\n", r.Concurrency, r.PoolTokens, r.Demand,
			r.Loaded.OK, r.Loaded.Requests, r.Status5xx, r.Status429, r.Loaded.Errors,
			r.Equal, r.Loaded.Requests,
			r.Preemptions, r.Loaded.TokS, r.Loaded.TTFTP99, r.Loaded.ITLP99)
	}
	tw.Flush()
	for _, r := range rep.Rows {
		if r.FirstDiff != "" {
			fmt.Fprintf(w, "C=%d: first difference: %s\n", r.Concurrency, r.FirstDiff)
		}
		if r.Loaded.FirstError != "" {
			fmt.Fprintf(w, "C=%d: first error: %s\n", r.Concurrency, r.Loaded.FirstError)
		}
	}
}
