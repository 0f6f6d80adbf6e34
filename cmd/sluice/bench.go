package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"sluice/internal/kernels"
	"sluice/internal/kv"
	"sluice/internal/model"
	"sluice/internal/quant"
	"sluice/internal/synth"
	"sluice/internal/testenv"
)

func init() {
	register(command{
		name:    "bench",
		summary: "measure prefill and decode tokens/s and compare them with llama.cpp's figures",
		run:     func(args []string) int { return runBench(args, os.Stdout, os.Stderr) },
	})
}

// benchResult is one model at one thread count.
type benchResult struct {
	Model   string
	Threads int
	PP, TG  float64 // wall-clock tokens/s (median over repetitions)
	// PPCPU and TGCPU are tokens per CPU-second: on a shared machine they
	// show what the code does when the neighbours are not stealing cores.
	PPCPU, TGCPU float64
}

// benchModel measures llama-bench's pp<prompt> (one prompt of that many
// tokens in one step, fresh KV each time) and tg<gen> (gen single-token
// steps from an empty context), through a real kv.Pool, reps times each,
// and returns the medians.
func benchModel(m *model.Model, threads, prompt, gen, reps int) (benchResult, error) {
	c := m.Config()
	tokens := max(prompt, gen)
	if tokens > c.Context {
		return benchResult{}, fmt.Errorf("%d tokens exceed the model's context of %d", tokens, c.Context)
	}
	pool, err := kv.New(kv.Config{Geometry: kv.Geometry{Layers: c.Layers, KVDim: c.KVDim(), PageSize: kv.DefaultPageSize}, Pages: kv.PagesFor(tokens, kv.DefaultPageSize)})
	if err != nil {
		return benchResult{}, err
	}
	defer pool.Close()
	o := kv.Owner{Tenant: "bench", ID: kv.ID{1}}
	refs, err := pool.Reserve(o, kv.PagesFor(tokens, kv.DefaultPageSize))
	if err != nil {
		return benchResult{}, err
	}
	par := kernels.NewParallel(threads)
	defer par.Close()
	r := m.NewRunner(par)
	toks := make([]int32, prompt)
	for i := range toks {
		// Any valid ids do: the cost does not depend on which.
		toks[i] = int32(1 + (i*7919)%(c.Vocab-1))
	}
	var pp, tg, ppc, tgc []float64
	for rep := 0; rep < reps; rep++ {
		w0, c0 := time.Now(), cpuTime()
		if res := r.Forward([]model.Seq{{Tokens: toks, KV: pool.View(o, refs)}}); res[0].Err != nil {
			return benchResult{}, res[0].Err
		}
		pp = append(pp, float64(prompt)/time.Since(w0).Seconds())
		ppc = append(ppc, float64(prompt)/(cpuTime()-c0).Seconds())

		v := pool.View(o, refs)
		w0, c0 = time.Now(), cpuTime()
		tok := int32(1)
		for pos := 0; pos < gen; pos++ {
			res := r.Forward([]model.Seq{{Tokens: []int32{tok}, Pos: pos, KV: v}})
			if res[0].Err != nil {
				return benchResult{}, res[0].Err
			}
			tok = toks[pos%len(toks)]
		}
		tg = append(tg, float64(gen)/time.Since(w0).Seconds())
		tgc = append(tgc, float64(gen)/(cpuTime()-c0).Seconds())
	}
	return benchResult{Threads: threads, PP: median(pp), TG: median(tg), PPCPU: median(ppc), TGCPU: median(tgc)}, nil
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

// llamaFigures are llama.cpp's tokens/s for one model and thread count.
type llamaFigures struct{ pp128, pp512, tg128 float64 }

// parseLlamaSpeed reads the llama-bench table of llama-cpp-speed.md:
// rows "| model | threads | pp128 | pp512 | tg128 |", values like
// "5668 (5162-7095)" or "—".
func parseLlamaSpeed(r io.Reader) (map[string]map[int]llamaFigures, error) {
	out := map[string]map[int]llamaFigures{}
	sc := bufio.NewScanner(r)
	inTable := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "| model | threads |") {
			inTable = true
			continue
		}
		if !inTable {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			if len(out) > 0 {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 5 {
			continue
		}
		th, err := strconv.Atoi(strings.TrimSpace(cells[1]))
		if err != nil {
			continue // the |---| separator
		}
		num := func(s string) float64 {
			f := strings.Fields(s)
			if len(f) == 0 {
				return 0
			}
			v, _ := strconv.ParseFloat(f[0], 64)
			return v
		}
		name := strings.TrimSpace(cells[0])
		if out[name] == nil {
			out[name] = map[int]llamaFigures{}
		}
		out[name][th] = llamaFigures{num(cells[2]), num(cells[3]), num(cells[4])}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("no llama-bench table (| model | threads | pp128 | pp512 | tg128 |) found")
	}
	return out, nil
}

func ratio(a, b float64) string {
	if b == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

func runBench(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var models listFlag
	fs.Var(&models, "model", "GGUF `file` to measure (repeatable; default: stories260K from testdata/ and bench-15M-q8_0 from ../shared when present)")
	threadsFlag := fs.String("threads", strconv.Itoa(runtime.NumCPU()), "comma-separated thread `counts`; by default the machine's cores (the README's table uses 1 and 2)")
	prompt := fs.Int("prompt", 128, "prompt `tokens` for the prefill figure (llama-bench -p)")
	gen := fs.Int("gen", 128, "generated `tokens` for the decode figure (llama-bench -n)")
	reps := fs.Int("reps", 5, "`repetitions`; the median is reported")
	withSynth := fs.Bool("synth", false, "also write and measure the synthetic bench-15M-f32 and bench-110M-q8_0 shapes (llama-cpp-speed.md) in a temporary directory; needs testdata/vocab/ggml-vocab-llama-spm.gguf (or ../shared/vocab)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the measurements to `file` (go tool pprof)")
	refPath := fs.String("reference", "", "llama.cpp speed `file` (default: testdata/reference/llama-cpp-speed.md)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: sluice bench [flags]

Measures prefill (pp) and decode (tg) tokens/s the way llama-bench does and
prints them next to llama.cpp's figures as ratios. Models are matched to the
reference table by file name (stories260K.gguf -> stories260K). To include
the larger synthetic shapes, write them first with sluice's synthetic-model
command and pass them with --model.

The machine is shared and noisy: "cpu" columns are tokens per CPU-second,
steadier than wall clock when neighbours steal cores. Pin single-thread runs
(taskset -c 1) to compare with llama.cpp's pinned figures.

Flags:
`)
		fs.PrintDefaults()
	}
	if code, ok := parseFlagsTo(fs, args, stdout); !ok {
		return code
	}
	var threads []int
	for _, s := range strings.Split(*threadsFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(stderr, "sluice bench: bad thread count %q\n", s)
			return 2
		}
		threads = append(threads, n)
	}
	if *prompt < 1 || *gen < 1 || *reps < 1 {
		fmt.Fprintln(stderr, "sluice bench: --prompt, --gen and --reps must be positive")
		return 2
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
	if *refPath == "" {
		*refPath, _ = testenv.Find(filepath.Join("reference", "llama-cpp-speed.md"))
	}
	var ref map[string]map[int]llamaFigures
	if f, err := os.Open(*refPath); err == nil {
		ref, err = parseLlamaSpeed(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(stderr, "sluice bench: %s: %v (printing sluice's figures alone)\n", *refPath, err)
		}
	} else {
		fmt.Fprintf(stderr, "sluice bench: no llama.cpp figures (%v); printing sluice's alone\n", err)
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
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "model\tthreads\tpp%d tok/s\tcpu\tllama.cpp\tratio\ttg%d tok/s\tcpu\tllama.cpp\tratio\t\n", *prompt, *gen)
	for _, path := range models {
		lm, err := openModel(path)
		if err != nil {
			fmt.Fprintf(stderr, "sluice bench: %v\n", err)
			return 1
		}
		name := strings.TrimSuffix(filepath.Base(path), ".gguf")
		for _, th := range threads {
			res, err := benchModel(lm.model, th, *prompt, *gen, *reps)
			if err != nil {
				lm.Close()
				fmt.Fprintf(stderr, "sluice bench: %s: %v\n", name, err)
				return 1
			}
			lf := ref[name][th]
			lpp := lf.pp128
			if *prompt == 512 {
				lpp = lf.pp512
			} else if *prompt != 128 {
				lpp = 0
			}
			ltg := lf.tg128
			if *gen != 128 {
				ltg = 0
			}
			fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%s\t%s\t%.0f\t%.0f\t%s\t%s\t\n", name, th,
				res.PP, res.PPCPU, num(lpp), ratio(res.PP, lpp), res.TG, res.TGCPU, num(ltg), ratio(res.TG, ltg))
			fmt.Fprintf(stderr, "measured %s with %d thread(s)\n", name, th)
		}
		lm.Close()
	}
	tw.Flush()
	return 0
}

func num(v float64) string {
	if v == 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f", v)
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
