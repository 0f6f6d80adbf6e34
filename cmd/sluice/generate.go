package main

import (
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"sluice/internal/cli"
	"sluice/internal/gguf"
	"sluice/internal/kernels"
	"sluice/internal/kv"
	"sluice/internal/model"
	"sluice/internal/sample"
	"sluice/internal/synth"
	"sluice/internal/tokenizer"
)

func init() {
	register(command{
		name:    "generate",
		summary: "run one prompt through a model and print the generated text",
		run:     func(args []string) int { return runGenerate(args, os.Stdin, os.Stdout, os.Stderr) },
	})
}

// genOptions is one generate run. The command fills it from flags; tests
// fill it directly and use the hooks.
type genOptions struct {
	ModelPath string // "" = the built-in default model
	Prompt    string
	MaxTokens int
	Sampling  sample.Params
	Threads   int
	PageSize  int
	// KVType is the pool's element type (--kv-type; zero: F16).
	KVType       kv.Type
	Batch        int  // prefill chunk size (llama.cpp's n_batch)
	ParseSpecial bool // control tokens written in the prompt become their ids
	IgnoreEOS    bool
	// Stop ends generation when the text contains one of these strings;
	// the text stops before it (OpenAI's stop).
	Stop []string
	// Stream, when set, receives text as it is generated.
	Stream io.Writer

	// forced replaces sampling by these tokens, in order (teacher forcing):
	// generation feeds forced[i] after step i and stops when they run out.
	forced []int32
	// onLogits sees the logits of every generation step (step 0 follows the
	// prompt). The slice is valid only during the call.
	onLogits func(step int, logits []float32)
}

// genResult is what `sluice generate --json` prints.
type genResult struct {
	PromptIDs []int32    `json:"prompt_token_ids"`
	TokenIDs  []int32    `json:"token_ids"`
	Text      string     `json:"text"`
	Finish    string     `json:"finish_reason"` // "stop" (end-of-generation token or stop string) or "length"
	Timings   genTimings `json:"timings"`
}

// genTimings follow llama.cpp's report: prompt processing over the prompt's
// tokens, and generation over the decode steps (each feeds one token).
type genTimings struct {
	PrefillTPS float64 `json:"prefill_tokens_per_second"`
	DecodeTPS  float64 `json:"decode_tokens_per_second"`
	PromptMS   float64 `json:"prompt_ms"`
	DecodeMS   float64 `json:"decode_ms"`
	// DecodeSteps is the number of decode forward passes timed.
	DecodeSteps int `json:"decode_steps"`
}

// loadedModel is a model file opened for generation.
type loadedModel struct {
	file  *gguf.File
	model *model.Model
	tok   *tokenizer.Tokenizer
	// placed is where the weights live (gguf.File.Place).
	placed gguf.Placement
}

func (l *loadedModel) Close() error { return l.file.Close() }

func openModel(path string, mem gguf.Memory) (*loadedModel, error) {
	var f *gguf.File
	var err error
	if path == "" {
		f, err = defaultModelFile()
	} else {
		f, err = gguf.Open(path)
	}
	if err != nil {
		return nil, err
	}
	placed, err := f.Place(mem)
	if err != nil {
		f.Close()
		return nil, err
	}
	m, err := model.Load(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	if tok.Size() != m.Config().Vocab {
		f.Close()
		return nil, genErr("vocab_mismatch", "the tokenizer has %d tokens but the model's embedding has %d rows", tok.Size(), m.Config().Vocab)
	}
	return &loadedModel{file: f, model: m, tok: tok, placed: placed}, nil
}

// generate runs one request through the same pieces the server uses: the
// tokenizer, a real KV pool with an owned reservation (every K/V access is
// owner- and generation-checked), batched forward steps and the sampler.
func generate(lm *loadedModel, o genOptions) (*genResult, error) {
	m, tok := lm.model, lm.tok
	cfg := m.Config()
	if err := o.Sampling.Validate(0); err != nil {
		return nil, err
	}
	if o.MaxTokens < 0 {
		return nil, genErr("invalid_max_tokens", "max tokens %d is negative", o.MaxTokens)
	}
	if o.PageSize <= 0 {
		o.PageSize = kv.DefaultPageSize
	}
	if o.Batch <= 0 {
		o.Batch = 512
	}
	prompt := tok.Encode(o.Prompt, true, o.ParseSpecial)
	if len(prompt) == 0 {
		return nil, genErr("empty_prompt", "the prompt is empty and the model adds no BOS token; give some text")
	}
	maxTok := o.MaxTokens
	if o.forced != nil {
		maxTok = len(o.forced)
	}
	if !kv.TokensFit(len(prompt), maxTok, cfg.Context) {
		return nil, genErr("context_length_exceeded", "prompt (%d tokens) + max tokens (%d) exceeds the model's context of %d", len(prompt), maxTok, cfg.Context)
	}
	pages := kv.PagesFor(len(prompt)+maxTok, o.PageSize)
	pool, err := kv.New(kv.Config{Geometry: kv.Geometry{Layers: cfg.Layers, KVDim: cfg.KVDim(), PageSize: o.PageSize, Type: o.KVType}, Pages: pages})
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	owner := kv.Owner{Tenant: "cli"}
	rand.Read(owner.ID[:])
	table, err := pool.Reserve(owner, pages)
	if err != nil {
		return nil, err
	}
	view := pool.View(owner, table)
	defer pool.Release(owner, table)

	par := kernels.NewParallel(max(1, o.Threads))
	defer par.Close()
	run := m.NewRunner(par)
	res := &genResult{PromptIDs: prompt, TokenIDs: []int32{}, Finish: "length"}

	start := time.Now()
	var logits []float32
	for pos := 0; pos < len(prompt); pos += o.Batch {
		end := min(len(prompt), pos+o.Batch)
		r := run.Forward([]model.Seq{{Tokens: prompt[pos:end], Pos: pos, KV: view}})
		if r[0].Err != nil {
			return nil, r[0].Err
		}
		logits = r[0].Logits
	}
	res.Timings.PromptMS = ms(time.Since(start))

	samp := sample.New(o.Sampling)
	dec := tok.NewStreamDecoder()
	var text []byte
	stops := sample.NewStopMatcher(o.Stop)
	emit := func(s string) {
		text = append(text, s...)
		if o.Stream != nil && s != "" {
			io.WriteString(o.Stream, s)
		}
	}
	start = time.Now()
	for step := 0; step < maxTok; step++ {
		if o.onLogits != nil {
			o.onLogits(step, logits)
		}
		var id int32
		if o.forced != nil {
			id = o.forced[step]
		} else {
			if id, err = samp.Sample(logits); err != nil {
				return nil, err
			}
			if tok.IsEOG(id) && !o.IgnoreEOS {
				res.Finish = "stop"
				break
			}
		}
		res.TokenIDs = append(res.TokenIDs, id)
		out, stopped := stops.Push(dec.Push(id))
		emit(out)
		if stopped {
			res.Finish = "stop"
			break
		}
		if step == maxTok-1 {
			break // the last token's logits are never needed
		}
		r := run.Forward([]model.Seq{{Tokens: []int32{id}, Pos: len(prompt) + step, KV: view}})
		if r[0].Err != nil {
			return nil, r[0].Err
		}
		logits = r[0].Logits
		res.Timings.DecodeSteps++
	}
	res.Timings.DecodeMS = ms(time.Since(start))
	if !stops.Stopped() {
		out, _ := stops.Push(dec.Flush())
		emit(out + stops.Flush())
	}
	res.Text = string(text)
	if res.Timings.PromptMS > 0 {
		res.Timings.PrefillTPS = float64(len(prompt)) / res.Timings.PromptMS * 1000
	}
	if res.Timings.DecodeMS > 0 {
		res.Timings.DecodeTPS = float64(res.Timings.DecodeSteps) / res.Timings.DecodeMS * 1000
	}
	return res, nil
}

// genError is a generate failure of the request itself, with a stable code.
type genError struct{ Code, Msg string }

func (e *genError) Error() string { return e.Code + ": " + e.Msg }

func genErr(code, format string, args ...any) error {
	return &genError{Code: code, Msg: fmt.Sprintf(format, args...)}
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// maxStdinPrompt bounds a prompt read from stdin: far beyond any model's
// context, so only a mistaken pipe (a device, a huge file) meets it.
const maxStdinPrompt = 64 << 20

// promptFromStdin reads the prompt from stdin when it is not a terminal
// (nor /dev/null, also a character device): `echo text | sluice generate`,
// as llama.cpp's tools take a prompt file. A nil stdin is a terminal. One
// trailing newline is the shell's (echo, a file's last line), not the
// prompt's.
func promptFromStdin(stdin io.Reader) (string, error) {
	const hint = "give the prompt with --prompt TEXT, or pipe it on stdin (echo 'Once upon a time' | sluice generate ...)"
	if stdin == nil {
		return "", fmt.Errorf("no prompt: %s", hint)
	}
	if f, ok := stdin.(*os.File); ok {
		if st, err := f.Stat(); err != nil || st.Mode()&os.ModeCharDevice != 0 {
			return "", fmt.Errorf("no prompt: %s", hint)
		}
	}
	b, err := io.ReadAll(io.LimitReader(stdin, maxStdinPrompt+1))
	if err != nil {
		return "", fmt.Errorf("reading the prompt from stdin: %v", err)
	}
	if len(b) > maxStdinPrompt {
		return "", fmt.Errorf("the prompt on stdin is larger than %d MiB; is the right file piped in?", maxStdinPrompt>>20)
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if s == "" {
		return "", fmt.Errorf("stdin held no prompt: %s", hint)
	}
	return s, nil
}

func runGenerate(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("generate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o genOptions
	var temp, topP float64
	var seed uint64
	var asJSON bool
	fs.StringVar(&o.ModelPath, "model", "", "GGUF model `file`, or hf://ORG/REPO[:QUANT] as sluice serve takes it (default: the built-in synthetic model)")
	fs.StringVar(&o.Prompt, "prompt", "", "prompt `text`; without it, the prompt is read from stdin when stdin is not a terminal")
	fs.IntVar(&o.MaxTokens, "max-tokens", 64, "generate at most `n` tokens")
	fs.Float64Var(&temp, "temperature", 0, "sampling temperature; 0 is greedy")
	fs.IntVar(&o.Sampling.TopK, "top-k", 0, "keep the `k` most likely tokens (0: all)")
	fs.Float64Var(&topP, "top-p", 1, "keep the smallest set of tokens whose probability reaches `p`")
	fs.Uint64Var(&seed, "seed", 0, "random `seed` for non-greedy sampling")
	fs.IntVar(&o.Threads, "threads", runtime.NumCPU(), "compute `threads`; by default the machine's cores")
	fs.IntVar(&o.PageSize, "page-size", kv.DefaultPageSize, "KV page size in `tokens`")
	fs.IntVar(&o.Batch, "batch", 512, "prefill chunk size in `tokens`")
	kvType := fs.String("kv-type", "f16", "element type of KV pages: f16 (llama.cpp's default), f32 or q8_0 (llama.cpp's -ctk q8_0 -ctv q8_0)")
	weights := fs.String("weights", gguf.MemoryAuto.String(), gguf.MemoryUsage)
	fs.BoolVar(&o.ParseSpecial, "special", false, "parse control tokens (e.g. <|im_start|>) written in the prompt")
	fs.BoolVar(&o.IgnoreEOS, "ignore-eos", false, "keep generating past end-of-generation tokens")
	var stops cli.List
	fs.Var(&stops, "stop", "stop when the text contains this `string` (repeatable); it is not printed")
	fs.BoolVar(&asJSON, "json", false, "print one JSON object (prompt_token_ids, token_ids, text, timings) instead of streaming text")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: sluice generate [flags]

Runs one prompt through a GGUF model (any architecture sluice serves, see
docs/models.md) on the CPU, through a real KV page pool, and prints the
generated text as it comes.
With --json it prints one object instead:
  {"prompt_token_ids":[...], "token_ids":[...], "text":"...",
   "timings":{"prefill_tokens_per_second":..., "decode_tokens_per_second":..., ...}}

Example:
  sluice generate --model stories260K.gguf --prompt "Once upon a time" --max-tokens 32 --temperature 0 --json

Flags:
`)
		fs.PrintDefaults()
	}
	if code, ok := parseFlagsTo(fs, args, stdout); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sluice generate: unexpected argument %q (the prompt goes in --prompt)\n", fs.Arg(0))
		return 2
	}
	// Without --prompt there used to be a run on an empty prompt, which
	// looked like a model's output to a user who forgot the flag. An
	// explicit --prompt "" still runs from BOS alone.
	if !cli.IsSet(fs, "prompt") {
		p, err := promptFromStdin(stdin)
		if err != nil {
			fmt.Fprintf(stderr, "sluice generate: %v\n", err)
			return 2
		}
		o.Prompt = p
	}
	kt, err := kv.ParseType(*kvType)
	if err != nil {
		fmt.Fprintf(stderr, "sluice generate: %v\n", err)
		return 2
	}
	o.KVType = kt
	mem, err := gguf.ParseMemory(*weights)
	if err != nil {
		fmt.Fprintf(stderr, "sluice generate: --weights: %v\n", err)
		return 2
	}
	o.Stop = stops
	o.Sampling.Temperature = float32(temp)
	o.Sampling.TopP = float32(topP)
	o.Sampling.Seed = seed
	if o.ModelPath, err = localModel(o.ModelPath); err != nil {
		fmt.Fprintf(stderr, "sluice generate: %v\n", err)
		return 1
	}
	lm, err := openModel(o.ModelPath, mem)
	if err != nil {
		fmt.Fprintf(stderr, "sluice generate: %v\n", err)
		return 1
	}
	defer lm.Close()
	if !asJSON {
		o.Stream = stdout
	}
	res, err := generate(lm, o)
	if err != nil {
		fmt.Fprintf(stderr, "\nsluice generate: %v\n", err)
		return 1
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		if err := enc.Encode(res); err != nil {
			fmt.Fprintf(stderr, "sluice generate: %v\n", err)
			return 1
		}
		return 0
	}
	fmt.Fprintln(stdout)
	t := res.Timings
	fmt.Fprintf(stderr, "prompt: %d tokens, %.1f ms (%.1f tok/s); generated: %d tokens, %d decode steps in %.1f ms (%.1f tok/s)\n",
		len(res.PromptIDs), t.PromptMS, t.PrefillTPS, len(res.TokenIDs), t.DecodeSteps, t.DecodeMS, t.DecodeTPS)
	return 0
}

// defaultModelFile is the built-in default model (synthetic random
// weights: its text is gibberish, but it needs no download).
func defaultModelFile() (*gguf.File, error) {
	b, err := synth.Default()
	if err != nil {
		return nil, err
	}
	return gguf.Parse(b)
}
