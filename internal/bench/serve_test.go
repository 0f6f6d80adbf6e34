package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sluice/internal/testenv"
)

// The expected values are computed by hand (numpy.percentile's linear
// interpolation: position p/100*(n-1) in the sorted samples).
func TestBenchServePercentile(t *testing.T) {
	for _, c := range []struct {
		x    []float64
		p    float64
		want float64
	}{
		{[]float64{4, 1, 3, 2}, 50, 2.5},     // position 1.5: between 2 and 3
		{[]float64{5, 1, 4, 2, 3}, 99, 4.96}, // position 3.96: 4 + 0.96*(5-4)
		{[]float64{5, 1, 4, 2, 3}, 50, 3},    // position 2 exactly
		{[]float64{10, 20}, 99, 19.9},        // position 0.99
		{[]float64{7}, 99, 7},
		{[]float64{1, 2, 3}, 100, 3},
		{nil, 50, 0},
	} {
		if got := percentile(c.x, c.p); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("percentile(%v, %v) = %v, want %v", c.x, c.p, got, c.want)
		}
	}
}

// TTFT is send to first chunk; ITLs are the gaps between chunks, pooled
// over OK requests only; failures are counted, not timed.
func TestBenchServeSummarize(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(msec ...int) []time.Time {
		var out []time.Time
		for _, m := range msec {
			out = append(out, t0.Add(time.Duration(m)*time.Millisecond))
		}
		return out
	}
	samples := []streamSample{
		{start: t0, chunks: at(10, 15, 30), tokens: 3, status: 200}, // ttft 10, itl 5 15
		{start: t0, chunks: at(20, 22), tokens: 2, status: 200},     // ttft 20, itl 2
		{start: t0, chunks: at(1, 2), status: 503, err: errors.New("HTTP 503: full")},
		{start: t0, chunks: at(3), status: 200, err: errors.New("stream ended without [DONE]")},
		{start: t0, err: errors.New("connection refused")},
	}
	st := summarize(samples, 2*time.Second)
	// ttft samples {10, 20}: p50 15, p99 10+0.99*10 = 19.9.
	// itl samples {2, 5, 15}: p50 5, p99 position 1.98: 5 + 0.98*10 = 14.8.
	want := sideStats{Requests: 5, OK: 2, Non200: 1, Errors: 2, OutTokens: 5, WallS: 2, TokS: 2.5,
		TTFTP50: 15, TTFTP99: 19.9, ITLP50: 5, ITLP99: 14.8, FirstError: "HTTP 503: full"}
	if math.Abs(st.TTFTP99-want.TTFTP99) < 1e-9 && math.Abs(st.ITLP99-want.ITLP99) < 1e-9 {
		st.TTFTP99, st.ITLP99 = want.TTFTP99, want.ITLP99
	}
	if st != want {
		t.Fatalf("summarize =\n%+v\nwant\n%+v", st, want)
	}
	if got := (streamSample{start: t0, chunks: at(10, 15, 30)}).itls(); len(got) != 2 || got[0] != 5*time.Millisecond || got[1] != 15*time.Millisecond {
		t.Fatalf("itls = %v, want [5ms 15ms]", got)
	}
}

// The command end to end against sluice alone (a child `sluice serve` on
// loopback): every request answered in full, counted and timed.
func TestBenchServeEndToEnd(t *testing.T) {
	model := testenv.Shared(t, "models/stories260K.gguf")
	var out, errOut bytes.Buffer
	code := Run([]string{"serve", "--sluice", sluiceBinary(t), "--model", model, "--threads", "2",
		"--concurrency", "1,3", "--requests", "4", "--repeats", "2", "--prompt", "8", "--gen", "5",
		"--timeout", "3m", "--json"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	var rep serveReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if len(rep.Rows) != 2 || rep.Rows[0].Concurrency != 1 || rep.Rows[1].Concurrency != 3 {
		t.Fatalf("rows %+v, want concurrency 1 and 3", rep.Rows)
	}
	for _, r := range rep.Rows {
		s := r.Sluice
		// 4 requests x 2 repeats, each exactly 5 tokens (ignore_eos).
		if s.Requests != 8 || s.OK != 8 || s.Non200 != 0 || s.Errors != 0 || s.OutTokens != 40 {
			t.Errorf("C=%d: %+v, want 8 OK requests of 5 tokens", r.Concurrency, s)
		}
		if s.TokS <= 0 || s.TTFTP50 <= 0 || s.TTFTP99 < s.TTFTP50 || s.ITLP99 < s.ITLP50 {
			t.Errorf("C=%d: figures not ordered: %+v", r.Concurrency, s)
		}
		if r.Llama != nil || r.Ratios != nil {
			t.Errorf("C=%d: llama-server figures without --llama-server", r.Concurrency)
		}
	}
	// The benchmark drives sluice over loopback only.
	if rep.SluiceArgs[4] != "127.0.0.1:0" {
		t.Errorf("sluice listens on %q", rep.SluiceArgs[4])
	}
}

// Every request of a benchmark gets a prompt whose first page (16 tokens,
// the prefix cache's unit; llama-server's cache matches on any common
// prefix, so the first token is checked too) no other request has: runs
// number their requests on from the previous run (runLoad's first), and a
// server's prompt cache must never serve a run from an earlier one (a
// repeated mix made llama-server's TTFT at 16 in flight look 3x better).
func TestBenchServePromptsNeverRepeat(t *testing.T) {
	l := serveLoad{prompt: 100, vocab: 32000}
	firstTok := map[int]int{}
	for i := range 4096 {
		p := l.promptTokens(i)
		if j, dup := firstTok[p[0]]; dup && slices.Equal(l.promptTokens(j)[:16], p[:16]) {
			t.Fatalf("requests %d and %d share their first page", j, i)
		}
		firstTok[p[0]] = i
	}
}

// The KV-pressure workload end to end on stories260K: a pool of a quarter
// of the in-flight demand preempts (the run shows it), and yet every
// request succeeds and equals its solo run on the same server (the oracle:
// the unloaded run), in both topologies.
func TestBenchServeKVPressure(t *testing.T) {
	model := testenv.Shared(t, "models/stories260K.gguf")
	for _, topo := range [][]string{nil, {"--colocated"}} {
		// The pool runs dry only while several of the 8 clients' requests
		// are in flight at once; a loaded machine can spread their arrival
		// (a request of stories260K lasts a few ms) so that none is
		// preempted. Such a run shows nothing: run again, up to 3 times.
		for attempt := 1; ; attempt++ {
			var out, errOut bytes.Buffer
			args := append([]string{"serve", "--workload", "kv-pressure", "--sluice", sluiceBinary(t), "--model", model, "--threads", "2",
				"--concurrency", "8", "--requests", "16", "--prompt", "8", "--gen", "40", "--timeout", "3m", "--json"}, topo...)
			code := Run(args, &out, &errOut)
			var rep kvReport
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
				t.Fatalf("%v %v: exit %d: %s\n%s", topo, err, code, out.String(), errOut.String())
			}
			if code != 0 || len(rep.Rows) != 1 {
				t.Fatalf("%v: exit %d, report %+v\n%s", topo, code, rep, errOut.String())
			}
			r := rep.Rows[0]
			// 8 x 49 tokens of demand; a quarter is 98, below one context of
			// 49 x 2: the pool is 98 tokens (7 pages of 16 rounded up).
			if r.PoolTokens != 98 || r.Demand != 8*48 {
				t.Errorf("%v: pool %d demand %d, want 98 and 384", topo, r.PoolTokens, r.Demand)
			}
			if r.Equal != 16 || r.Mismatch != 0 || r.Status5xx != 0 || r.Status429 != 0 || r.Loaded.OK != 16 {
				t.Errorf("%v: %+v, want 16 requests equal to their solo runs", topo, r)
			}
			if r.Preemptions > 0 {
				break
			}
			if attempt == 3 {
				t.Errorf("%v: no preemption in 3 runs: the pool did not run dry, the run shows nothing", topo)
				break
			}
			t.Logf("%v: run %d had no preemption (requests did not overlap); again", topo, attempt)
		}
	}
}

// The interference workload end to end: both topologies (and no
// llama-server without --llama-server), quiet and with long prompts, every
// short request answered; timings are reported, not asserted.
func TestBenchServeInterference(t *testing.T) {
	model := testenv.Shared(t, "models/stories260K.gguf")
	var out, errOut bytes.Buffer
	code := Run([]string{"serve", "--workload", "interference", "--sluice", sluiceBinary(t), "--model", model, "--threads", "2",
		"--concurrency", "2", "--requests", "4", "--repeats", "1", "--prompt", "8", "--gen", "30",
		"--long-prompt", "300", "--long-gen", "2", "--timeout", "3m", "--json"}, &out, &errOut)
	var rep interReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || code != 0 {
		t.Fatalf("exit %d, %v: %s\n%s", code, err, out.String(), errOut.String())
	}
	seen := map[string]bool{}
	for _, r := range rep.Rows {
		seen[fmt.Sprintf("%s %v", r.Server, r.Long)] = true
		if r.Short.OK != 4 || r.Short.OutTokens != 4*30 {
			t.Errorf("%s long=%v: %+v, want 4 requests of 30 tokens", r.Server, r.Long, r.Short)
		}
		if r.Long != (r.LongStats != nil) {
			t.Errorf("%s long=%v: long figures %v", r.Server, r.Long, r.LongStats)
		}
	}
	for _, k := range []string{"sluice-colocated false", "sluice-colocated true", "sluice-disaggregated false", "sluice-disaggregated true"} {
		if !seen[k] {
			t.Errorf("no row %q in %+v", k, rep.Rows)
		}
	}
	if len(rep.Rows) != 4 {
		t.Errorf("%d rows, want 4", len(rep.Rows))
	}
}

// The crowding workload end to end on stories260K (colocated), in both
// layouts (a fresh server per phase; alone and flooded blocks on one
// server): b's requests all succeed alone and flooded, b's warmed prompts
// hit the prefix cache alone, and a's flood ran while b's flooded
// requests did; the text report (stdout) carries the intervals' lines and
// --json-out the blocks the intervals come from. Timings are reported,
// not asserted (the share bound itself is internal/engine's TestKVQuota*).
func TestBenchServeCrowding(t *testing.T) {
	model := testenv.Shared(t, "models/stories260K.gguf")
	for _, c := range []struct {
		name       string
		flags      []string
		blocks, rq int // block pairs in the report, b's requests per block
	}{
		{"fresh", []string{"--requests", "8"}, 1, 8},
		{"shared", []string{"--requests", "4", "--blocks", "2"}, 2, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			jsonOut := filepath.Join(t.TempDir(), "crowding.json")
			var out, errOut bytes.Buffer
			args := append([]string{"serve", "--workload", "crowding", "--colocated", "--sluice", sluiceBinary(t), "--model", model, "--threads", "2",
				"--concurrency", "2", "--repeats", "1", "--prompt", "64", "--gen", "4",
				"--long-prompt", "300", "--long-gen", "2", "--timeout", "3m", "--json-out", jsonOut}, c.flags...)
			code := Run(args, &out, &errOut)
			raw, err := os.ReadFile(jsonOut)
			var rep crowdReport
			if err == nil {
				err = json.Unmarshal(raw, &rep)
			}
			if err != nil || code != 0 {
				t.Fatalf("exit %d, %v: %s\n%s", code, err, out.String(), errOut.String())
			}
			n := c.blocks * c.rq
			if rep.Alone.Stats.OK != n || rep.Flooded.Stats.OK != n {
				t.Errorf("b's requests: alone %+v, flooded %+v, want %d OK each", rep.Alone.Stats, rep.Flooded.Stats, n)
			}
			if rep.Alone.HitRate < 0.5 {
				t.Errorf("b's hit rate alone %.2f: its warmed prompts did not hit the cache", rep.Alone.HitRate)
			}
			if rep.Flooded.FloodOK == 0 {
				t.Errorf("a's flood completed nothing: %+v", rep.Flooded)
			}
			// b's first-token phases, scraped from the admin listener: each of
			// b's requests of each block once per phase, its 2 unmeasured
			// lead-in requests included (a's are not b's).
			for _, side := range []crowdSide{rep.Alone, rep.Flooded} {
				for _, k := range []string{"colocated/queue", "colocated/prefill_wait", "colocated/prefill_compute",
					"router/http_read", "router/http_prompt", "router/http_admit", "router/first_token_deliver", "router/first_token_write"} {
					if p := side.Phases[k]; p.Count != float64(n+2*c.blocks) || p.Sum < 0 {
						t.Errorf("b's phase %s: %+v, want %d requests (phases %v)", k, p, n+2*c.blocks, side.Phases)
					}
				}
				// prefill_wait and prefill_compute again, by how each
				// prompt's first chunk started: the splits add up.
				for _, k := range []string{"colocated/prefill_wait", "colocated/prefill_compute"} {
					split := 0.0
					for name, p := range side.Phases {
						if strings.HasPrefix(name, k+"/") {
							split += p.Count
						}
					}
					if split != side.Phases[k].Count {
						t.Errorf("b's %s/<how> count %v requests, %s %v (phases %v)", k, split, k, side.Phases[k].Count, side.Phases)
					}
				}
			}
			// Every measured request's log line was read, by its id; the
			// slowest 5% at the client is one request of these few.
			for _, side := range []crowdSide{rep.Alone, rep.Flooded} {
				if a, s := side.All, side.Slowest; a == nil || s == nil || a.Requests != n || a.Logged != n || s.Requests != 1 || s.Logged != 1 ||
					s.MeanMS["client_ttft"] < a.MeanMS["client_ttft"] || a.MeanMS["engine"] <= 0 || a.MeanMS["prefill_compute"] <= 0 {
					t.Errorf("b's first_token_ms: every request %+v, slowest %+v; want %d and 1 logged, the slowest no faster", a, s, n)
				}
			}
			if !strings.Contains(out.String(), "slowest 5% at the client") {
				t.Errorf("the report prints no slowest 5%% table:\n%s", out.String())
			}
			if !strings.Contains(out.String(), "(prefill_compute/<how>), requests and mean ms:\n  how") {
				t.Errorf("the report prints no prefill_compute/<how> table:\n%s", out.String())
			}
			if len(rep.Blocks) != c.blocks {
				t.Fatalf("%d blocks, want %d", len(rep.Blocks), c.blocks)
			}
			for i, k := range rep.Blocks {
				if len(k.Alone) != c.rq || len(k.Flooded) != c.rq || k.Cover.Requests != c.rq {
					t.Errorf("block %d: %d alone, %d flooded TTFTs, coverage %+v; want %d each", i, len(k.Alone), len(k.Flooded), k.Cover, c.rq)
				}
			}
			// a floods the whole time b's flooded blocks run (8 of a's in
			// flight from 500 ms before): some of b's requests saw a's.
			if rep.Coverage.Requests != n || rep.Coverage.Covered == 0 {
				t.Errorf("coverage %+v: want %d of b's requests, some with a's in flight", rep.Coverage, n)
			}
			if p := rep.TTFTP50CI; p.Point != rep.TTFTP50x || p.Lo > p.Point || p.Hi < p.Point || rep.P50Verdict == "" || rep.P99Verdict == "" {
				t.Errorf("p50 interval %+v (ratio %v), verdicts %q %q", p, rep.TTFTP50x, rep.P50Verdict, rep.P99Verdict)
			}
			for _, want := range []string{"b TTFT p50 flooded/alone ", "b TTFT p99 flooded/alone ", ", bound 1.10x: ", "b hit rate flooded ", "b's flooded requests with a's requests in flight"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("the text report has no %q:\n%s", want, out.String())
				}
			}
		})
	}
}

// The encryption workload end to end on stories260K: both servers (plain
// and --encrypt) answer every request; the ratio is reported, not asserted.
func TestBenchServeEncrypt(t *testing.T) {
	model := testenv.Shared(t, "models/stories260K.gguf")
	var out, errOut bytes.Buffer
	code := Run([]string{"serve", "--workload", "encrypt", "--sluice", sluiceBinary(t), "--model", model, "--threads", "2",
		"--concurrency", "2", "--requests", "4", "--repeats", "1", "--prompt", "32", "--gen", "8", "--timeout", "3m", "--json"}, &out, &errOut)
	var rep encReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || code != 0 {
		t.Fatalf("exit %d, %v: %s\n%s", code, err, out.String(), errOut.String())
	}
	if len(rep.Rows) != 2 || rep.Rows[0].Stats.OK != 4 || rep.Rows[1].Stats.OK != 4 || !rep.Rows[1].Encrypted {
		t.Fatalf("rows %+v, want plain and encrypted with 4 OK each", rep.Rows)
	}
	if rep.TokSRatio <= 0 {
		t.Fatalf("ratio %v", rep.TokSRatio)
	}
}

// The long-context workload end to end on a short "long" prompt: every
// sluice topology answers, each exactly as colocated does; timings are
// reported, not asserted.
func TestBenchServeLongctx(t *testing.T) {
	model := testenv.Shared(t, "models/stories260K.gguf")
	var out, errOut bytes.Buffer
	code := Run([]string{"serve", "--workload", "longctx", "--sluice", sluiceBinary(t), "--model", model, "--threads", "2",
		"--repeats", "2", "--long-prompt", "200", "--long-gen", "4", "--timeout", "3m", "--json"}, &out, &errOut)
	var rep longReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || code != 0 {
		t.Fatalf("exit %d, %v: %s\n%s", code, err, out.String(), errOut.String())
	}
	var names []string
	for _, r := range rep.Rows {
		names = append(names, r.Server)
		if r.Errors != 0 || len(r.TTFTms) != 2 || r.SameAsColocated != 2 || r.Median <= 0 {
			t.Errorf("%+v: want 2 runs, each answered as colocated did", r)
		}
	}
	if want := []string{"sluice-colocated", "sluice-pd-tcp", "sluice-pd-shm", "sluice-pd-tcp-after-prefill"}; !slices.Equal(names, want) {
		t.Errorf("rows %v, want %v", names, want)
	}
}
