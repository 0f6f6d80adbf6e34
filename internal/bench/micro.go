package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"sluice/internal/cli"
	"sluice/internal/gguf"
	"sluice/internal/kernels"
	"sluice/internal/kv"
	"sluice/internal/model"
	"sluice/internal/quant"
	"sluice/internal/synth"
	"sluice/internal/testenv"
)

// benchRun is one model at one thread count: a KV pool big enough for the
// longest test, a runner on its own pool of threads, and the prompt.
type benchRun struct {
	pool *kv.Pool
	o    kv.Owner
	refs []kv.PageRef
	par  *kernels.Parallel
	r    *model.Runner
	toks []int32
	// filled is how many leading positions hold a prefilled context
	// (--depth): a test at depth d runs at positions d, d+1, ...
	filled int
}

func newBenchRun(m *model.Model, threads, tokens int, typ kv.Type) (*benchRun, error) {
	c := m.Config()
	if tokens > c.Context {
		return nil, fmt.Errorf("%d tokens exceed the model's context of %d", tokens, c.Context)
	}
	pool, err := kv.New(kv.Config{Geometry: kv.Geometry{Layers: c.Layers, KVDim: c.KVDim(), PageSize: kv.DefaultPageSize, Type: typ}, Pages: kv.PagesFor(tokens, kv.DefaultPageSize)})
	if err != nil {
		return nil, err
	}
	b := &benchRun{pool: pool, o: kv.Owner{Tenant: "bench", ID: kv.ID{1}}}
	if b.refs, err = pool.Reserve(b.o, kv.PagesFor(tokens, kv.DefaultPageSize)); err != nil {
		pool.Close()
		return nil, err
	}
	b.par = kernels.NewParallel(threads)
	b.r = m.NewRunner(b.par)
	b.toks = make([]int32, tokens)
	for i := range b.toks {
		// Any valid ids do: the cost does not depend on which.
		b.toks[i] = int32(1 + (i*7919)%(c.Vocab-1))
	}
	return b, nil
}

func (b *benchRun) Close() {
	b.par.Close()
	b.pool.Close()
}

// fill prefills the context up to depth positions (untimed, in chunks of
// 512 as llama-bench's batch), as llama-bench -d does before each test.
// Later tests rewrite positions from their depth on; the prefix stays.
func (b *benchRun) fill(depth int) error {
	v := b.pool.View(b.o, b.refs)
	for b.filled < depth {
		n := min(512, depth-b.filled)
		if res := b.r.Forward([]model.Seq{{Tokens: b.toks[b.filled : b.filled+n], Pos: b.filled, KV: v}}); res[0].Err != nil {
			return res[0].Err
		}
		b.filled += n
	}
	return nil
}

// pp is llama-bench's pp<n>: one prompt of n tokens in one step after a
// context of depth tokens. It returns tokens per wall second and per CPU
// second.
func (b *benchRun) pp(n, depth int) (float64, float64, error) {
	if err := b.fill(depth); err != nil {
		return 0, 0, err
	}
	w0, c0 := time.Now(), cpuTime()
	if res := b.r.Forward([]model.Seq{{Tokens: b.toks[:n], Pos: depth, KV: b.pool.View(b.o, b.refs)}}); res[0].Err != nil {
		return 0, 0, res[0].Err
	}
	return float64(n) / time.Since(w0).Seconds(), float64(n) / (cpuTime() - c0).Seconds(), nil
}

// tg is llama-bench's tg<n>: n single-token steps after a context of
// depth tokens.
func (b *benchRun) tg(n, depth int) (float64, float64, error) {
	if err := b.fill(depth); err != nil {
		return 0, 0, err
	}
	v := b.pool.View(b.o, b.refs)
	w0, c0 := time.Now(), cpuTime()
	tok := int32(1)
	for pos := depth; pos < depth+n; pos++ {
		if res := b.r.Forward([]model.Seq{{Tokens: []int32{tok}, Pos: pos, KV: v}}); res[0].Err != nil {
			return 0, 0, res[0].Err
		}
		tok = b.toks[pos%len(b.toks)]
	}
	return float64(n) / time.Since(w0).Seconds(), float64(n) / (cpuTime() - c0).Seconds(), nil
}

// readGBps is the read bandwidth of buf (the decode weights' size, so the
// same cache regime as decode) with the run's threads: the best of two
// passes of kernels.ReadXOR over it (a pure read stream: the fastest
// single-thread reader tried, so that the fraction is not flattered), per wall
// second and per CPU second of the process. On a shared machine the wall
// figure falls whenever another process holds a core; the CPU figure is
// what the threads read while they ran, the bound the CPU-time decode
// rate is compared against.
func readGBps(par *kernels.Parallel, buf []byte) (wall, cpu float64) {
	const chunk = 1 << 18
	nChunks := (len(buf) + chunk - 1) / chunk
	sink := make([]uint64, nChunks)
	for pass := 0; pass < 3; pass++ {
		t0, c0 := time.Now(), cpuTime()
		par.For(nChunks, func(lo, hi int) {
			for c := lo; c < hi; c++ {
				sink[c] = kernels.ReadXOR(buf[c*chunk : min((c+1)*chunk, len(buf))])
			}
		})
		if pass > 0 { // the first pass brings the buffer into the TLB and caches as decode's steps do
			gb := float64(len(buf)) / 1e9
			wall = max(wall, gb/time.Since(t0).Seconds())
			if dc := (cpuTime() - c0).Seconds(); dc > 0 {
				cpu = max(cpu, gb*float64(par.Threads())/dc)
			}
		}
	}
	return wall, cpu
}

// readBuffer is the buffer readGBps reads: n bytes, every page written,
// on huge pages where the system gives them (hugeAlloc); free releases it.
// A fresh allocation's pages are not backed until written, and reads of an
// unwritten page all map the kernel's one shared zero page, which stays
// in cache: on a Sapphire Rapids VM a zeroed 620 MB buffer read at
// 18.1 GB/s, the same buffer written at 5.0 GB/s (one thread), so the
// bandwidth fraction came out 3-4x too low.
func readBuffer(n uint64) (buf []byte, free func()) {
	if n > math.MaxInt {
		panic("bench: read buffer larger than the address space")
	}
	buf, free, ok := hugeAlloc(int(n))
	if !ok {
		buf, free = make([]byte, n), func() {}
	}
	for i := range buf {
		buf[i] = byte(i*7 + 1)
	}
	return buf, free
}

// decodeWeightBytes is what one decode step reads of the weights: every
// tensor but the token embedding (one row of it is read), which counts
// only when the output projection is tied to it.
//
// In a mixture-of-experts file a token reads only the experts it chose:
// each stacked expert tensor (ffn_{gate,up,down}_exps) counts
// expert_used_count / expert_count of its bytes, and the nextn
// (multi-token-prediction) layers at the end of a glm4moe file, which
// decoding never runs, count nothing.
func decodeWeightBytes(f *gguf.File) uint64 {
	var n uint64
	_, hasOutput := f.Tensor("output.weight")
	arch := f.Architecture()
	experts, _ := f.Uint(arch + ".expert_count")
	used, _ := f.Uint(arch + ".expert_used_count")
	blocks, _ := f.Uint(arch + ".block_count")
	nextn, _ := f.Uint(arch + ".nextn_predict_layers")
	for _, t := range f.Tensors {
		if t.Name == "token_embd.weight" && hasOutput {
			continue
		}
		var l uint64
		if _, err := fmt.Sscanf(t.Name, "blk.%d.", &l); err == nil && nextn > 0 && l >= blocks-nextn {
			continue
		}
		if experts > 0 && used <= experts && strings.HasSuffix(t.Name, "_exps.weight") {
			n += t.Size / experts * used
			continue
		}
		n += t.Size
	}
	return n
}

// decodeKVBytes is what one decode step of a gen-token run after depth
// positions reads of the K/V pages on average: step i attends over
// depth+i+1 positions, a sliding-window layer over at most its window,
// each position a K and a V row of the pool's type in every layer.
func decodeKVBytes(c model.Config, typ kv.Type, depth, gen int) uint64 {
	if gen < 1 {
		return 0
	}
	row := uint64(typ.RowBytes(c.KVDim()))
	var n uint64
	for l := 0; l < c.Layers; l++ {
		for i := 0; i < gen; i++ {
			pos := depth + i + 1
			if c.Sliding(l) {
				pos = min(pos, c.SlidingWindow)
			}
			n += 2 * row * uint64(pos)
		}
	}
	return n / uint64(gen)
}

func median(x []float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// cpuTime is the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// llamaTest is one row of llama-bench's JSON output.
type llamaTest struct {
	NPrompt  int     `json:"n_prompt"`
	NGen     int     `json:"n_gen"`
	NDepth   int     `json:"n_depth"`
	NThreads int     `json:"n_threads"`
	AvgTS    float64 `json:"avg_ts"`
}

// runLlamaBench runs llama-bench once (-r 1) for one test, pp<prompt>
// (gen 0) or tg<gen> (prompt 0) at depth (-d), and returns tokens/s by
// test name (testName).
func runLlamaBench(path, modelPath string, threads, prompt, gen, depth int, kvType kv.Type) (map[string]float64, error) {
	cmd := exec.Command(path, llamaBenchArgs(modelPath, threads, prompt, gen, depth, kvType)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %v: %s", path, err, lastLine(stderr.String()))
	}
	return parseLlamaBench(out, threads)
}

// llamaBenchArgs is runLlamaBench's command line: the same KV cache type
// as sluice's pages (-ctk/-ctv: llama-bench's default f16 is sluice's),
// and for a quantized V cache flash attention forced on, which llama.cpp
// requires for one (its default, auto, picks it on CPU anyway).
func llamaBenchArgs(modelPath string, threads, prompt, gen, depth int, kvType kv.Type) []string {
	args := []string{"-m", modelPath, "-p", strconv.Itoa(prompt), "-n", strconv.Itoa(gen),
		"-d", strconv.Itoa(depth), "-t", strconv.Itoa(threads), "-r", "1", "-o", "json"}
	if kvType != kv.F16 {
		args = append(args, "-ctk", kvType.String(), "-ctv", kvType.String())
	}
	if kvType == kv.Q8_0 {
		args = append(args, "-fa", "on")
	}
	return args
}

func parseLlamaBench(out []byte, threads int) (map[string]float64, error) {
	var rows []llamaTest
	if err := json.Unmarshal(out, &rows); err != nil {
		return nil, fmt.Errorf("llama-bench output is not its JSON (-o json): %v", err)
	}
	res := map[string]float64{}
	for _, r := range rows {
		if r.NThreads != threads {
			return nil, fmt.Errorf("llama-bench ran with %d threads, asked for %d", r.NThreads, threads)
		}
		switch {
		case r.NGen == 0 && r.NPrompt > 0:
			res[testName("pp", r.NPrompt, r.NDepth)] = r.AvgTS
		case r.NPrompt == 0 && r.NGen > 0:
			res[testName("tg", r.NGen, r.NDepth)] = r.AvgTS
		}
	}
	return res, nil
}

// testName is llama-bench's name of a test: pp512, tg128, and with a
// depth tg128@d4096.
func testName(kind string, n, depth int) string {
	name := kind + strconv.Itoa(n)
	if depth > 0 {
		name += "@d" + strconv.Itoa(depth)
	}
	return name
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// benchRow is one test of one model at one thread count: medians over
// the repetitions. Llama and Ratio are 0 without --llama-bench; the
// bandwidth fields are set on the decode row only.
type benchRow struct {
	Model       string  `json:"model"`
	Threads     int     `json:"threads"`
	Test        string  `json:"test"`
	TokS        float64 `json:"tokens_per_s"`
	CPUTokS     float64 `json:"tokens_per_cpu_s"`
	LlamaTokS   float64 `json:"llama_cpp_tokens_per_s,omitempty"`
	Ratio       float64 `json:"ratio,omitempty"`
	WeightBytes uint64  `json:"decode_weight_bytes,omitempty"`
	// KVBytes: the K/V bytes a decode step reads on average over the
	// test's tokens (see decodeKVBytes); at depth they outweigh the
	// weights.
	KVBytes  uint64  `json:"decode_kv_bytes,omitempty"`
	ReadGBps float64 `json:"read_gb_per_s,omitempty"`
	// BWFraction: (weights + K/V) bytes per step x tokens per second
	// over the measured read bandwidth.
	BWFraction float64 `json:"bandwidth_fraction,omitempty"`
	// Per CPU-second: tokens_per_cpu_s scaled by the threads (each thread
	// reads its share of the weights) against the read rate per thread
	// CPU-second, so both sides exclude the time other processes held
	// the cores.
	CPUReadGBps   float64 `json:"cpu_read_gb_per_s,omitempty"`
	CPUBWFraction float64 `json:"cpu_bandwidth_fraction,omitempty"`
}

type benchReport struct {
	Kernels string `json:"kernels"`
	CPU     string `json:"cpu_features"`
	// Weights: where each model's weights lived (--weights).
	Weights []benchWeights `json:"weights"`
	Rows    []benchRow     `json:"rows"`
}

type benchWeights struct {
	Model     string `json:"model"`
	Placement string `json:"placement"`
}

// benchModel measures one model at one thread count: reps rounds, each
// sluice's tests then (with llamaBench) llama-bench's same tests, so the
// two engines see the same machine load (interleaved A B A B).
func benchModel(lm *loadedModel, path string, threads int, prompts []int, gen int, depths []int, reps int, typ kv.Type, llamaBench string, log io.Writer) ([]benchRow, error) {
	name := strings.TrimSuffix(filepath.Base(path), ".gguf")
	b, err := newBenchRun(lm.model, threads, slices.Max(depths)+max(slices.Max(prompts), gen), typ)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	wb := decodeWeightBytes(lm.file)
	buf, freeBuf := readBuffer(wb)
	defer freeBuf()
	// One test per (kind, depth): every prompt length, then the decode
	// test, at each depth.
	type test struct {
		name          string
		prompt, depth int // prompt 0: the decode test
	}
	var tests []test
	decodeRow := map[string]bool{}
	kvb := map[string]uint64{} // per decode test
	for _, d := range depths {
		for _, p := range prompts {
			tests = append(tests, test{testName("pp", p, d), p, d})
		}
		tests = append(tests, test{testName("tg", gen, d), 0, d})
		decodeRow[tests[len(tests)-1].name] = true
		kvb[tests[len(tests)-1].name] = decodeKVBytes(lm.model.Config(), typ, d, gen)
	}
	wall, cpu, llama := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
	var bw, cbw []float64
	frac, cfrac := map[string][]float64{}, map[string][]float64{} // per decode test
	for rep := 1; rep <= reps; rep++ {
		// Test by test, sluice then llama-bench, so both see the same
		// minute of a shared machine's load.
		for _, tt := range tests {
			t := tt.name
			fmt.Fprintf(log, "%s threads=%d rep %d/%d %s: sluice\n", name, threads, rep, reps, t)
			var w, c float64
			var err error
			// An untimed warmup of the test first, as llama-bench does by
			// default (the whole prompt; one decode step): the timed run
			// then starts with its weights and buffers in cache, as
			// llama-bench's does, instead of after another process (or
			// the read-bandwidth pass) has flushed them. Without it pp128
			// of the models that fit in L3 came out 10-25% below pp512's
			// per-token rate on a Zen 3, llama.cpp's 35% above.
			if tt.prompt > 0 {
				if _, _, err = b.pp(tt.prompt, tt.depth); err == nil {
					w, c, err = b.pp(tt.prompt, tt.depth)
				}
			} else {
				if _, _, err = b.tg(1, tt.depth); err == nil {
					w, c, err = b.tg(gen, tt.depth)
				}
			}
			if err != nil {
				return nil, err
			}
			wall[t], cpu[t] = append(wall[t], w), append(cpu[t], c)
			if llamaBench == "" {
				continue
			}
			fmt.Fprintf(log, "%s threads=%d rep %d/%d %s: llama-bench\n", name, threads, rep, reps, t)
			p, g := 0, gen
			if tt.prompt > 0 {
				p, g = tt.prompt, 0
			}
			res, err := runLlamaBench(llamaBench, path, threads, p, g, tt.depth, typ)
			if err != nil {
				return nil, err
			}
			v, ok := res[t]
			if !ok {
				return nil, fmt.Errorf("llama-bench printed no %s figure", t)
			}
			llama[t] = append(llama[t], v)
		}
		// Right after this rep's decode, so that the fraction compares
		// the two under the same minute of a shared machine's load.
		w, c := readGBps(b.par, buf)
		bw, cbw = append(bw, w), append(cbw, c)
		for t := range decodeRow {
			tw, tc := wall[t], cpu[t]
			step := float64(wb + kvb[t])
			frac[t] = append(frac[t], step*tw[len(tw)-1]/1e9/w)
			if c > 0 {
				// Per CPU-second all threads together read the step's
				// bytes: tokens per process CPU-second times the threads.
				cfrac[t] = append(cfrac[t], step*tc[len(tc)-1]*float64(threads)/1e9/c)
			}
		}
	}
	rows := make([]benchRow, len(tests))
	for i, tt := range tests {
		t := tt.name
		r := benchRow{Model: name, Threads: threads, Test: t, TokS: median(wall[t]), CPUTokS: median(cpu[t])}
		if llamaBench != "" {
			r.LlamaTokS = median(llama[t])
			r.Ratio = r.TokS / r.LlamaTokS
		}
		if decodeRow[t] {
			// Medians of the per-rep fractions (each rep's decode against
			// the read bandwidth measured right after it).
			r.WeightBytes, r.KVBytes, r.ReadGBps, r.BWFraction = wb, kvb[t], median(bw), median(frac[t])
			r.CPUReadGBps, r.CPUBWFraction = median(cbw), median(cfrac[t])
		}
		rows[i] = r
	}
	return rows, nil
}

func parseInts(s, what string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 1<<20 {
			return nil, fmt.Errorf("bad %s %q", what, f)
		}
		out = append(out, n)
	}
	return out, nil
}

// parseDepths reads --depth: comma-separated context depths, 0 allowed.
func parseDepths(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 || n > 1<<20 {
			return nil, fmt.Errorf("bad depth %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// Run is `sluice bench ARGS`: the kernel benchmark, or with a first
// argument serve, chat or cluster, that serving benchmark. It returns the
// exit code: 0, 1 for a failed measurement, 2 for a bad command line.
func Run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "serve" {
		return runBenchServe(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "chat" {
		return runBenchChat(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "cluster" {
		return runBenchCluster(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "crowding-ci" {
		return runCrowdingCI(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var models cli.List
	fs.Var(&models, "model", "GGUF `file` to measure (repeatable; default: stories260K from testdata/ and bench-15M-q8_0 from ../shared when present)")
	threadsFlag := fs.String("threads", strconv.Itoa(runtime.NumCPU()), "comma-separated thread `counts`; by default the machine's cores (docs/benchmarks.md's tables use 1 and 2)")
	promptFlag := fs.String("prompt", "128", "comma-separated prompt `tokens` for the prefill tests (llama-bench -p)")
	gen := fs.Int("gen", 128, "generated `tokens` for the decode test (llama-bench -n)")
	depthFlag := fs.String("depth", "0", "comma-separated context `depths`: every test runs after a prefilled context of this many tokens (llama-bench -d), e.g. 0,1024,4096 for decode at long contexts")
	kvTypeFlag := fs.String("kv-type", "f16", "element type of the KV pages: f16 (llama.cpp's and llama-bench's default), f32 or q8_0; with --llama-bench, llama-bench gets the same as -ctk/-ctv")
	weightsFlag := fs.String("weights", gguf.MemoryAuto.String(), gguf.MemoryUsage)
	reps := fs.Int("reps", 5, "`repetitions`; the median is reported")
	llamaBench := fs.String("llama-bench", "", "llama-bench `binary` to run on the same file with the same threads, interleaved with sluice's runs; prints both figures and their ratio")
	jsonOut := fs.Bool("json", false, "print the results as JSON")
	withSynth := fs.Bool("synth", false, "also write and measure the synthetic bench-15M-f32 and bench-110M-q8_0 shapes in a temporary directory; needs testdata/vocab/ggml-vocab-llama-spm.gguf (or ../shared/vocab)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the measurements to `file` (go tool pprof)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: sluice bench [flags]
       sluice bench serve [flags]   (the serving benchmark; see its --help)
       sluice bench chat [flags]    (the prefix cache: multi-turn chats, cache on and off, against llama-server)
       sluice bench cluster [flags] (router CPU per request and balance over 1, 2, 3 decode workers)
       sluice bench crowding-ci --old GLOB [--new GLOB] (crowding reports pooled: intervals, new/old)

Measures prefill (pp) and decode (tg) tokens/s the way llama-bench does:
pp<N> is one prompt of N tokens from an empty context, tg<N> is N
single-token steps; with --depth D they run after a prefilled context of D
tokens (llama-bench -d D), named pp<N>@d<D> and tg<N>@d<D>. With --llama-bench, llama-bench runs the same tests on
the same file with the same threads, alternating with sluice's runs test by
test (sluice pp128, llama-bench -p 128 -n 0 -r 1, sluice pp512, ...), and
the ratio is sluice / llama.cpp of the medians. Every timed test of either
engine follows an untimed warmup of the same test (the whole prompt; one
decode step), as llama-bench's default is.

The decode row also gives the bytes a decode step reads (the weights, and
the K/V of the positions it attends over, which dominate at depth) times tg
tokens/s as a fraction of the read bandwidth of a weight-sized buffer, measured
right after each decode rep with the same threads (median of the reps'
fractions): how close decode is to the memory limit. The "cpu" figures
divide by process CPU time instead of wall time, which on a shared machine
leaves out the time other processes held the cores.

The machine may be shared and noisy: "cpu" columns are tokens per
CPU-second. Pin single-thread runs with taskset -c 1 (llama-bench inherits
the pinning). SLUICE_KERNELS=generic|avx2|avx512 selects the kernel path.

Flags:
`)
		fs.PrintDefaults()
	}
	if code, ok := cli.ParseFlags(fs, args, stdout); !ok {
		return code
	}
	threads, err := parseInts(*threadsFlag, "thread count")
	var prompts []int
	if err == nil {
		prompts, err = parseInts(*promptFlag, "prompt length")
	}
	var depths []int
	if err == nil {
		depths, err = parseDepths(*depthFlag)
	}
	var kvType kv.Type
	if err == nil {
		kvType, err = kv.ParseType(*kvTypeFlag)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice bench: %v\n", err)
		return 2
	}
	mem, err := gguf.ParseMemory(*weightsFlag)
	if err != nil {
		fmt.Fprintf(stderr, "sluice bench: --weights: %v\n", err)
		return 2
	}
	if *gen < 1 || *reps < 1 {
		fmt.Fprintln(stderr, "sluice bench: --gen and --reps must be positive")
		return 2
	}
	if *llamaBench != "" {
		if _, err := exec.LookPath(*llamaBench); err != nil {
			fmt.Fprintf(stderr, "sluice bench: --llama-bench: %v\n", err)
			return 2
		}
	}
	if len(models) == 0 {
		for _, n := range []string{"stories260K.gguf", "bench-15M-q8_0.gguf"} {
			if p, ok := testenv.Find(filepath.Join("models", n)); ok {
				models = append(models, p)
			}
		}
		if len(models) == 0 {
			fmt.Fprintln(stderr, "sluice bench: no --model given and no shared test models found")
			return 2
		}
	}
	if *withSynth {
		dir, err := os.MkdirTemp("", "sluice-bench-")
		if err != nil {
			fmt.Fprintf(stderr, "sluice bench: %v\n", err)
			return 1
		}
		defer os.RemoveAll(dir)
		paths, err := writeBenchShapes(dir, benchVocab(), stderr)
		if err != nil {
			fmt.Fprintf(stderr, "sluice bench: %v\n", err)
			return 1
		}
		models = append(models, paths...)
	}

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "sluice bench: %v\n", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "sluice bench: %v\n", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	rep := benchReport{Kernels: kernels.Describe(), CPU: kernels.CPUFeatures()}
	for _, path := range models {
		lm, err := openModel(path, mem)
		if err != nil {
			fmt.Fprintf(stderr, "sluice bench: %v\n", err)
			return 1
		}
		rep.Weights = append(rep.Weights, benchWeights{Model: strings.TrimSuffix(filepath.Base(path), ".gguf"), Placement: lm.placed.String()})
		for _, th := range threads {
			rows, err := benchModel(lm, path, th, prompts, *gen, depths, *reps, kvType, *llamaBench, stderr)
			if err != nil {
				lm.Close()
				fmt.Fprintf(stderr, "sluice bench: %s: %v\n", filepath.Base(path), err)
				return 1
			}
			rep.Rows = append(rep.Rows, rows...)
		}
		lm.Close()
	}
	if *jsonOut {
		e := json.NewEncoder(stdout)
		e.SetIndent("", "  ")
		if err := e.Encode(rep); err != nil {
			fmt.Fprintf(stderr, "sluice bench: %v\n", err)
			return 1
		}
		return 0
	}
	printBench(stdout, rep)
	return 0
}

func printBench(w io.Writer, rep benchReport) {
	fmt.Fprintf(w, "kernels: %s\ncpu: %s\n", rep.Kernels, rep.CPU)
	for _, wt := range rep.Weights {
		fmt.Fprintf(w, "weights: %s: %s\n", wt.Model, wt.Placement)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "model\tthreads\ttest\tsluice tok/s\tcpu\tllama.cpp\tratio\tweights GB\tkv GB\tread GB/s\tbw fraction\tcpu read GB/s\tcpu bw fraction\t\n")
	for _, r := range rep.Rows {
		ll, ratio := "—", "—"
		if r.LlamaTokS > 0 {
			ll, ratio = fmt.Sprintf("%.1f", r.LlamaTokS), fmt.Sprintf("%.2fx", r.Ratio)
		}
		wb, kb, rb, fr, crb, cfr := "", "", "", "", "", ""
		if r.ReadGBps > 0 {
			wb, kb, rb, fr = fmt.Sprintf("%.3f", float64(r.WeightBytes)/1e9), fmt.Sprintf("%.3f", float64(r.KVBytes)/1e9), fmt.Sprintf("%.1f", r.ReadGBps), fmt.Sprintf("%.0f%%", 100*r.BWFraction)
		}
		if r.CPUReadGBps > 0 {
			crb, cfr = fmt.Sprintf("%.1f", r.CPUReadGBps), fmt.Sprintf("%.0f%%", 100*r.CPUBWFraction)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Model, r.Threads, r.Test, r.TokS, r.CPUTokS, ll, ratio, wb, kb, rb, fr, crb, cfr)
	}
	tw.Flush()
}

// writeBenchShapes writes llama.cpp's synthetic benchmark shapes that are
// not shared files, named as the reference table names them.
func writeBenchShapes(dir, vocab string, log io.Writer) ([]string, error) {
	var out []string
	for _, x := range []struct {
		preset, name string
		t            quant.Type
	}{{"bench-15M", "bench-15M-f32", quant.F32}, {"bench-110M", "bench-110M-q8_0", quant.Q8_0}} {
		spec, err := synth.PresetSpec(x.preset, x.t, vocab)
		if err != nil {
			return nil, err
		}
		p := filepath.Join(dir, x.name+".gguf")
		f, err := os.Create(p)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(log, "writing %s\n", p)
		w := bufio.NewWriterSize(f, 1<<20)
		if err := synth.Write(w, spec); err != nil {
			f.Close()
			return nil, err
		}
		if err := w.Flush(); err != nil {
			f.Close()
			return nil, err
		}
		if err := f.Close(); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// benchVocab is the tokenizer copied into the synthetic bench shapes (the
// llama-spm vocabulary llama.cpp's figures were measured with).
func benchVocab() string {
	p, _ := testenv.Find(filepath.Join("vocab", "ggml-vocab-llama-spm.gguf"))
	return p
}
