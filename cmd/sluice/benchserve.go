package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"sluice/internal/testenv"
)

// sluice bench serve: the serving benchmark of the issue on load. It
// starts `sluice serve` (this binary, a child process) and, with
// --llama-server, llama.cpp's llama-server on the same model file with the
// same total threads, both on loopback, and drives both with the same
// streaming completions mix, interleaved run by run so both see the same
// minute of a shared machine's load.

// streamSample is what one streamed request measured: when it was sent,
// when each chunk carrying text arrived, and how it ended.
type streamSample struct {
	start  time.Time
	chunks []time.Time
	tokens int // completion tokens (usage when the server sent it, else chunks)
	status int // HTTP status; 0 when the request never got one
	err    error
}

// ttft is the time to the first chunk; ok is false without one.
func (s streamSample) ttft() (time.Duration, bool) {
	if len(s.chunks) == 0 {
		return 0, false
	}
	return s.chunks[0].Sub(s.start), true
}

// itls are the gaps between consecutive chunks (vLLM's ITL).
func (s streamSample) itls() []time.Duration {
	var out []time.Duration
	for i := 1; i < len(s.chunks); i++ {
		out = append(out, s.chunks[i].Sub(s.chunks[i-1]))
	}
	return out
}

// percentile is the p-th percentile (0..100) of x with linear
// interpolation between closest ranks (numpy's default, as vLLM's
// benchmark reports it); 0 for no samples.
func percentile(x []float64, p float64) float64 {
	if len(x) == 0 {
		return 0
	}
	s := slices.Clone(x)
	slices.Sort(s)
	pos := p / 100 * float64(len(s)-1)
	lo := int(math.Floor(pos))
	if lo >= len(s)-1 {
		return s[len(s)-1]
	}
	return s[lo] + (pos-float64(lo))*(s[lo+1]-s[lo])
}

// sideStats is one server's figures at one concurrency, over every repeat:
// tokens over summed wall time, latency percentiles over pooled samples.
type sideStats struct {
	Requests  int     `json:"requests"`
	OK        int     `json:"ok"`
	Non200    int     `json:"non_200"`
	Errors    int     `json:"errors"`
	OutTokens int     `json:"output_tokens"`
	WallS     float64 `json:"wall_s"`
	TokS      float64 `json:"output_tokens_per_s"`
	TTFTP50   float64 `json:"ttft_p50_ms"`
	TTFTP99   float64 `json:"ttft_p99_ms"`
	ITLP50    float64 `json:"itl_p50_ms"`
	ITLP99    float64 `json:"itl_p99_ms"`
	// FirstError is one error sentence, to say what went wrong.
	FirstError string `json:"first_error,omitempty"`
}

// summarize computes a side's figures from its samples and the runs'
// summed wall time. A request counts as OK when it got a 200 and its
// stream ended cleanly; only OK requests give latency samples.
func summarize(samples []streamSample, wall time.Duration) sideStats {
	st := sideStats{Requests: len(samples), WallS: wall.Seconds()}
	var ttft, itl []float64
	for _, s := range samples {
		switch {
		case s.status != 0 && s.status != http.StatusOK:
			st.Non200++
		case s.err != nil:
			st.Errors++
		default:
			st.OK++
			st.OutTokens += s.tokens
			if d, ok := s.ttft(); ok {
				ttft = append(ttft, ms(d))
			}
			for _, d := range s.itls() {
				itl = append(itl, ms(d))
			}
			continue
		}
		if st.FirstError == "" && s.err != nil {
			st.FirstError = s.err.Error()
		}
	}
	if wall > 0 {
		st.TokS = float64(st.OutTokens) / wall.Seconds()
	}
	st.TTFTP50, st.TTFTP99 = percentile(ttft, 50), percentile(ttft, 99)
	st.ITLP50, st.ITLP99 = percentile(itl, 50), percentile(itl, 99)
	return st
}

// serveLoad is the request mix: the same for both servers.
type serveLoad struct {
	model  string // the "model" field sent
	prompt int    // prompt tokens
	gen    int    // generated tokens (max_tokens, ignore_eos)
	vocab  int
}

// promptTokens is request i's prompt: token ids spread over the
// vocabulary, different per request so no prompt cache serves one from
// another's, identical for both servers.
func (l serveLoad) promptTokens(i int) []int {
	ids := make([]int, l.prompt)
	span := max(1, l.vocab-3)
	for j := range ids {
		ids[j] = 3 + int((uint64(i)*7919+uint64(j)*104729+uint64(i*j))%uint64(span))
	}
	return ids
}

// streamOne sends one streaming completion and times its chunks.
func streamOne(ctx context.Context, client *http.Client, base string, l serveLoad, i int) streamSample {
	body, _ := json.Marshal(map[string]any{
		"model": l.model, "prompt": l.promptTokens(i), "max_tokens": l.gen,
		"temperature": 0, "stream": true, "ignore_eos": true,
		"stream_options": map[string]any{"include_usage": true},
	})
	s := streamSample{start: time.Now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		s.err = err
		return s
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		s.err = err
		return s
	}
	defer resp.Body.Close()
	s.status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		s.err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
		return s
	}
	usage, done := -1, false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			done = true
			break
		}
		var ev struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			s.err = fmt.Errorf("bad SSE event: %v", err)
			return s
		}
		if len(ev.Error) > 0 {
			s.err = fmt.Errorf("stream error: %s", ev.Error)
			return s
		}
		// A chunk counts when it carries text: a closing chunk with only
		// finish_reason, or a usage chunk, is no token arriving.
		if len(ev.Choices) > 0 && ev.Choices[0].Text != "" {
			s.chunks = append(s.chunks, time.Now())
		}
		if ev.Usage != nil {
			usage = ev.Usage.CompletionTokens
		}
	}
	if err := sc.Err(); err != nil {
		s.err = err
		return s
	}
	if !done {
		s.err = errors.New("stream ended without [DONE]")
		return s
	}
	s.tokens = len(s.chunks)
	if usage >= 0 {
		s.tokens = usage
	}
	return s
}

// runLoad sends n requests with c in flight and returns their samples and
// the wall time from the first send to the last answer. Requests are
// first, first+1, ...: a run gives each server prompts it has never seen,
// so neither prompt cache serves a run from an earlier one (both servers
// of one interleaved pair get the same first).
func runLoad(ctx context.Context, client *http.Client, base string, l serveLoad, c, n, first int) ([]streamSample, time.Duration) {
	out := make([]streamSample, n)
	next := make(chan int)
	var wg sync.WaitGroup
	t0 := time.Now()
	for range min(c, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i] = streamOne(ctx, client, base, l, first+i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return out, time.Since(t0)
}

// server is one child process under test. One goroutine waits for it
// (exited); its stderr is kept, bounded, for error messages, and each
// line goes to onLine.
type server struct {
	name   string
	base   string
	cmd    *exec.Cmd
	exited chan struct{}
	mu     sync.Mutex
	log    bytes.Buffer
	part   []byte
	onLine func(line []byte)
}

// Write is the child's stderr.
func (s *server) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log.Len() > 1<<20 { // keep memory bounded on a chatty child
		s.log.Reset()
	}
	s.log.Write(p)
	if s.onLine != nil {
		s.part = append(s.part, p...)
		for {
			i := bytes.IndexByte(s.part, '\n')
			if i < 0 {
				break
			}
			s.onLine(s.part[:i])
			s.part = s.part[i+1:]
		}
		if len(s.part) > 1<<16 {
			s.part = s.part[:0]
		}
	}
	return len(p), nil
}

// startServer starts bin; env nil inherits this process's environment.
func startServer(name, bin string, args, env []string, onLine func([]byte)) (*server, error) {
	s := &server{name: name, cmd: exec.Command(bin, args...), exited: make(chan struct{}), onLine: onLine}
	s.cmd.Env = env
	s.cmd.Stdout = io.Discard
	s.cmd.Stderr = s
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	return s, nil
}

// stop interrupts the child (both servers drain on SIGINT) and kills it
// when it has not exited within 10 seconds.
func (s *server) stop() {
	_ = s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

func (s *server) tail() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := strings.TrimSpace(s.log.String())
	if len(t) > 2000 {
		t = t[len(t)-2000:]
	}
	return t
}

// waitReady polls path until it answers 200 (sluice's /ready, llama-server's
// /health, 503 while it loads).
func (s *server) waitReady(ctx context.Context, path string) error {
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.base+path, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.exited:
			return fmt.Errorf("%s exited: %s", s.name, s.tail())
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %v: %s", s.name, ctx.Err(), s.tail())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freeLoopbackPort asks the kernel for an unused loopback port.
func freeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// serveRow is one concurrency level's figures for both servers.
type serveRow struct {
	Concurrency int        `json:"concurrency"`
	Sluice      sideStats  `json:"sluice"`
	Llama       *sideStats `json:"llama_server,omitempty"`
	// Ratios are sluice / llama-server (tok/s: higher is better for
	// sluice; latencies: lower is).
	Ratios map[string]float64 `json:"ratios,omitempty"`
}

type serveReport struct {
	Model       string     `json:"model"`
	Threads     int        `json:"threads_total"`
	Prompt      int        `json:"prompt_tokens"`
	Gen         int        `json:"generated_tokens"`
	Requests    int        `json:"requests_per_run"`
	Repeats     int        `json:"repeats"`
	NProc       int        `json:"nproc"`
	CPU         string     `json:"cpu_model"`
	LoadBefore  string     `json:"loadavg_before"`
	LoadAfter   string     `json:"loadavg_after"`
	SluiceArgs  []string   `json:"sluice_args"`
	LlamaArgs   []string   `json:"llama_server_args,omitempty"`
	LlamaEnv    string     `json:"llama_server_env,omitempty"`
	Rows        []serveRow `json:"rows"`
	Interrupted string     `json:"interrupted,omitempty"`
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func runBenchServe(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	modelPath := fs.String("model", "", "GGUF `file` both servers load (default bench-15M-q8_0 from ../shared, else stories260K from testdata/)")
	llamaServer := fs.String("llama-server", "", "llama-server `binary` to run side by side (e.g. $(../shared/tools/llama.cpp/select llama-server)); without it only sluice is measured")
	sluiceBin := fs.String("sluice", "", "sluice `binary` to run as `sluice serve` (default: this one)")
	threads := fs.Int("threads", runtime.NumCPU(), "total `threads` of each server: llama-server -t/-tb; sluice serve --threads half of it per role (prefill and decode compute at once), all of it with --colocated")
	prompt := fs.Int("prompt", 100, "prompt `tokens` per request (token ids, different per request)")
	gen := fs.Int("gen", 64, "generated `tokens` per request (max_tokens, ignore_eos)")
	concFlag := fs.String("concurrency", "1,16,64", "comma-separated `levels` of requests in flight")
	requests := fs.Int("requests", 32, "`requests` per run (per concurrency level, server and repeat)")
	repeats := fs.Int("repeats", 2, "interleaved `runs` per server and level (sluice, llama-server, sluice, ...)")
	colocated := fs.Bool("colocated", false, "run sluice serve --colocated (one scheduler, no handoff)")
	extra := fs.String("sluice-flags", "", "more `flags` for sluice serve, space-separated (e.g. \"--max-num-batched-tokens 512\"); they come after the benchmark's own, so they override them")
	noCache := fs.Bool("no-cache-prompt", false, "pass --no-cache-prompt to llama-server (its prompt cache off)")
	ompPassive := fs.Bool("omp-passive", false, "run llama-server with OMP_WAIT_POLICY=passive: its OpenMP threads sleep instead of spinning at barriers. On a machine shared with other load, spinning threads that lose their core stall every step (measured: 26 vs 285 tok/s with one request in flight at load 6-15 on 2 cores); on an idle machine spinning is llama.cpp's fastest")
	timeout := fs.Duration("timeout", 20*time.Minute, "bound on the whole benchmark; runs not done by then are cut and reported as errors")
	jsonOut := fs.Bool("json", false, "print the results as JSON")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: sluice bench serve [flags]

Starts `+"`sluice serve`"+` and (with --llama-server) llama.cpp's llama-server on
loopback with the same model file and the same total threads, and drives
both through /v1/completions with streaming, temperature 0 and ignore_eos,
at each concurrency level, interleaved: sluice run, llama-server run,
sluice run, ... for --repeats. Per level it prints aggregate output tok/s
(output tokens over wall time), TTFT and ITL (gap between streamed chunks)
p50/p99 over every OK request of every repeat, non-200s and errors, and
the ratios sluice / llama-server.

Flags:
`)
		fs.PrintDefaults()
	}
	if code, ok := parseFlagsTo(fs, args, stdout); !ok {
		return code
	}
	fail := func(code int, f string, a ...any) int {
		fmt.Fprintf(stderr, "sluice bench serve: "+f+"\n", a...)
		return code
	}
	levels, err := parseInts(*concFlag, "concurrency")
	if err != nil {
		return fail(2, "%v", err)
	}
	if *threads < 1 || *prompt < 1 || *gen < 1 || *requests < 1 || *repeats < 1 || *timeout <= 0 {
		return fail(2, "--threads, --prompt, --gen, --requests, --repeats and --timeout must be positive")
	}
	// Bounded: at most 4096 tokens a request and 10,000 requests a run.
	if *prompt+*gen > 4096 || *requests > 10000 || *repeats > 100 || slices.Max(levels) > 1024 {
		return fail(2, "--prompt+--gen at most 4096, --requests at most 10000, --repeats at most 100, --concurrency at most 1024")
	}
	if *modelPath == "" {
		for _, n := range []string{"bench-15M-q8_0.gguf", "stories260K.gguf"} {
			if p, ok := testenv.Find(filepath.Join("models", n)); ok {
				*modelPath = p
				break
			}
		}
		if *modelPath == "" {
			return fail(2, "no --model given and no shared test model found")
		}
	}
	if *sluiceBin == "" {
		if *sluiceBin, err = os.Executable(); err != nil {
			return fail(1, "%v", err)
		}
	}
	if *llamaServer != "" {
		if *llamaServer, err = exec.LookPath(*llamaServer); err != nil {
			return fail(2, "--llama-server: %v", err)
		}
	}
	lm, err := openModel(*modelPath)
	if err != nil {
		return fail(1, "%v", err)
	}
	vocab, ctxLen := lm.model.Config().Vocab, lm.model.Config().Context
	lm.Close()
	perSeq := *prompt + *gen + 1
	if perSeq > ctxLen {
		return fail(2, "--prompt + --gen = %d exceed the model's context of %d", perSeq-1, ctxLen)
	}
	maxC := slices.Max(levels)

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	rep := serveReport{
		Model: strings.TrimSuffix(filepath.Base(*modelPath), ".gguf"), Threads: *threads,
		Prompt: *prompt, Gen: *gen, Requests: *requests, Repeats: *repeats,
		NProc: runtime.NumCPU(), CPU: cpuModel(), LoadBefore: loadAvg(),
	}

	// sluice serve: a pool for every level's demand (the benchmark measures
	// speed, not KV pressure), queue for every request of a run.
	sluiceThreads := max(1, *threads/2)
	if *colocated {
		sluiceThreads = *threads
	}
	rep.SluiceArgs = []string{"serve", "--model", *modelPath, "--listen", "127.0.0.1:0",
		"--threads", strconv.Itoa(sluiceThreads), "--context", strconv.Itoa(perSeq),
		"--kv-pool-tokens", strconv.Itoa(maxC * (perSeq + 16)),
		"--max-concurrency", strconv.Itoa(maxC), "--max-queue", strconv.Itoa(max(*requests, 1)),
		"--served-model-name", rep.Model, "--log-level", "info"}
	if *colocated {
		rep.SluiceArgs = append(rep.SluiceArgs, "--colocated")
	}
	rep.SluiceArgs = append(rep.SluiceArgs, strings.Fields(*extra)...)
	sl, err := startSluice(ctx, *sluiceBin, rep.SluiceArgs)
	if err != nil {
		return fail(1, "%v", err)
	}
	defer sl.stop()
	var ll *server
	if *llamaServer != "" {
		port, err := freeLoopbackPort()
		if err != nil {
			return fail(1, "%v", err)
		}
		rep.LlamaArgs = []string{"-m", *modelPath, "--host", "127.0.0.1", "--port", strconv.Itoa(port),
			"-a", rep.Model, "-np", strconv.Itoa(maxC), "-c", strconv.Itoa(maxC * perSeq), "-cb",
			"-t", strconv.Itoa(*threads), "-tb", strconv.Itoa(*threads)}
		if *noCache {
			rep.LlamaArgs = append(rep.LlamaArgs, "--no-cache-prompt")
		}
		var env []string
		if *ompPassive {
			env = append(os.Environ(), "OMP_WAIT_POLICY=passive")
			rep.LlamaEnv = "OMP_WAIT_POLICY=passive"
		}
		if ll, err = startServer("llama-server", *llamaServer, rep.LlamaArgs, env, nil); err != nil {
			return fail(1, "%v", err)
		}
		defer ll.stop()
		ll.base = "http://127.0.0.1:" + strconv.Itoa(port)
		rctx, rc := context.WithTimeout(ctx, 2*time.Minute)
		err = ll.waitReady(rctx, "/health")
		rc()
		if err != nil {
			return fail(1, "%v", err)
		}
	}

	// A new loopback connection per request, for both servers: llama-server
	// closes idle keep-alive connections, and a POST sent on one it just
	// closed fails with EOF (Go does not retry a POST), an error of the
	// client, not of the server (measured: 6 of 192 requests).
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	load := serveLoad{model: rep.Model, prompt: *prompt, gen: *gen, vocab: vocab}
	first := 0 // the next run's first request: no prompt is sent twice to a server
	for _, c := range levels {
		var sSamples, lSamples []streamSample
		var sWall, lWall time.Duration
		for r := 1; r <= *repeats; r++ {
			fmt.Fprintf(stderr, "concurrency %d run %d/%d: sluice\n", c, r, *repeats)
			smp, w := runLoad(ctx, client, sl.base, load, c, *requests, first)
			sSamples, sWall = append(sSamples, smp...), sWall+w
			prev := first
			first += *requests
			if ll == nil {
				continue
			}
			fmt.Fprintf(stderr, "concurrency %d run %d/%d: llama-server\n", c, r, *repeats)
			smp, w = runLoad(ctx, client, ll.base, load, c, *requests, prev)
			lSamples, lWall = append(lSamples, smp...), lWall+w
		}
		row := serveRow{Concurrency: c, Sluice: summarize(sSamples, sWall)}
		if ll != nil {
			st := summarize(lSamples, lWall)
			row.Llama = &st
			row.Ratios = map[string]float64{
				"tok_s":    ratio(row.Sluice.TokS, st.TokS),
				"ttft_p50": ratio(row.Sluice.TTFTP50, st.TTFTP50),
				"ttft_p99": ratio(row.Sluice.TTFTP99, st.TTFTP99),
				"itl_p50":  ratio(row.Sluice.ITLP50, st.ITLP50),
				"itl_p99":  ratio(row.Sluice.ITLP99, st.ITLP99),
			}
		}
		rep.Rows = append(rep.Rows, row)
		if ctx.Err() != nil {
			rep.Interrupted = fmt.Sprintf("--timeout %v reached", *timeout)
			break
		}
	}
	rep.LoadAfter = loadAvg()
	if *jsonOut {
		e := json.NewEncoder(stdout)
		e.SetIndent("", "  ")
		if err := e.Encode(rep); err != nil {
			return fail(1, "%v", err)
		}
	} else {
		printBenchServe(stdout, rep)
	}
	for _, r := range rep.Rows {
		if r.Sluice.OK != r.Sluice.Requests || (r.Llama != nil && r.Llama.OK != r.Llama.Requests) {
			return 1 // failed requests are a failed benchmark, after the table
		}
	}
	if rep.Interrupted != "" {
		return 1
	}
	return 0
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// startSluice starts sluice serve on port 0 and reads its address from the
// "listening" log line, then waits for /ready.
func startSluice(ctx context.Context, bin string, args []string) (*server, error) {
	addr := make(chan string, 1)
	s, err := startServer("sluice serve", bin, append(args, "--log-format", "json"), nil, func(line []byte) {
		var m struct{ Msg, Addr string }
		if json.Unmarshal(line, &m) == nil && m.Msg == "listening" {
			select {
			case addr <- m.Addr:
			default:
			}
		}
	})
	if err != nil {
		return nil, err
	}
	select {
	case s.base = <-addr:
	case <-s.exited:
		return nil, fmt.Errorf("sluice serve exited before listening: %s", s.tail())
	case <-time.After(2 * time.Minute):
		s.stop()
		return nil, fmt.Errorf("sluice serve did not listen within 2 minutes: %s", s.tail())
	case <-ctx.Done():
		s.stop()
		return nil, ctx.Err()
	}
	rctx, rc := context.WithTimeout(ctx, 2*time.Minute)
	defer rc()
	if err := s.waitReady(rctx, "/ready"); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

func printBenchServe(w io.Writer, rep serveReport) {
	fmt.Fprintf(w, "model %s, %d threads each, prompt %d tokens, %d generated, %d requests x %d repeats per level\n",
		rep.Model, rep.Threads, rep.Prompt, rep.Gen, rep.Requests, rep.Repeats)
	fmt.Fprintf(w, "nproc %d, cpu %s, loadavg before %s, after %s\n", rep.NProc, rep.CPU, rep.LoadBefore, rep.LoadAfter)
	fmt.Fprintf(w, "sluice %s\n", strings.Join(rep.SluiceArgs, " "))
	if rep.LlamaArgs != nil {
		fmt.Fprintf(w, "llama-server %s %s\n", rep.LlamaEnv, strings.Join(rep.LlamaArgs, " "))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "C\tserver\ttok/s\tTTFT p50 ms\tTTFT p99 ms\tITL p50 ms\tITL p99 ms\tok\tnon-200\terrors\t\n")
	line := func(c int, name string, s sideStats) {
		fmt.Fprintf(tw, "%d\t%s\t%.1f\t%.1f\t%.1f\t%.2f\t%.2f\t%d/%d\t%d\t%d\t\n", c, name, s.TokS, s.TTFTP50, s.TTFTP99, s.ITLP50, s.ITLP99, s.OK, s.Requests, s.Non200, s.Errors)
	}
	for _, r := range rep.Rows {
		line(r.Concurrency, "sluice", r.Sluice)
		if r.Llama != nil {
			line(r.Concurrency, "llama-server", *r.Llama)
			q := r.Ratios
			fmt.Fprintf(tw, "%d\tratio\t%.2fx\t%.2fx\t%.2fx\t%.2fx\t%.2fx\t\t\t\t\n", r.Concurrency, q["tok_s"], q["ttft_p50"], q["ttft_p99"], q["itl_p50"], q["itl_p99"])
		}
	}
	tw.Flush()
	for _, r := range rep.Rows {
		for _, x := range []struct {
			n string
			s *sideStats
		}{{"sluice", &r.Sluice}, {"llama-server", r.Llama}} {
			if x.s != nil && x.s.FirstError != "" {
				fmt.Fprintf(w, "C=%d %s: first error: %s\n", r.Concurrency, x.n, x.s.FirstError)
			}
		}
	}
	if rep.Interrupted != "" {
		fmt.Fprintf(w, "interrupted: %s\n", rep.Interrupted)
	}
}
