package bench

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
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"sluice/internal/cli"
	"sluice/internal/gguf"
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
	text   string // the streamed text, every chunk's in order
	tokens int    // completion tokens (usage when the server sent it, else chunks)
	status int    // HTTP status; 0 when the request never got one
	err    error
	// prompt and cached are usage's prompt_tokens and
	// prompt_tokens_details.cached_tokens (-1: not sent).
	prompt, cached int
	// id is the response's id (its chunks'); first is where the server
	// says its time to first token went (its request log line's
	// first_token_ms, when the benchmark read it).
	id    string
	first map[string]float64
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
	return streamPrompt(ctx, client, base, l.model, l.promptTokens(i), l.gen)
}

// streamPrompt sends one streaming completion of prompt (token ids) and
// times its chunks (bench chat's turns too).
func streamPrompt(ctx context.Context, client *http.Client, base, model string, prompt []int, gen int) streamSample {
	return streamPromptKey(ctx, client, base, "", model, prompt, gen)
}

// streamPromptKey is streamPrompt with an API key ("" sends none).
func streamPromptKey(ctx context.Context, client *http.Client, base, key, model string, prompt []int, gen int) streamSample {
	body, _ := json.Marshal(map[string]any{
		"model": model, "prompt": prompt, "max_tokens": gen,
		"temperature": 0, "stream": true, "ignore_eos": true,
		"stream_options": map[string]any{"include_usage": true},
	})
	s := streamSample{start: time.Now(), prompt: -1, cached: -1}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		s.err = err
		return s
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
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
	var text strings.Builder
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
			ID      string `json:"id"`
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens    int `json:"completion_tokens"`
				PromptTokens        int `json:"prompt_tokens"`
				PromptTokensDetails struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
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
			text.WriteString(ev.Choices[0].Text)
		}
		if s.id == "" {
			s.id = ev.ID
		}
		if ev.Usage != nil {
			usage = ev.Usage.CompletionTokens
			s.prompt, s.cached = ev.Usage.PromptTokens, ev.Usage.PromptTokensDetails.CachedTokens
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
	s.text = text.String()
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
	// metrics receives the admin listener's /metrics URL (sluice serve
	// with --metrics-listen logs it).
	metrics chan string
	// firsts are the first_token_ms of sluice's request log lines.
	firsts *firstLog
}

// firstLog holds the first_token_ms of sluice's request log lines by
// response id (at most maxFirsts: past that it starts again).
type firstLog struct {
	mu sync.Mutex
	m  map[string]map[string]float64
}

const maxFirsts = 1 << 16

func (f *firstLog) add(id string, ms map[string]float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil || len(f.m) >= maxFirsts {
		f.m = map[string]map[string]float64{}
	}
	f.m[id] = ms
}

// firstTiming is the first_token_ms of request id's log line, nil when
// the server has not logged it (or is not sluice).
func (s *server) firstTiming(id string) map[string]float64 {
	if s.firsts == nil {
		return nil
	}
	s.firsts.mu.Lock()
	defer s.firsts.mu.Unlock()
	return s.firsts.m[id]
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
				select {
				case <-s.exited: // the answer was not the child's
					return fmt.Errorf("%s exited: %s", s.name, s.tail())
				default:
				}
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

// llamaListening is llama-server's line naming the address it bound.
var llamaListening = regexp.MustCompile(`listening on (http://[0-9.]+:[0-9]+)`)

// startLlamaServer starts llama-server on loopback port 0 (it binds a
// free port itself: a port picked free here could be taken by another
// process before the child binds it, and that process would then answer
// the benchmark) and returns once it has logged its address and /health
// answers there. args are everything but --host and --port.
func startLlamaServer(ctx context.Context, bin string, args, env []string) (*server, error) {
	addr := make(chan string, 1)
	ll, err := startServer("llama-server", bin, append(slices.Clip(args), "--host", "127.0.0.1", "--port", "0"), env, func(line []byte) {
		if m := llamaListening.FindSubmatch(line); m != nil {
			trySend(addr, string(m[1]))
		}
	})
	if err != nil {
		return nil, err
	}
	rctx, rc := context.WithTimeout(ctx, 2*time.Minute)
	defer rc()
	if ll.base, err = awaitLine(rctx, ll, addr, "listen"); err == nil {
		err = ll.waitReady(rctx, "/health")
	}
	if err != nil {
		ll.stop()
		return nil, err
	}
	return ll, nil
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

// benchServe is what every workload of `sluice bench serve` gets: the
// parsed flags, the model's figures, and where to write.
type benchServe struct {
	stdout, stderr io.Writer
	model          string // GGUF path
	name           string // served model name (the file's base name)
	vocab, ctxLen  int
	sluiceBin      string
	llamaServer    string // "" : sluice alone
	threads        int
	prompt, gen    int
	levels         []int
	requests       int
	repeats        int
	colocated      bool
	extra          []string // --sluice-flags
	noCache        bool
	ompPassive     bool
	timeout        time.Duration
	json           bool
	// jsonOut: also write the JSON report to this file (--json-out).
	jsonOut string
	// blocks: the crowding workload's alone/flooded block pairs per
	// server (0: a fresh server per phase).
	blocks int
	// longPrompt and longGen: the interference workload's long requests.
	longPrompt, longGen int
	// interfere: longctx also measures short requests' ITL while a long
	// prompt prefills (--interference).
	interfere bool
	client    *http.Client
}

func (b *benchServe) fail(code int, f string, a ...any) int {
	fmt.Fprintf(b.stderr, "sluice bench serve: "+f+"\n", a...)
	return code
}

func (b *benchServe) load() serveLoad {
	return serveLoad{model: b.name, prompt: b.prompt, gen: b.gen, vocab: b.vocab}
}

// sluiceArgs is `sluice serve`'s command line for a pool of poolTokens,
// maxConc requests holding pages and threads per role, with the
// benchmark's context and queue; colocated adds --colocated.
func (b *benchServe) sluiceArgs(colocated bool, ctxLen, poolTokens, maxConc int) []string {
	th := max(1, b.threads/2) // prefill and decode compute at once
	if colocated {
		th = b.threads
	}
	args := []string{"serve", "--model", b.model, "--listen", "127.0.0.1:0",
		"--threads", strconv.Itoa(th), "--context", strconv.Itoa(ctxLen),
		"--kv-pool-tokens", strconv.Itoa(poolTokens),
		"--max-concurrency", strconv.Itoa(maxConc), "--max-queue", strconv.Itoa(max(b.requests, maxConc)),
		"--served-model-name", b.name, "--log-level", "info"}
	if colocated {
		args = append(args, "--colocated")
	}
	return append(args, b.extra...)
}

// startLlama starts llama-server with slots in parallel and ctxPerSlot
// tokens each.
func (b *benchServe) startLlama(ctx context.Context, slots, ctxPerSlot int) (*server, []string, string, error) {
	args := []string{"-m", b.model, "-a", b.name, "-np", strconv.Itoa(slots), "-c", strconv.Itoa(slots * ctxPerSlot), "-cb",
		"-t", strconv.Itoa(b.threads), "-tb", strconv.Itoa(b.threads)}
	if b.noCache {
		args = append(args, "--no-cache-prompt")
	}
	var env []string
	envText := ""
	if b.ompPassive {
		env = append(os.Environ(), "OMP_WAIT_POLICY=passive")
		envText = "OMP_WAIT_POLICY=passive"
	}
	ll, err := startLlamaServer(ctx, b.llamaServer, args, env)
	if err != nil {
		return nil, nil, "", err
	}
	return ll, args, envText, nil
}

// report prints a workload's result: v as JSON with --json, else the
// workload's table (text).
func (b *benchServe) report(v any, text func()) int {
	if b.jsonOut != "" {
		j, err := json.MarshalIndent(v, "", "  ")
		if err == nil {
			err = os.WriteFile(b.jsonOut, append(j, '\n'), 0o644)
		}
		if err != nil {
			return b.fail(1, "--json-out: %v", err)
		}
	}
	if b.json {
		return b.printJSON(v)
	}
	text()
	return 0
}

// printJSON writes v indented.
func (b *benchServe) printJSON(v any) int {
	e := json.NewEncoder(b.stdout)
	e.SetIndent("", "  ")
	if err := e.Encode(v); err != nil {
		return b.fail(1, "%v", err)
	}
	return 0
}

// A workload is one measurement `sluice bench serve --workload NAME`
// makes: it starts the servers it needs (sluiceArgs, startSluice,
// startLlama) and drives them (runLoad, streamOne), prints its table or
// JSON, and returns the exit code (non-zero when a request failed or an
// output was wrong). A new workload is a file with its run function and
// one entry here.
type workload struct {
	name    string
	summary string
	run     func(ctx context.Context, b *benchServe) int
}

var workloads = []workload{
	{"mix", "the issue's mix: --concurrency levels of --prompt/--gen requests, sluice and llama-server interleaved; tok/s, TTFT, ITL and the ratios", runMix},
	{"interference", "short requests' ITL while --long-prompt prompts keep arriving, colocated vs disaggregated (and llama-server), interleaved", runInterference},
	{"crowding", "tenant b repeats its own --prompt prompts alone and while tenant a floods unique --long-prompt prompts (a fresh server per phase, or --blocks pairs of blocks per server): b's cache hit rate and TTFT, the ratios with 95% intervals against the 1.10x bound", runCrowding},
	{"encrypt", "sluice disaggregated over loopback TCP without and with --encrypt, in turn: tok/s and the ratio encrypted / plain", runEncrypt},
	{"longctx", "TTFT of one --long-prompt prompt at a time: colocated, disaggregated over TCP and shm (streaming handoff), TCP with --handoff-after-prefill, and llama-server, interleaved; every sluice output must equal colocated's", runLongctx},
	{"kv-pressure", "a KV pool holding a quarter of the in-flight demand: every request must succeed (no 5xx/429 while the queue has room) and equal its solo run", runKVPressure},
}

// maxLongTokens bounds --long-prompt + --long-gen (interference, longctx).
const maxLongTokens = 1 << 17

func runBenchServe(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	b := &benchServe{stdout: stdout, stderr: stderr}
	var names []string
	for _, w := range workloads {
		names = append(names, w.name)
	}
	wname := fs.String("workload", "mix", "what to measure: "+strings.Join(names, ", ")+" (see above)")
	fs.StringVar(&b.model, "model", "", "GGUF `file` both servers load (default bench-15M-q8_0 from ../shared, else stories260K from testdata/)")
	fs.StringVar(&b.llamaServer, "llama-server", "", "llama-server `binary` to run side by side (e.g. $(../shared/tools/llama.cpp/select llama-server)); without it only sluice is measured")
	fs.StringVar(&b.sluiceBin, "sluice", "", "sluice `binary` to run as `sluice serve` (default: this one)")
	fs.IntVar(&b.threads, "threads", runtime.NumCPU(), "total `threads` of each server: llama-server -t/-tb; sluice serve --threads half of it per role (prefill and decode compute at once), all of it with --colocated")
	fs.IntVar(&b.prompt, "prompt", 100, "prompt `tokens` per request (token ids, different per request)")
	fs.IntVar(&b.gen, "gen", 64, "generated `tokens` per request (max_tokens, ignore_eos)")
	concFlag := fs.String("concurrency", "1,16,64", "comma-separated `levels` of requests in flight (interference: the short requests in flight, the first level; kv-pressure: every level)")
	fs.IntVar(&b.requests, "requests", 32, "`requests` per run (per concurrency level, server and repeat)")
	fs.IntVar(&b.repeats, "repeats", 2, "interleaved `runs` per server and level (sluice, llama-server, sluice, ...)")
	fs.BoolVar(&b.colocated, "colocated", false, "run sluice serve --colocated (one scheduler, no handoff); mix and kv-pressure")
	extra := fs.String("sluice-flags", "", "more `flags` for sluice serve, space-separated (e.g. \"--max-num-batched-tokens 512\"); they come after the benchmark's own, so they override them")
	fs.IntVar(&b.longPrompt, "long-prompt", 1900, "interference, longctx: prompt `tokens` of each long request (at most the model's context minus --long-gen)")
	fs.IntVar(&b.longGen, "long-gen", 8, "interference, longctx: generated `tokens` of each long request")
	fs.BoolVar(&b.interfere, "interference", false, "longctx: also measure short requests' ITL (--prompt, --gen, the first --concurrency level in flight, --requests for the quiet baseline) while a long prompt prefills on the same server")
	fs.BoolVar(&b.noCache, "no-cache-prompt", false, "pass --no-cache-prompt to llama-server (its prompt cache off; the benchmark never repeats a prompt anyway)")
	fs.BoolVar(&b.ompPassive, "omp-passive", false, "run llama-server with OMP_WAIT_POLICY=passive: its OpenMP threads sleep instead of spinning at barriers. On a machine shared with other load, spinning threads that lose their core stall every step (measured: 26 vs 285 tok/s with one request in flight at load 6-15 on 2 cores); on an idle machine spinning is llama.cpp's fastest")
	fs.DurationVar(&b.timeout, "timeout", 20*time.Minute, "bound on the whole benchmark; runs not done by then are cut and reported as errors")
	fs.BoolVar(&b.json, "json", false, "print the results as JSON")
	fs.StringVar(&b.jsonOut, "json-out", "", "also write the results as JSON to `file` (the text goes to stdout as without it)")
	fs.IntVar(&b.blocks, "blocks", 0, "crowding: `pairs` of an alone and a flooded block of --requests each on one server per repeat, the order alternating and a's flood stopped before each alone block; 0 runs each phase on a fresh server")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: sluice bench serve [--workload NAME] [flags]

Starts `+"`sluice serve`"+` (and, with --llama-server, llama.cpp's llama-server)
on loopback with the same model file and the same total threads, and
drives them through /v1/completions with streaming, temperature 0 and
ignore_eos. No prompt is ever sent twice to one server (no prompt cache
serves a run from an earlier one). Workloads:

`)
		for _, w := range workloads {
			fmt.Fprintf(fs.Output(), "  %-13s %s\n", w.name, w.summary)
		}
		fmt.Fprint(fs.Output(), `
mix, per level: aggregate output tok/s (output tokens over wall time),
TTFT and ITL (gap between streamed chunks) p50/p99 over every OK request
of every repeat, non-200s and errors, and the ratios sluice / llama-server,
runs interleaved (sluice, llama-server, sluice, ... for --repeats).

Flags:
`)
		fs.PrintDefaults()
	}
	if code, ok := cli.ParseFlags(fs, args, stdout); !ok {
		return code
	}
	var w *workload
	for i := range workloads {
		if workloads[i].name == *wname {
			w = &workloads[i]
		}
	}
	if w == nil {
		return b.fail(2, "--workload %q: use one of %s", *wname, strings.Join(names, ", "))
	}
	var err error
	if b.levels, err = parseInts(*concFlag, "concurrency"); err != nil {
		return b.fail(2, "%v", err)
	}
	b.extra = strings.Fields(*extra)
	if b.blocks < 0 || b.blocks > 100 {
		return b.fail(2, "--blocks must be 0 to 100")
	}
	if b.threads < 1 || b.prompt < 1 || b.gen < 1 || b.requests < 1 || b.repeats < 1 || b.timeout <= 0 || b.longPrompt < 1 || b.longGen < 1 {
		return b.fail(2, "--threads, --prompt, --gen, --long-prompt, --long-gen, --requests, --repeats and --timeout must be positive")
	}
	// Bounded: at most 8192 tokens a short request, 131072 a long one,
	// and 10,000 requests a run.
	if b.prompt+b.gen > 8192 || b.longPrompt+b.longGen > maxLongTokens || b.requests > 10000 || b.repeats > 100 || slices.Max(b.levels) > 1024 {
		return b.fail(2, "--prompt+--gen at most 8192, --long-prompt+--long-gen at most %d, --requests at most 10000, --repeats at most 100, --concurrency at most 1024", maxLongTokens)
	}
	if b.model == "" {
		for _, n := range []string{"bench-15M-q8_0.gguf", "stories260K.gguf"} {
			if p, ok := testenv.Find(filepath.Join("models", n)); ok {
				b.model = p
				break
			}
		}
		if b.model == "" {
			return b.fail(2, "no --model given and no shared test model found")
		}
	}
	if b.sluiceBin == "" {
		if b.sluiceBin, err = os.Executable(); err != nil {
			return b.fail(1, "%v", err)
		}
	}
	if b.llamaServer != "" {
		if b.llamaServer, err = exec.LookPath(b.llamaServer); err != nil {
			return b.fail(2, "--llama-server: %v", err)
		}
	}
	lm, err := openModel(b.model, gguf.MemoryMap) // only its vocabulary and context are read
	if err != nil {
		return b.fail(1, "%v", err)
	}
	b.vocab, b.ctxLen = lm.model.Config().Vocab, lm.model.Config().Context
	lm.Close()
	if b.prompt+b.gen+1 > b.ctxLen {
		return b.fail(2, "--prompt + --gen = %d exceed the model's context of %d", b.prompt+b.gen, b.ctxLen)
	}
	b.name = strings.TrimSuffix(filepath.Base(b.model), ".gguf")
	// A new loopback connection per request, for every server: llama-server
	// closes idle keep-alive connections, and a POST sent on one it just
	// closed fails with EOF (Go does not retry a POST), an error of the
	// client, not of the server (measured: 6 of 192 requests).
	b.client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	return w.run(ctx, b)
}

// runMix is the serving benchmark: sluice and llama-server side
// by side on the same mix at each concurrency level.
func runMix(ctx context.Context, b *benchServe) int {
	perSeq := b.prompt + b.gen + 1
	maxC := slices.Max(b.levels)
	rep := serveReport{
		Model: b.name, Threads: b.threads,
		Prompt: b.prompt, Gen: b.gen, Requests: b.requests, Repeats: b.repeats,
		NProc: runtime.NumCPU(), CPU: cpuModel(), LoadBefore: loadAvg(),
	}
	// sluice serve: a pool for every level's demand (the mix measures
	// speed, not KV pressure), queue for every request of a run.
	rep.SluiceArgs = b.sluiceArgs(b.colocated, perSeq, maxC*(perSeq+16), maxC)
	sl, err := startSluice(ctx, b.sluiceBin, rep.SluiceArgs)
	if err != nil {
		return b.fail(1, "%v", err)
	}
	defer sl.stop()
	var ll *server
	if b.llamaServer != "" {
		// One llama-server slot per request in flight.
		if ll, rep.LlamaArgs, rep.LlamaEnv, err = b.startLlama(ctx, maxC, perSeq); err != nil {
			return b.fail(1, "%v", err)
		}
		defer ll.stop()
	}
	load := b.load()
	first := 0 // the next run's first request: no prompt is sent twice to a server
	for _, c := range b.levels {
		var sSamples, lSamples []streamSample
		var sWall, lWall time.Duration
		for r := 1; r <= b.repeats; r++ {
			fmt.Fprintf(b.stderr, "concurrency %d run %d/%d: sluice\n", c, r, b.repeats)
			smp, w := runLoad(ctx, b.client, sl.base, load, c, b.requests, first)
			sSamples, sWall = append(sSamples, smp...), sWall+w
			prev := first
			first += b.requests
			if ll == nil {
				continue
			}
			fmt.Fprintf(b.stderr, "concurrency %d run %d/%d: llama-server\n", c, r, b.repeats)
			smp, w = runLoad(ctx, b.client, ll.base, load, c, b.requests, prev)
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
			rep.Interrupted = fmt.Sprintf("--timeout %v reached", b.timeout)
			break
		}
	}
	rep.LoadAfter = loadAvg()
	if code := b.report(rep, func() { printBenchServe(b.stdout, rep) }); code != 0 {
		return code
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
	metrics := make(chan string, 1)
	firsts := &firstLog{}
	s, err := startServer("sluice serve", bin, append(args, "--log-format", "json"), nil, func(line []byte) {
		var m struct {
			Msg, Addr, ID string
			First         map[string]float64 `json:"first_token_ms"`
		}
		if json.Unmarshal(line, &m) != nil {
			return
		}
		ch := addr
		switch m.Msg {
		case "listening":
		case "metrics listening":
			ch = metrics
		case "request":
			if m.ID != "" && m.First != nil {
				firsts.add(m.ID, m.First)
			}
			return
		default:
			return
		}
		select {
		case ch <- m.Addr:
		default:
		}
	})
	if err != nil {
		return nil, err
	}
	s.metrics, s.firsts = metrics, firsts
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

// metricsBase is the base URL of the admin listener's /metrics (sluice
// serve with --metrics-listen), waiting for its log line a few seconds.
func (s *server) metricsBase() (string, error) {
	if s.metrics == nil {
		return "", fmt.Errorf("%s has no metrics listener", s.name)
	}
	select {
	case u := <-s.metrics:
		s.metrics <- u // the next caller reads it too
		return strings.TrimSuffix(u, "/metrics"), nil
	case <-time.After(10 * time.Second):
		return "", fmt.Errorf("%s did not log its metrics listener", s.name)
	}
}
