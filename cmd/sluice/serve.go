package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sluice/internal/cli"
	"sluice/internal/engine"
	"sluice/internal/gguf"
	"sluice/internal/kernels"
	"sluice/internal/kv"
	"sluice/internal/preflight"
	"sluice/internal/router"
	"sluice/internal/router/node"
	"sluice/internal/tlsload"

	"github.com/prometheus/client_golang/prometheus"
)

func init() {
	register(command{
		name:    "serve",
		summary: "run router, prefill and decode in one process (OpenAI-compatible HTTP API)",
		run:     runServe,
	})
}

// roleOpts are the flags every serving role shares: the model, the
// context and the KV pool that preflight checks against it (I2).
type roleOpts struct {
	model string
	// hf is -hf ORG/REPO[:QUANT] (llama-server's flag): --model hf://...
	hf         string
	context    string
	kvMemory   string
	poolTokens int
	kvType     string
	// weights: --weights, where the weights live (roles that compute).
	weights  string
	pageSize int
	kvVerify string
	// maskCache is --grammar-mask-cache.
	maskCache string
	threads   int
	// computePrio is --compute-priority, computeClass what it names
	// (parsed with the log flags).
	computePrio  string
	computeClass kernels.ThreadClass
	maxConc      int
	// chunk and stepTokens: the scheduler's prefill chunk and step token
	// budget (--prefill-chunk, --max-num-batched-tokens); sharedStep the
	// prompt tokens of a step tenants share (--shared-step-tokens, 0: the
	// chunk, half of it colocated).
	chunk, stepTokens, sharedStep int
	// afterPrefill: --handoff-after-prefill (the handoff before it streamed).
	afterPrefill bool
	// nestCost is --nest-forward-cost (the roles whose steps pause: serve,
	// prefill): "auto" or a token count.
	nestCost  string
	logFormat string
	logLevel  string
	// servedName, when set, is the model id clients see and send.
	servedName string
	// worker: the flags are a prefill or decode worker's (no HTTP API of
	// its own); set before register.
	worker bool
}

// defaultKVMemory is every role's KV pool size unless told otherwise, and
// what preflight checks by default, so the check matches the launch:
// auto, a share of the memory available (see sizeAutoKV).
const defaultKVMemory = kvAuto

// defaultKVVerify is --kv-verify's default (see docs/operations.md, "Prefix cache",
// section for the measured cost of sample).
const defaultKVVerify = "sample"

// defaultMaskCache is --grammar-mask-cache's default (grammar.DefaultMaskBytes).
const defaultMaskCache = "512MiB"

// roleThreads is the default --threads: a worker process (prefill or
// decode, normally on its own host) uses every core; `sluice serve` runs
// prefill and decode side by side, so each gets half the cores (at least
// one), and the colocated engine, one scheduler, gets them all.
func roleThreads(cores int, sharedWithOtherRole bool) int {
	if sharedWithOtherRole {
		return max(1, cores/2)
	}
	return max(1, cores)
}

func (o *roleOpts) register(fs *flag.FlagSet, pool bool) {
	fs.StringVar(&o.model, "model", "", modelUsage)
	fs.StringVar(&o.hf, "hf", "", hfUsage)
	fs.StringVar(&o.context, "context", "auto", "context length in tokens, or \"auto\": the model's training context lowered to what every KV pool holds (logged). An explicit value larger than a pool refuses to start (I2)")
	// The spellings vLLM and llama-server users type, same meaning.
	cli.Alias(fs, "m", "model")
	cli.Alias(fs, "c", "context")
	cli.Alias(fs, "ctx-size", "context") // llama-server's long name of -c
	cli.Alias(fs, "max-model-len", "context")
	if pool {
		fs.StringVar(&o.kvMemory, "kv-memory", defaultKVMemory, kvMemoryUsage)
		fs.IntVar(&o.poolTokens, "kv-pool-tokens", 0, "KV pool size per role in token slots (rounded up to whole pages); overrides --kv-memory")
		fs.IntVar(&o.pageSize, "page-size", preflight.DefaultPageSize, "token slots per KV page")
		fs.StringVar(&o.kvVerify, "kv-verify", defaultKVVerify, "when sealed KV pages are re-hashed against their seal digest (a mismatch quarantines the page and fails its readers): off; hit (a cached prefix page each time a request hits it); sample (hit, plus a bounded round-robin sweep of sealed pages, cached or private: at most 1 page a scheduler step and at most 0.5% of the forward steps' time); all (debugging: every sealed page every step)")
		fs.StringVar(&o.weights, "weights", gguf.MemoryAuto.String(), gguf.MemoryUsage)
		fs.StringVar(&o.kvType, "kv-type", preflight.KVF16, "element type of KV pages: f16 (half the bytes per token of f32, so twice the context in the same --kv-memory; llama.cpp's default), f32, or q8_0 (34 bytes per 32 elements: 1.88x f16's context; llama.cpp's -ctk q8_0 -ctv q8_0). Every role must use the same (the handoff refuses a peer of another type)")
		if o.worker {
			fs.IntVar(&o.threads, "threads", roleThreads(availableCPUs(), false), "threads per forward step; by default the machine's cores, or the container's CPU limit (cgroup v2 cpu.max) when lower")
		} else {
			fs.IntVar(&o.threads, "threads", roleThreads(availableCPUs(), true), "threads per forward step of each role; by default half the machine's cores (or of the container's CPU limit, cgroup v2 cpu.max) each, as prefill and decode compute at once (prefill borrows decode's threads while decode has nothing to compute), and all of them with --colocated")
		}
		fs.IntVar(&o.stepTokens, "max-num-batched-tokens", engine.DefaultStepTokens, fmt.Sprintf("token budget of one forward step of each role, every sequence together (vLLM's name): decoding sequences come first, one token each (always run, counted against the budget), prompt chunks share the rest, the least served tenant's first (docs/isolation.md, step shares). Larger: long prompts finish sooner; smaller: decode's inter-token latency stays lower while prompts arrive. %d to %d, and at least --prefill-chunk", 1, engine.MaxStepTokens))
		fs.IntVar(&o.chunk, "prefill-chunk", engine.DefaultChunkTokens, fmt.Sprintf("prompt tokens one sequence may run per step (chunked prefill): a longer prompt runs as several chunks interleaved with decode steps. 1 to %d", engine.MaxChunkTokens))
		fs.IntVar(&o.sharedStep, "shared-step-tokens", 0, "prompt tokens of one step, every tenant's together, while tenants share a role's batch (another tenant in it within the last 64 steps): a tenant's prompt that arrives waits for the step in progress, so this bounds what a co-tenant's flood makes it wait for (docs/isolation.md, step shares). 0: --prefill-chunk (half of it with --colocated, where a step yields to one co-tenant pass only); up to --max-num-batched-tokens (shared steps as long as any). Smaller: a co-tenant's time to first token is lower while another floods; larger: the flood's prompts run in fewer, longer steps")
		fs.StringVar(&o.maskCache, "grammar-mask-cache", defaultMaskCache, "memory each role may hold in cached token masks of structured outputs (response_format, tools), every tenant's compiled grammars together, e.g. 512MiB: a position's mask is a bit per vocabulary token (19 KB at 151k tokens). Past it, the masks of the least recently used grammar of the tenant holding the most are dropped (a dropped mask costs a trie walk again)")
		fs.StringVar(&o.computePrio, "compute-priority", "yield", "how the OS schedules the threads that run forward passes (Linux): normal; yield (the default): compute keeps its share of the cores but with a long time slice (20 ms, Linux 6.12 or later), so the process's other threads (a handoff's push, a token's stream, a connection's reader) preempt it the moment they wake instead of waiting up to a slice (1.5-3 ms) for a core: lower time to first token for one tenant while another floods (docs/operations.md); low (nice +10) and idle (SCHED_IDLE) lower compute instead, which gives its share of the cores away to every other process on the host: on a shared machine throughput drops (idle: to almost nothing beside one busy process). When the OS refuses a class, compute stays normal and a warning says so")
	}
	if o.worker {
		// A worker counts no sequences: its engine takes what its pool's
		// pages hold (engine.DecodeWorker, PrefillWorker).
		fs.IntVar(&o.maxConc, "max-concurrency", 64, "with --kv-memory auto, the most sequences of the full context the pool is sized for (the log's \"max concurrency\"). It does not bound the sequences in flight: the pool's pages do, and the router's --max-concurrency bounds the requests")
	} else {
		fs.IntVar(&o.maxConc, "max-concurrency", 64, "requests holding KV pages at once; more wait in the queue (--max-queue)")
		fs.StringVar(&o.servedName, "served-model-name", "", "the model id clients see in /v1/models and send as \"model\" (default: the model file's name)")
	}
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn, error")
}

// memory is --weights (the roles that compute; the router always keeps
// the shared mapping).
func (o *roleOpts) memory() (gguf.Memory, error) {
	m, err := gguf.ParseMemory(o.weights)
	if err != nil {
		return m, fmt.Errorf("--weights: %w", err)
	}
	return m, nil
}

func (o *roleOpts) pools() (node.Pools, error) {
	var p node.Pools
	if o.context != "auto" && o.context != "" {
		n, err := strconv.Atoi(o.context)
		if err != nil || n <= 0 {
			return p, fmt.Errorf("--context %q is neither a positive token count nor \"auto\"", o.context)
		}
		p.Context = n
	}
	if o.pageSize <= 0 {
		return p, fmt.Errorf("--page-size %d must be positive", o.pageSize)
	}
	if err := o.checkBatch(); err != nil {
		return p, err
	}
	p.PageSize = o.pageSize
	v, err := kv.ParseVerify(o.kvVerify)
	if err != nil {
		return p, err
	}
	p.Verify = v
	if o.maskCache != "" {
		b, err := preflight.ParseBytes(o.maskCache)
		if err != nil || b <= 0 {
			return p, fmt.Errorf("--grammar-mask-cache %q: give a size such as 512MiB", o.maskCache)
		}
		p.GrammarMaskBytes = b
	}
	if o.kvType == "q8" {
		o.kvType = preflight.KVQ8_0 // llama.cpp's spelling is q8_0; accept the short one as kv.ParseType does
	}
	if !preflight.ValidKVType(o.kvType) {
		return p, fmt.Errorf("--kv-type %q: use f16, f32 or q8_0", o.kvType)
	}
	p.KVType = o.kvType
	if o.poolTokens < 0 {
		return p, fmt.Errorf("--kv-pool-tokens %d must not be negative", o.poolTokens)
	}
	if o.poolTokens > 0 {
		p.PoolTokens = o.poolTokens
		return p, nil
	}
	if o.kvMemory == kvAuto {
		return p, nil // sized once the model is loaded (sizeAutoKV)
	}
	b, err := preflight.ParseBytes(o.kvMemory)
	if err != nil {
		return p, fmt.Errorf("--kv-memory: %w", err)
	}
	p.KVMemory = b
	return p, nil
}

// checkBatch refuses a prefill chunk or step budget out of bounds, naming
// the flags.
func (o *roleOpts) checkBatch() error {
	if engine.CheckBatch(o.chunk, o.stepTokens) == nil {
		if o.sharedStep < 0 || o.sharedStep > o.stepTokens {
			return fmt.Errorf("--shared-step-tokens %d: give 0 (the prefill chunk) or 1 to --max-num-batched-tokens (%d)", o.sharedStep, o.stepTokens)
		}
		if _, _, err := o.nestForward(); err != nil {
			return err
		}
		return nil
	}
	switch {
	case o.chunk < 1 || o.chunk > engine.MaxChunkTokens:
		return fmt.Errorf("--prefill-chunk %d: give 1 to %d prompt tokens per sequence per step", o.chunk, engine.MaxChunkTokens)
	case o.stepTokens < 1 || o.stepTokens > engine.MaxStepTokens:
		return fmt.Errorf("--max-num-batched-tokens %d: give 1 to %d tokens per step", o.stepTokens, engine.MaxStepTokens)
	}
	return fmt.Errorf("--max-num-batched-tokens %d is smaller than --prefill-chunk %d: a chunk could never run whole; raise the budget or lower the chunk", o.stepTokens, o.chunk)
}

// registerNestCost registers the flags of the roles whose steps pause and
// whose prompts are handed off (serve, prefill): --nest-forward-cost and
// --handoff-after-prefill. A decode worker has neither, so it refuses them
// as unknown flags instead of taking and ignoring them.
func (o *roleOpts) registerNestCost(fs *flag.FlagSet) {
	fs.BoolVar(&o.afterPrefill, "handoff-after-prefill", false, "send a prompt's KV pages to decode only once the whole prompt is computed, instead of each chunk's pages while the next chunk computes (the default, which hides a long prompt's transfer under its compute); for comparisons. Not with serve --colocated (no handoff)")
	fs.StringVar(&o.nestCost, "nest-forward-cost", "auto", "the fixed cost of a forward pass in prompt tokens, for the nested budget: a prompt that arrives while another tenant's prompt step computes may run at one of the step's layer boundaries, each such nested pass counted as this many tokens plus its own, and a paused step of T tokens lets in passes costing at most this plus T (docs/isolation.md). auto: measured at start on the model and --threads (a few timed passes, logged, the metric sluice_nested_forward_cost_tokens); or 1 to --max-num-batched-tokens. Higher: fewer nested passes (the paused tenant's step lengthens less); lower: more light prompts start at once")
}

// nestForward is --nest-forward-cost: a given cost (n > 0), or measure
// ("auto"; unset for roles without the flag: neither).
func (o *roleOpts) nestForward() (n int, measure bool, err error) {
	switch o.nestCost {
	case "":
		return 0, false, nil
	case "auto":
		return 0, true, nil
	}
	n, err = strconv.Atoi(o.nestCost)
	if err != nil || n < 1 || n > o.stepTokens {
		return 0, false, fmt.Errorf("--nest-forward-cost %q: give auto (measured at start) or 1 to --max-num-batched-tokens (%d) tokens", o.nestCost, o.stepTokens)
	}
	return n, false, nil
}

// ioProcs is how many Go Ps sluice keeps above its compute threads. A
// scheduler loop computes for a whole step without blocking, so with
// GOMAXPROCS = cores and every core's P running one, the goroutines that
// move a handoff's frames and stream tokens to clients wait for the Go
// scheduler to preempt a computing one (every 10 ms) at each hop.
// Measured (sluice serve, bench-15M-q8_0, 16 in flight, 2 vCPUs, load
// ~14): prefill done to first token p50 77-125 ms at GOMAXPROCS 2,
// 18-26 ms at 6. With spare Ps those goroutines get OS threads of their
// own, which the kernel wakes promptly; compute stays on --threads.
const ioProcs = 4

// raiseProcs gives the process ioProcs Ps above compute threads, unless
// GOMAXPROCS was set in the environment (the operator's choice stands).
func raiseProcs(log *slog.Logger, compute int) {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	if want := compute + ioProcs; want > runtime.GOMAXPROCS(0) {
		runtime.GOMAXPROCS(want)
		log.Debug("GOMAXPROCS raised above the compute threads for I/O", "gomaxprocs", want, "compute_threads", compute)
	}
}

// lowerCompute puts the compute threads started from now on in
// --compute-priority's class; when the OS refuses it, compute stays
// normal and the log says why (a warning when the flag was given).
func (o *roleOpts) lowerCompute(log *slog.Logger, explicit bool) {
	if err := kernels.SetComputeClass(o.computeClass); err != nil {
		msg := "--compute-priority " + o.computeClass.String() + " not applied: compute threads run at normal priority"
		if explicit {
			log.Warn(msg, "err", err)
		} else {
			log.Info(msg, "err", err)
		}
		return
	}
	log.Info("compute threads", "priority", kernels.ComputeClass().String())
}

// computeClassFailures is sluice_compute_class_failures_total, for the
// roles that run forward passes (serve, prefill, decode): the compute
// threads (kernels.ClassFailures) left at normal priority because the OS
// refused them --compute-priority's class after the start's own try on a
// thread of its own succeeded. Above 0, the class the start line names
// is not what every compute thread runs in.
func computeClassFailures() prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_compute_class_failures_total",
		Help: "Compute threads (forward-pass workers, scheduler loops) left at normal priority because the OS refused them --compute-priority's class after the start's own try succeeded."},
		func() float64 { return float64(kernels.ClassFailures()) })
}

func (o *roleOpts) logger() (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(o.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", o.logLevel)
	}
	if o.computePrio != "" {
		c, err := kernels.ParseThreadClass(o.computePrio)
		if err != nil {
			return nil, fmt.Errorf("--compute-priority %q: use normal, yield, low or idle", o.computePrio)
		}
		o.computeClass = c
	}
	ho := &slog.HandlerOptions{Level: lvl, ReplaceAttr: durationsAsText}
	switch o.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, ho)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, ho)), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", o.logFormat)
}

// durationsAsText prints durations as "1.5s" rather than the JSON
// handler's integer nanoseconds, which nobody reads correctly.
func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// setup applies what every serving role does with its model once loaded:
// the served name, and llama.cpp's warning for an explicit --context past
// the model's training context (allowed: the pools are sized for it, but
// quality past the trained length is not the model's).
func (o *roleOpts) setup(log *slog.Logger, m *node.Model, ctx int) {
	m.SetServedName(o.servedName)
	if tc := m.Shape.TrainContext; ctx > 0 && tc > 0 && ctx > tc {
		log.Warn(fmt.Sprintf("--context %d is larger than the model's training context of %d tokens: output past %d tokens may degrade", ctx, tc, tc),
			"context", ctx, "train_context", tc)
	}
}

// logPreflight reports every role's verdict, and the refusal sentence.
// "context" is the effective context, or on a refusal (no effective
// context) the configured one the verdict speaks of: "context=0" beside
// "pool holds 1632 tokens < context 100000" read as a second fault.
func logPreflight(log *slog.Logger, rep preflight.Report) {
	ctx := rep.EffectiveContext
	if ctx == 0 {
		ctx = rep.ConfiguredContext
	}
	for _, r := range rep.Roles {
		log.Info("preflight", "role", r.Role, "weight_bytes", r.WeightBytes, "kv_bytes_per_token", r.KVBytesPerToken,
			"page_size", r.PageSize, "pages", r.Pages, "pool_tokens", r.PoolTokens, "context", ctx, "verdict", r.Verdict)
	}
	for _, n := range rep.Notes {
		log.Info(n)
	}
	for _, w := range rep.Warnings {
		log.Warn(w)
	}
	logKVBanner(log, rep)
	for _, p := range rep.Problems {
		log.Error("refusing to start: "+p, "code", preflight.Code)
	}
}

// usageFor prints a command's synopsis then its flags.
func usageFor(fs *flag.FlagSet, synopsis string) {
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), synopsis)
		fmt.Fprintln(fs.Output(), "\nFlags:")
		fs.PrintDefaults()
	}
}

type serveOpts struct {
	roleOpts
	listen string
	// host and port: --host/--port (vLLM's and llama-server's), each
	// replacing its part of --listen.
	host, port string
	apiKeys    string
	// apiKey: --api-key KEY, one key for the single tenant.
	apiKey    string
	transport string
	encrypt   bool
	colocated bool
	prefix    string
	sharedPre string
	maxBody   string
	drain     time.Duration
	tenantMax int
	maxQueue  int
	queueWait time.Duration
	// metricsListen and metricsTenantLabels: see registerHTTP and admin.go.
	metricsListen       string
	metricsTenantLabels bool
	// loadEvery is the load line's interval (0: none).
	loadEvery time.Duration
	tls       tlsOpts
	// chatTemplate: --chat-template, a file or an inline template in place
	// of the model's; chatSource and chatFrom: its text and where it came
	// from (readChatTemplate).
	chatTemplate, chatSource, chatFrom string
	// reasoningFormat: --reasoning-format (router.ReasoningAuto/None).
	reasoningFormat string

	// prefillWorkers, decodeWorkers: serve's in-process cluster.
	prefillWorkers, decodeWorkers int
}

// routerSlots is what the HTTP layer admits at once: the engine's running
// requests plus its queue (the engine refuses beyond that with 429).
func (o *serveOpts) routerSlots() int { return o.maxConc + o.maxQueue }

func (o *serveOpts) registerHTTP(fs *flag.FlagSet) {
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "HTTP address of the OpenAI-compatible API")
	fs.StringVar(&o.host, "host", "", "host name or IP address the API listens on (vLLM's and llama-server's flag): replaces the host of --listen")
	fs.StringVar(&o.port, "port", "", "TCP port the API listens on (vLLM's and llama-server's flag): replaces the port of --listen")
	fs.StringVar(&o.apiKey, "api-key", "", "one API `key` every request must send (Authorization: Bearer KEY), all of them the single tenant \""+router.SingleTenant+"\" (vLLM's and llama-server's flag; like --api-keys it moves /metrics off --listen). A key on the command line shows in the process list: --api-keys FILE keeps it in a file")
	fs.StringVar(&o.apiKeys, "api-keys", "", "file of \""+router.KeyLineFormat+"\" lines (# comments, several keys per tenant; weight: the tenant's share of the fair queue, default 1; rpm, tpm: the tenant's requests and tokens (prompt + generated) per minute, beyond which 429 rate_limited); without it the server is single-tenant and needs no key")
	fs.StringVar(&o.maxBody, "max-body", "1MiB", "largest request body; larger gets 413")
	fs.DurationVar(&o.drain, "drain-timeout", 30*time.Second, "on SIGTERM/SIGINT, how long in-flight requests may finish while /ready answers 503 and new requests 503 draining; what still runs then is cut (a stream ends with a drain_timeout error event and [DONE]) and the process exits 1")
	fs.IntVar(&o.maxQueue, "max-queue", 256, "requests that may wait for their turn and for KV pages (per-tenant fair queue); beyond it 429 with Retry-After")
	fs.DurationVar(&o.queueWait, "queue-timeout", 30*time.Second, "how long a request may wait in the queue; then 503 queue_timeout")
	fs.StringVar(&o.metricsListen, "metrics-listen", "", "address of the admin listener serving /metrics, /health and /ready apart from the API. Default: with --api-keys "+defaultAdminListen+" (metrics are then never on --listen, which every tenant reaches); without --api-keys /metrics stays on --listen")
	fs.BoolVar(&o.metricsTenantLabels, "metrics-tenant-labels", false, "label the token counters with tenant names (off by default: a scraper then learns every tenant's name and usage; turn on only for a trusted scraper)")
	fs.DurationVar(&o.loadEvery, "load-log-interval", 10*time.Second, "how often the load line is logged (requests running and waiting; in sluice serve also preempted sequences, KV usage and generation throughput); 0 turns it off")
	o.tls.register(fs)
	fs.StringVar(&o.chatTemplate, "chat-template", "", "Jinja chat template for /v1/chat/completions and /tokenize in place of the model file's (vLLM's flag): a file, or the template itself; for a model without one, or one this server cannot render")
	cli.Alias(fs, "chat-template-file", "chat-template") // llama-server's spelling
	fs.StringVar(&o.reasoningFormat, "reasoning-format", router.ReasoningAuto, "a thinking model's reasoning (Qwen3's <think>...</think>) in chat answers: auto puts it in message.reasoning_content (streamed: delta.reasoning_content) apart from content, reads tool calls from the answer only and applies response_format and tool_choice required or named to the answer after </think> (llama-server's deepseek, vLLM's --reasoning-parser qwen3); none leaves it in content as the model wrote it, constrained from the first token")
	fs.IntVar(&o.tenantMax, "tenant-max-concurrency", 0, "requests one tenant may have in flight (0: only --max-concurrency applies); more get 429, so one busy tenant cannot take every slot")
}

// resolveHTTP folds --host and --port into --listen, refuses --api-key
// with --api-keys (two answers to who the tenants are) and reads
// --chat-template (before the model loads: a wrong path fails at once).
func (o *serveOpts) resolveHTTP() error {
	if o.apiKey != "" && o.apiKeys != "" {
		return errors.New("--api-key and --api-keys both given: use --api-key KEY for one tenant, or --api-keys FILE for several")
	}
	if err := o.readChatTemplate(); err != nil {
		return err
	}
	if o.reasoningFormat == "deepseek" || o.reasoningFormat == "" {
		o.reasoningFormat = router.ReasoningAuto // llama-server's name for the same split; "" the default
	}
	if o.reasoningFormat != router.ReasoningAuto && o.reasoningFormat != router.ReasoningNone {
		return fmt.Errorf("--reasoning-format %q: use %s (split a thinking model's reasoning into reasoning_content) or %s (leave it in content)", o.reasoningFormat, router.ReasoningAuto, router.ReasoningNone)
	}
	if o.host == "" && o.port == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(o.listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %v", o.listen, err)
	}
	if o.host != "" {
		host = o.host
	}
	if o.port != "" {
		if n, err := strconv.Atoi(o.port); err != nil || n < 0 || n > 65535 {
			return fmt.Errorf("--port %q: give a TCP port, 0 to 65535", o.port)
		}
		port = o.port
	}
	o.listen = net.JoinHostPort(host, port)
	return nil
}

// keys is the API key table: --api-key's one key, --api-keys' file, or
// nil (single tenant, no key checked).
func (o *serveOpts) keys(log *slog.Logger) (*router.Keys, error) {
	if o.apiKey == "" {
		return loadKeysFlag(o.apiKeys, log)
	}
	k, err := router.SingleKey(o.apiKey)
	if err != nil {
		return nil, fmt.Errorf("--api-key: %w", err)
	}
	log.Info("single-tenant mode with an API key (--api-key): every request must send it, as tenant \"" + router.SingleTenant + "\"")
	return k, nil
}

func runServe(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var o serveOpts
	o.register(fs, true)
	o.registerNestCost(fs)
	o.registerHTTP(fs)
	fs.BoolVar(&o.encrypt, "encrypt", false, "encrypt the frames between the in-process prefill and decode roles (--transport tcp or shm's control) as between hosts (AES-256-GCM, I15): to measure what encryption costs; loopback stays unencrypted without it")
	fs.StringVar(&o.transport, "transport", node.TransportTCP, "prefill->decode transport: tcp (authenticated loopback TCP), shm (one-sided writes into the decode pool's shared memory, control over TCP) or inproc (direct calls, copied)")
	fs.BoolVar(&o.colocated, "colocated", false, "run prefill and decode in one scheduler without a handoff (the reference path)")
	fs.IntVar(&o.prefillWorkers, "prefill-workers", 1, "prefill workers in this process (above 1, or with --decode-workers above 1: a cluster behind the router, each link its own authenticated TCP connection)")
	fs.IntVar(&o.decodeWorkers, "decode-workers", 1, "decode workers in this process, each with its own KV pool of --kv-memory")
	fs.StringVar(&o.prefix, "prefix-cache", "on", "on or off: reuse the full prompt pages of earlier requests of the SAME tenant (keys salted with an HMAC of the authenticated tenant; never shared across tenants). The colocated engine and the prefill worker use it")
	fs.StringVar(&o.sharedPre, "shared-prefix-file", "", sharedPrefixFlag)
	usageFor(fs, `Usage: sluice serve [MODEL] [flags]

Runs the router, a prefill worker and a decode worker in one process. The
roles stay disaggregated over a real transport (loopback TCP by default),
so one command shows the whole system. Every role runs the preflight check
at start and refuses a context larger than its KV pool (I2).

Example:
  sluice serve                                   # built-in model on 127.0.0.1:8080
  sluice serve model.gguf --port 8000            # MODEL is --model (vLLM's form)
  sluice serve --model stories260K.gguf --context 512 --kv-memory 64MiB
  curl -s localhost:8080/v1/completions -d '{"prompt":"Once upon a time","max_tokens":32}'
`)
	if code, ok := parseModelArg(fs, args); !ok {
		return code
	}
	if err := o.resolveHTTP(); err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		return 2
	}
	log, err := o.logger()
	if err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		return 2
	}
	logStart(log, "serve")
	sigs := catchSignals(log)
	defer sigs.stop()
	pools, err := o.pools()
	if err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		return 2
	}
	mem, err := o.memory()
	if err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		return 2
	}
	maxBody, err := preflight.ParseBytes(o.maxBody)
	if err != nil || maxBody <= 0 {
		fmt.Fprintln(os.Stderr, "serve: --max-body must be a positive byte size")
		return 2
	}
	if o.prefix != "on" && o.prefix != "off" {
		fmt.Fprintf(os.Stderr, "serve: --prefix-cache must be on or off, not %q\n", o.prefix)
		return 2
	}
	if o.colocated && o.afterPrefill {
		fmt.Fprintln(os.Stderr, "serve: --handoff-after-prefill changes how prefill hands a prompt to decode; --colocated has no handoff: drop one of them")
		return 2
	}
	front, ok := o.bindFront(log, sigs)
	if !ok {
		return 1
	}
	defer front.close()
	keys, adminAddr, apiTLS, adminTLS, early := front.keys, front.adminAddr, front.apiTLS, front.adminTLS, front.early

	m, err := loadModel(log, o.model, o.hf, mem)
	if err != nil {
		log.Error("cannot load the model", "err", err)
		return 1
	}
	defer m.Close()
	sigs.loaded()
	if m.BuiltIn {
		log.Info("no --model given: serving the built-in default model (synthetic random weights: its text is gibberish, but deterministic)", "model", m.Name)
	} else {
		log.Info("model loaded", "model", m.Name, "path", m.Path, "weights", m.Placement.String())
	}
	o.setup(log, m, pools.Context)
	mode := o.transport
	if o.colocated {
		mode = "colocated"
		if !flagSet(fs, "threads") {
			o.threads = roleThreads(availableCPUs(), false)
		}
	}
	compute := o.threads
	if !o.colocated {
		// The roles compute at once; one borrows the other's threads
		// (ShareThreads) only while the other is idle.
		compute = o.threads * (max(o.prefillWorkers, 1) + max(o.decodeWorkers, 1))
	}
	raiseProcs(log, compute)
	o.lowerCompute(log, flagSet(fs, "compute-priority"))
	if o.prefix == "on" {
		log.Info("prefix cache on: full prompt pages are reused within a tenant only (salt = HMAC(process secret, tenant)); prompt_cache_key/cache_salt narrow it")
	}
	var public []int32
	if o.sharedPre != "" {
		if o.prefix != "on" {
			log.Error("--shared-prefix-file needs --prefix-cache on")
			return 2
		}
		if public, err = loadSharedPrefix(o.sharedPre, m, pools.PageSize, pools.Context, log); err != nil {
			log.Error(err.Error())
			return 1
		}
	}
	nPools := 1
	if !o.colocated {
		nPools = max(o.prefillWorkers, 1) + max(o.decodeWorkers, 1)
	}
	pools = o.sizeAutoKV(log, m, pools, nPools)
	if pools.Auto != nil && !o.colocated && o.transport == node.TransportSHM {
		// The decode pool is a sparse file in /dev/shm: auto must not
		// size it past the space there (a write past it is a SIGBUS).
		if b, lowered := capForShm(pools.KVMemory, shmRoom()); lowered {
			log.Warn("--kv-memory auto: lowered each pool to half the space free for the shm transport's pool file", "kv_memory_per_pool", b, "was", pools.KVMemory)
			pools.KVMemory = b
		}
	}
	nestGiven, nestMeasure, _ := o.nestForward() // checked with the flags
	st, err := node.BuildLocal(m, node.LocalConfig{Pools: pools, Colocated: o.colocated, Transport: o.transport, Encrypt: o.encrypt,
		Threads: o.threads, MaxConcurrency: o.maxConc, MaxQueue: o.maxQueue, QueueTimeout: o.queueWait, Logger: log,
		ChunkTokens: o.chunk, StepTokens: o.stepTokens, SharedStepTokens: o.sharedStep, ShareThreads: true, HandoffAfterPrefill: o.afterPrefill,
		NestForward: nestGiven, MeasureNestForward: nestMeasure,
		PrefixCache: o.prefix == "on", PublicPrefix: public, PrefillWorkers: o.prefillWorkers, DecodeWorkers: o.decodeWorkers,
		GuardFile: sigs.guardFile, // a signal during start-up removes the shm pool file
		// The cache's per-tenant shares follow the key file's weights.
		Engine: func(_ string, ec *engine.Config) { ec.CacheWeight = keys.Weight }})
	if pe, ok := node.IsPreflight(err); ok {
		logPreflight(log, pe.Report)
		return 1
	}
	if err != nil {
		log.Error("cannot start the roles", "err", err)
		return 1
	}
	logPreflight(log, st.Report)
	ct, err := o.loadChatTemplate(log, m)
	if err != nil {
		log.Error(err.Error())
		st.Close(context.Background())
		return 1
	}
	checkChatTemplate(log, ct)
	reg := prometheus.NewRegistry()
	reg.MustRegister(computeClassFailures())
	srv, err := router.New(router.Config{Engine: st.Engine, Tokenizer: m.Tokenizer(), Chat: ct, BOSText: m.BOSText(), ReasoningFormat: o.reasoningFormat,
		Keys: keys, MaxBodyBytes: maxBody, MaxConcurrency: o.routerSlots(), TenantConcurrency: o.tenantMax, Stats: st.Stats, Info: st.Info, Ready: st.Ready, Logger: log,
		MetricsOffAPI: adminAddr != "", MetricsTenantLabels: o.metricsTenantLabels, Registry: reg})
	if err != nil {
		log.Error("router", "err", err)
		st.Close(context.Background())
		return 1
	}
	logThinking(log, srv)
	defer early.readyAdmin(log, srv.AdminHandler(), adminTLS)()
	log.Info("roles started", "mode", mode, "context", st.Engine.Info().Context)
	loadCtx, stopLoad := context.WithCancel(context.Background())
	if o.loadEvery > 0 {
		go st.LogLoad(loadCtx, log, o.loadEvery) // running, waiting, KV usage, throughput
	}
	return serveHTTP(log, sigs, early, apiTLS, srv, o.drain, func(ctx context.Context) error { stopLoad(); return st.Close(ctx) })
}

// logThinking says at start when chat answers are split into reasoning
// and answer (a thinking model, --reasoning-format auto), or when a
// thinking model's reasoning stays in content (none).
func logThinking(log *slog.Logger, srv *router.Server) {
	if srv.Thinking() {
		log.Info("the model thinks (<think> and </think> tokens, a template that writes them): chat answers carry its reasoning in reasoning_content, and response_format and required tools apply to the answer after </think>; --reasoning-format none turns this off")
	} else if srv.ModelThinks() {
		log.Info("the model thinks (<think> and </think> tokens, a template that writes them); --reasoning-format none leaves its reasoning in content, as the model writes it, and response_format and required tools constrain it from the first token")
	}
}

// flagSet reports whether name was given on the command line, under
// its name or an alias (cli.IsSet).
func flagSet(fs *flag.FlagSet, name string) bool { return cli.IsSet(fs, name) }

// checkChatTemplate renders a one-message conversation at start so that a
// template this Jinja implementation cannot run shows up in the log, not
// only in the first chat request's 500.
func checkChatTemplate(log *slog.Logger, ct *router.ChatTemplate) {
	if ct.IsFallback() {
		log.Info("the model has no chat template: /v1/chat/completions uses the plain \"User:/Assistant:\" fallback")
		return
	}
	if _, err := ct.Render([]router.ChatMessage{{Role: "user", Content: "ping"}}); err != nil {
		log.Warn("the model's chat template does not render a one-message conversation; /v1/chat/completions may fail", "err", err)
	}
}

func loadKeysFlag(path string, log *slog.Logger) (*router.Keys, error) {
	if path == "" {
		log.Warn("no --api-keys file: single-tenant mode, every request is tenant \"" + router.SingleTenant + "\" and no API key is checked")
		return nil, nil
	}
	keys, err := router.LoadKeys(path)
	if err != nil {
		return nil, err
	}
	// Every tenant's key is in this file: one that other users of the host
	// can read gives them every tenant. A warning, not a refusal (as the
	// roles' --secret-file is): a key file that worked must keep working.
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
		log.Warn(fmt.Sprintf("--api-keys %s is readable by other users of this host (mode %v): anyone of them can read every tenant's key; chmod 600 it", path, st.Mode().Perm()))
	}
	log.Info("multi-tenant mode", "api_keys", path, "tenants", keys.Tenants())
	return keys, nil
}

// serveHTTP serves the API until SIGTERM/SIGINT (sigs), then drains: new
// requests get 503, in-flight ones finish (up to drain), then the roles
// stop. The listener was bound early (bindEarly); from here it serves srv.
func serveHTTP(log *slog.Logger, sigs *roleSignals, early *earlyServer, tlsSrv *tlsload.Server, srv *router.Server, drain time.Duration, closeRoles func(context.Context) error) int {
	hs, errc := early.apiHS, early.apiErr
	sigs.serving()
	ctx := sigs.Drain
	early.api.set(srv.Handler())
	log.Info("listening", "addr", tlsload.Scheme(tlsSrv)+"://"+early.apiL.Addr().String(), "endpoints", strings.Join(srv.Endpoints(), " "))
	code := 0
	// A second SIGINT/SIGTERM during the drain cuts what still runs at
	// once, as llama-server's second Ctrl-C does: before, it was swallowed
	// and an operator at a terminal waited out --drain-timeout (30 s).
	again := make(chan os.Signal, 1)
	select {
	case <-ctx.Done():
		signal.Notify(again, syscall.SIGINT, syscall.SIGTERM)
		defer signal.Stop(again)
		log.Info("shutting down: draining in-flight requests (a second signal cuts them at once)", "timeout", drain)
	case err := <-errc:
		log.Error("HTTP server failed", "err", err)
		code = 1
	}
	// The listener stays open while requests finish: /ready answers 503
	// (the load balancer takes the instance out), a new generation request
	// 503 draining, a probe gets an answer rather than a refused
	// connection. What still runs at the drain timeout is cut, each with
	// an error the client can act on, and the exit code says so.
	srv.Drain()
	now := waitIdle(srv, time.Now().Add(drain), again)
	if n := srv.InFlight(); n > 0 && now {
		log.Warn("second signal: cutting the requests still running now", "sequences", n)
	} else if n > 0 {
		log.Warn("drain timeout reached: cutting the requests still running", "sequences", n, "timeout", drain)
	}
	if n := srv.InFlight(); n > 0 {
		srv.CutStreams()
		waitIdle(srv, time.Now().Add(cutGrace), nil)
	}
	sctx, cancel := context.WithTimeout(context.Background(), cutGrace)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		log.Warn("connections still open after the drain; closing them", "err", err)
		hs.Close()
	}
	if cut := srv.DrainCuts(); cut > 0 {
		log.Error("requests were cut by the drain timeout", "cut", cut, "timeout", drain)
		code = 1
	}
	if err := closeRoles(sctx); err != nil {
		log.Error("roles did not drain cleanly", "err", err)
		code = 1
	}
	log.Info("stopped", "exit_code", code)
	return code
}

// cutGrace bounds each step after the drain timeout: the cut requests'
// ends (a cancelled request ends within a decode step once its handoff
// committed), closing connections, stopping the roles.
const cutGrace = 10 * time.Second

// waitIdle returns once srv has no generation request in flight, at
// deadline, or when a signal arrives on stop (then true).
func waitIdle(srv *router.Server, deadline time.Time, stop <-chan os.Signal) bool {
	for srv.InFlight() > 0 && time.Now().Before(deadline) {
		select {
		case <-stop:
			return true
		case <-time.After(20 * time.Millisecond):
		}
	}
	return false
}

// readChatTemplate reads --chat-template: a file when one exists at that
// path, else the template itself when it reads as Jinja ({{ or {%);
// anything else is a path that does not exist, refused with the flag's
// name, never served with the model's template in its place. The file is
// read bounded (router.MaxTemplateBytes) and only when it is a regular
// file: /dev/zero grew start-up's memory without end, and a FIFO blocked
// the open until some other process wrote to it.
func (o *serveOpts) readChatTemplate() error {
	if o.chatTemplate == "" {
		return nil
	}
	o.chatSource, o.chatFrom = o.chatTemplate, "the inline template"
	if st, err := os.Stat(o.chatTemplate); err == nil {
		b, err := readTemplateFile(o.chatTemplate, st)
		if err != nil {
			return fmt.Errorf("--chat-template %q: %v", o.chatTemplate, err)
		}
		o.chatSource, o.chatFrom = string(b), o.chatTemplate
	} else if !strings.Contains(o.chatTemplate, "{{") && !strings.Contains(o.chatTemplate, "{%") {
		return fmt.Errorf("--chat-template %q: %v (give a Jinja template file, or the template itself)", o.chatTemplate, err)
	} else if len(o.chatSource) > router.MaxTemplateBytes {
		return fmt.Errorf("--chat-template: the inline template is %d bytes, more than the %d (1 MiB) a chat template may hold", len(o.chatSource), router.MaxTemplateBytes)
	}
	if strings.TrimSpace(o.chatSource) == "" {
		return fmt.Errorf("--chat-template %q is empty", o.chatTemplate)
	}
	return nil
}

// notRegular says what a template path that is not a regular file is.
func notRegular(m os.FileMode) error {
	kind := "not a regular file"
	switch {
	case m.IsDir():
		kind = "a directory"
	case m&os.ModeNamedPipe != 0:
		kind = "a named pipe (FIFO)"
	case m&os.ModeDevice != 0:
		kind = "a device"
	case m&os.ModeSocket != 0:
		kind = "a socket"
	}
	return fmt.Errorf("is %s, not a template file; give a regular Jinja file of at most 1 MiB", kind)
}

// readTemplateFile reads a template file st describes: a regular file of
// at most router.MaxTemplateBytes (a real template is a few KiB).
func readTemplateFile(path string, st os.FileInfo) ([]byte, error) {
	if !st.Mode().IsRegular() {
		return nil, notRegular(st.Mode())
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// The size again from the open file (the path may have changed since
	// the Stat), and the read bounded whatever the size says.
	if st, err = f.Stat(); err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, notRegular(st.Mode())
	}
	b, err := io.ReadAll(io.LimitReader(f, router.MaxTemplateBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > router.MaxTemplateBytes || st.Size() > router.MaxTemplateBytes {
		return nil, fmt.Errorf("is %d bytes, more than the %d (1 MiB) a chat template may hold", max(st.Size(), int64(len(b))), router.MaxTemplateBytes)
	}
	return b, nil
}

// loadChatTemplate is --chat-template's template (readChatTemplate), or
// the model's own.
func (o *serveOpts) loadChatTemplate(log *slog.Logger, m *node.Model) (*router.ChatTemplate, error) {
	if o.chatSource == "" {
		ct, err := m.ChatTemplate()
		if err != nil {
			return nil, fmt.Errorf("the model's chat template cannot be used (give one with --chat-template FILE): %v", err)
		}
		return ct, nil
	}
	ct, err := m.ChatTemplateFrom(o.chatSource)
	if err != nil {
		return nil, fmt.Errorf("--chat-template: %s does not parse: %v", o.chatFrom, err)
	}
	log.Info("chat template from --chat-template, in place of the model's", "template", o.chatFrom)
	return ct, nil
}
