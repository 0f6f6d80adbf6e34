package bench

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"sluice/internal/cli"
	"sluice/internal/gguf"
	"sluice/internal/testenv"
)

// sluice bench chat: the prefix cache's benchmark (issue 12). A multi-turn
// chat workload, side by side in one run: sluice serve with the prefix
// cache on, sluice serve with it off, and (with --llama-server)
// llama.cpp's llama-server with its prompt cache (cache_prompt, on by
// default), same model file, same total threads, loopback. Every
// conversation starts with the same system prompt; each turn's prompt is
// the system prompt, the conversation so far and a new user turn, so a
// prefix cache serves all but the newest tokens. Runs are interleaved
// round by round so every side sees the same minute of a shared
// machine's load.

// chatLoad is the workload, identical for every side.
type chatLoad struct {
	model                  string
	system, user, reply    int // tokens: system prompt, each user turn, each reply (max_tokens)
	turns, inflight, vocab int
}

// tok is a deterministic token id in the vocabulary, past the special ids.
func (l chatLoad) tok(stream, i int) int {
	span := max(1, l.vocab-3)
	return 3 + int((uint64(stream)*2654435761+uint64(i)*40503+uint64(stream*i))%uint64(span))
}

// prompt is conversation conv's prompt at turn t (from 0): the shared
// system prompt, then for each earlier turn its user tokens and a reply
// (synthetic ids standing for the assistant's text as a client sends it
// back), then turn t's user tokens.
func (l chatLoad) prompt(conv, t int) []int {
	p := make([]int, 0, l.system+(t+1)*(l.user+l.reply))
	for i := range l.system {
		p = append(p, l.tok(0, i))
	}
	for k := 0; k <= t; k++ {
		for i := range l.user {
			p = append(p, l.tok(1+conv*2*l.turns+2*k, i))
		}
		if k < t {
			for i := range l.reply {
				p = append(p, l.tok(2+conv*2*l.turns+2*k, i))
			}
		}
	}
	return p
}

// context is the longest prompt plus its reply.
func (l chatLoad) context() int { return l.system + l.turns*(l.user+l.reply) }

// chatSample is one turn's measurement.
type chatSample struct {
	turn int
	s    streamSample
}

// runChat runs l.inflight conversations at once, each its l.turns turns
// in order, conversation ids from first.
func runChat(ctx context.Context, client *http.Client, base string, l chatLoad, first int) ([]chatSample, time.Duration) {
	out := make([]chatSample, l.inflight*l.turns)
	var wg sync.WaitGroup
	t0 := time.Now()
	for c := range l.inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range l.turns {
				out[c*l.turns+t] = chatSample{turn: t, s: streamPrompt(ctx, client, base, l.model, l.prompt(first+c, t), l.reply)}
			}
		}()
	}
	wg.Wait()
	return out, time.Since(t0)
}

// chatSide is one server's figures over every round.
type chatSide struct {
	Name string `json:"name"`
	sideStats
	// TTFT p50 of the first turns (system prompt and one user turn) and
	// of the later ones (the conversation so far cached, if anything is).
	TTFTFirstP50 float64 `json:"ttft_turn1_p50_ms"`
	TTFTLaterP50 float64 `json:"ttft_later_turns_p50_ms"`
}

func summarizeChat(name string, samples []chatSample, wall time.Duration) chatSide {
	var all []streamSample
	var first, later []float64
	for _, c := range samples {
		all = append(all, c.s)
		if d, ok := c.s.ttft(); ok && c.s.err == nil && c.s.status == http.StatusOK {
			if c.turn == 0 {
				first = append(first, ms(d))
			} else {
				later = append(later, ms(d))
			}
		}
	}
	return chatSide{Name: name, sideStats: summarize(all, wall), TTFTFirstP50: percentile(first, 50), TTFTLaterP50: percentile(later, 50)}
}

type chatReport struct {
	Model      string     `json:"model"`
	Context    int        `json:"model_context"`
	Threads    int        `json:"threads_total"`
	System     int        `json:"system_prompt_tokens"`
	User       int        `json:"user_turn_tokens"`
	Reply      int        `json:"reply_tokens"`
	Turns      int        `json:"turns"`
	Inflight   int        `json:"conversations_in_flight"`
	Rounds     int        `json:"rounds"`
	NProc      int        `json:"nproc"`
	CPU        string     `json:"cpu_model"`
	LoadBefore string     `json:"loadavg_before"`
	LoadAfter  string     `json:"loadavg_after"`
	Args       [][]string `json:"server_args"`
	Sides      []chatSide `json:"sides"`
	// OnVsOff is cache-off TTFT p50 over cache-on's (goal >= 3);
	// OnVsLlama is cache-on TTFT p50 over llama-server's (goal <= 1).
	OnVsOff   float64 `json:"ttft_p50_off_over_on"`
	OnVsLlama float64 `json:"ttft_p50_on_over_llama_server,omitempty"`
}

func runBenchChat(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench chat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	modelPath := fs.String("model", "", "GGUF `file` every server loads (default bench-15M-q8_0 from ../shared, else stories260K from testdata/)")
	llamaServer := fs.String("llama-server", "", "llama-server `binary` to run side by side with its prompt cache on (e.g. $(../shared/tools/llama.cpp/select llama-server))")
	sluiceBin := fs.String("sluice", "", "sluice `binary` to run as `sluice serve` (default: this one)")
	threads := fs.Int("threads", runtime.NumCPU(), "total `threads` of each server (llama-server -t/-tb; sluice --threads, halved per role unless --colocated)")
	system := fs.Int("system", 496, "shared system prompt `tokens`")
	user := fs.Int("user", 32, "`tokens` of each user turn")
	reply := fs.Int("reply", 32, "generated `tokens` per turn (max_tokens, ignore_eos)")
	turns := fs.Int("turns", 4, "`turns` per conversation")
	inflight := fs.Int("conversations", 16, "`conversations` in flight at once")
	rounds := fs.Int("rounds", 2, "interleaved `rounds`: each runs --conversations new conversations on every side")
	colocated := fs.Bool("colocated", false, "run sluice serve --colocated (one scheduler, no handoff)")
	ompPassive := fs.Bool("omp-passive", false, "run llama-server with OMP_WAIT_POLICY=passive (see bench serve)")
	timeout := fs.Duration("timeout", 30*time.Minute, "bound on the whole benchmark")
	jsonOut := fs.Bool("json", false, "print the results as JSON")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: sluice bench chat [flags]

The prefix cache's benchmark: a multi-turn chat workload (a shared system
prompt, --turns turns per conversation, --conversations in flight) against
sluice serve with --prefix-cache on, with it off, and (with --llama-server)
llama-server with its prompt cache, on loopback, same model and threads,
interleaved round by round. Prompts are token ids; each turn sends the
system prompt, the conversation so far (earlier user turns and synthetic
replies) and the new user turn, streaming, temperature 0, ignore_eos.
Prints TTFT p50/p99 (and p50 of first and later turns) and aggregate
output tok/s per side, and the TTFT ratios cache off / on and on /
llama-server.

Flags:
`)
		fs.PrintDefaults()
	}
	if code, ok := cli.ParseFlags(fs, args, stdout); !ok {
		return code
	}
	fail := func(code int, f string, a ...any) int {
		fmt.Fprintf(stderr, "sluice bench chat: "+f+"\n", a...)
		return code
	}
	if *threads < 1 || *system < 1 || *user < 1 || *reply < 1 || *turns < 1 || *inflight < 1 || *rounds < 1 || *timeout <= 0 {
		return fail(2, "every count and --timeout must be positive")
	}
	if *system > 8192 || *user > 4096 || *reply > 4096 || *turns > 64 || *inflight > 256 || *rounds > 100 {
		return fail(2, "--system at most 8192, --user and --reply 4096, --turns 64, --conversations 256, --rounds 100")
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
	var err error
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
	lm, err := openModel(*modelPath, gguf.MemoryMap) // only its vocabulary and context are read
	if err != nil {
		return fail(1, "%v", err)
	}
	vocab, ctxLen := lm.model.Config().Vocab, lm.model.Config().Context
	lm.Close()
	name := strings.TrimSuffix(filepath.Base(*modelPath), ".gguf")
	load := chatLoad{model: name, system: *system, user: *user, reply: *reply, turns: *turns, inflight: *inflight, vocab: vocab}
	perSeq := load.context() + 1
	if perSeq > ctxLen {
		return fail(2, "a conversation needs %d tokens, more than the model's context of %d (synthesize a model with a larger context: sluice synth)", perSeq, ctxLen)
	}
	rep := chatReport{Model: name, Context: ctxLen, Threads: *threads, System: *system, User: *user, Reply: *reply, Turns: *turns,
		Inflight: *inflight, Rounds: *rounds, NProc: runtime.NumCPU(), CPU: cpuModel(), LoadBefore: loadAvg()}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	type side struct {
		name string
		srv  *server
	}
	var sides []side
	defer func() {
		for _, s := range sides {
			s.srv.stop()
		}
	}()
	sluiceThreads := max(1, *threads/2)
	if *colocated {
		sluiceThreads = *threads
	}
	// Room for every conversation in flight twice over: the cache keeps
	// finished turns' pages while the next turns run.
	pool := 2 * *inflight * (perSeq + 16)
	for _, cache := range []string{"on", "off"} {
		a := []string{"serve", "--model", *modelPath, "--listen", "127.0.0.1:0", "--threads", strconv.Itoa(sluiceThreads),
			"--context", strconv.Itoa(perSeq), "--kv-pool-tokens", strconv.Itoa(pool), "--max-concurrency", strconv.Itoa(*inflight),
			"--max-queue", strconv.Itoa(*inflight), "--served-model-name", name, "--log-level", "info", "--prefix-cache", cache}
		if *colocated {
			a = append(a, "--colocated")
		}
		s, err := startSluice(ctx, *sluiceBin, a)
		if err != nil {
			return fail(1, "%v", err)
		}
		sides = append(sides, side{"sluice cache " + cache, s})
		rep.Args = append(rep.Args, a)
	}
	if *llamaServer != "" {
		a := []string{"-m", *modelPath, "-a", name,
			"-np", strconv.Itoa(*inflight), "-c", strconv.Itoa(*inflight * perSeq), "-cb",
			"-t", strconv.Itoa(*threads), "-tb", strconv.Itoa(*threads)}
		var env []string
		if *ompPassive {
			env = append(os.Environ(), "OMP_WAIT_POLICY=passive")
		}
		ll, err := startLlamaServer(ctx, *llamaServer, a, env)
		if err != nil {
			return fail(1, "%v", err)
		}
		sides = append(sides, side{"llama-server", ll})
		rep.Args = append(rep.Args, append([]string{"llama-server"}, a...))
	}

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}} // see bench serve
	samples := make([][]chatSample, len(sides))
	walls := make([]time.Duration, len(sides))
	for r := range *rounds {
		for k := range sides {
			i := (k + r) % len(sides) // rotate who goes first
			fmt.Fprintf(stderr, "round %d/%d: %s\n", r+1, *rounds, sides[i].name)
			smp, w := runChat(ctx, client, sides[i].srv.base, load, r**inflight)
			samples[i], walls[i] = append(samples[i], smp...), walls[i]+w
		}
		if ctx.Err() != nil {
			break
		}
	}
	rep.LoadAfter = loadAvg()
	for i, s := range sides {
		rep.Sides = append(rep.Sides, summarizeChat(s.name, samples[i], walls[i]))
	}
	rep.OnVsOff = ratio(rep.Sides[1].TTFTP50, rep.Sides[0].TTFTP50)
	if len(rep.Sides) > 2 {
		rep.OnVsLlama = ratio(rep.Sides[0].TTFTP50, rep.Sides[2].TTFTP50)
	}
	if *jsonOut {
		e := json.NewEncoder(stdout)
		e.SetIndent("", "  ")
		if err := e.Encode(rep); err != nil {
			return fail(1, "%v", err)
		}
	} else {
		printBenchChat(stdout, rep)
	}
	for _, s := range rep.Sides {
		if s.OK != s.Requests {
			return 1
		}
	}
	if ctx.Err() != nil {
		return 1
	}
	return 0
}

func printBenchChat(w io.Writer, rep chatReport) {
	fmt.Fprintf(w, "model %s (context %d), %d threads each; system prompt %d tokens, %d turns of %d user + %d generated tokens, %d conversations in flight, %d rounds\n",
		rep.Model, rep.Context, rep.Threads, rep.System, rep.Turns, rep.User, rep.Reply, rep.Inflight, rep.Rounds)
	fmt.Fprintf(w, "nproc %d, cpu %s, loadavg before %s, after %s\n", rep.NProc, rep.CPU, rep.LoadBefore, rep.LoadAfter)
	for _, a := range rep.Args {
		fmt.Fprintf(w, "  %s\n", strings.Join(a, " "))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "server\tTTFT p50 ms\tTTFT p99 ms\tturn 1 p50\tturns 2+ p50\ttok/s\tok\t\n")
	for _, s := range rep.Sides {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%d/%d\t\n", s.Name, s.TTFTP50, s.TTFTP99, s.TTFTFirstP50, s.TTFTLaterP50, s.TokS, s.OK, s.Requests)
	}
	tw.Flush()
	fmt.Fprintf(w, "TTFT p50 cache off / on: %.2fx (goal >= 3x)\n", rep.OnVsOff)
	if rep.OnVsLlama > 0 {
		fmt.Fprintf(w, "TTFT p50 cache on / llama-server: %.2fx (goal <= 1x)\n", rep.OnVsLlama)
	}
	for _, s := range rep.Sides {
		if s.FirstError != "" {
			fmt.Fprintf(w, "%s: first error: %s\n", s.Name, s.FirstError)
		}
	}
}
