package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sluice/internal/engine"
	"sluice/internal/gguf"
	"sluice/internal/handoff"
	"sluice/internal/handoff/tcp"
	"sluice/internal/preflight"
	"sluice/internal/router"
	"sluice/internal/router/node"
)

func init() {
	register(command{
		name:    "router",
		summary: "run the router: the OpenAI-compatible HTTP API in front of prefill and decode workers",
		run:     runRouter,
	})
}

func runRouter(args []string) int {
	fs := flag.NewFlagSet("router", flag.ContinueOnError)
	var (
		o              serveOpts
		prefillAddr    string
		decodeAddr     string
		secretFile     string
		frameMAC       bool
		peerTimeout    time.Duration
		maxMigrations  int
		maxRetries     int
		connectTimeout time.Duration
		weights        = node.DefaultWeights
		probe          time.Duration
		resolveEvery   time.Duration
		workersFile    string
	)
	o.register(fs, false)
	o.registerHTTP(fs)
	fs.StringVar(&prefillAddr, "prefill", "127.0.0.1:9001", "addresses of the prefill workers, comma-separated")
	fs.StringVar(&decodeAddr, "decode", "127.0.0.1:9002", "addresses of the decode workers, comma-separated; every prefill worker's --decode must list the same strings (they name the decode worker a prefill worker pushes to)")
	fs.Float64Var(&weights.DecodeFreePages, "score-decode-free-pages", weights.DecodeFreePages, "weight of the decode scorer for free KV pages (least KV pressure, from each worker's load report)")
	fs.Float64Var(&weights.DecodeQueue, "score-decode-queue", weights.DecodeQueue, "weight of the decode scorer for fewest requests this router has in flight on the worker")
	fs.Float64Var(&weights.PrefillQueue, "score-prefill-queue", weights.PrefillQueue, "weight of the prefill scorer for fewest requests this router has in flight on the worker")
	fs.Float64Var(&weights.PrefixAffinity, "score-prefix-affinity", weights.PrefixAffinity, "weight of the prefill and decode scorer for the worker this router last sent the same tenant's prompt prefix to (its prefix cache likely holds those pages: decode skips their transfer, prefill their compute); remembered per tenant, never across tenants; 0 turns it off")
	fs.StringVar(&workersFile, "workers-file", "", "file of \"prefill HOST:PORT\" and \"decode HOST:PORT\" lines (# comments) in place of --prefill and --decode; read again on SIGHUP: new workers join, removed ones get no new request and their requests in flight finish. A file that does not parse changes nothing (logged)")
	fs.DurationVar(&resolveEvery, "resolve-interval", 10*time.Second, "how often worker names (e.g. a Kubernetes headless Service, one A record per pod) are resolved again: new addresses join, vanished ones get no new request; 0 resolves only at start")
	fs.DurationVar(&probe, "probe-interval", time.Second, "how often every worker is probed (health and load report); a worker that stops answering is marked down within about this long")
	fs.StringVar(&secretFile, "secret-file", "", "file (mode 600) holding the roles' shared secret; without it $"+node.SecretEnv+" is used. Never given on the command line (I12)")
	fs.BoolVar(&frameMAC, "encrypt", false, "encrypt every frame between roles (AES-256-GCM under keys from an ephemeral X25519 exchange; I15); always on when listening on or dialling an address that is not loopback, so this turns it on for loopback too")
	fs.BoolVar(&frameMAC, "frame-mac", false, "the same as --encrypt (its former name: every frame is now encrypted, which also authenticates it)")
	fs.IntVar(&maxMigrations, "max-migrations", 3, "how many times one streaming request may move to another prefill/decode pair after its decode worker (or the link to it) fails mid-stream: the new pair resumes from the prompt and the tokens already sent, bit for bit the same stream. 0: never (the stream ends with an error)")
	fs.IntVar(&maxRetries, "max-retries", engine.DefaultMaxRetries, "how many times one request may move to another prefill/decode pair after an attempt failed before any token reached the client (a decode worker that is draining, left or died between the pick and the reserve; a prefill worker that could not push); each retry avoids every worker that already failed it. Failures the request caused (4xx) are never retried. 0: never (the first failure stands)")
	fs.DurationVar(&peerTimeout, "peer-timeout", tcp.DefaultDeadAfter, "how long a peer (worker or router) may send nothing, not even a heartbeat, before it is declared dead and its connection closed: its requests fail over or end with an error. Both sides ping every eighth of it when idle; a slow or CPU-starved peer keeps sending and stays up. 0: no heartbeat (a peer whose process hangs then holds its calls until it resumes, though a prompt the router gives up still ends within 20 s: the connection is closed if the worker does not acknowledge it within 10 s; a peer cut off by the network or whose host froze is noticed by TCP within 20 s either way)")
	fs.DurationVar(&connectTimeout, "connect-timeout", 30*time.Second, "how long to keep trying to reach the workers at start")
	usageFor(fs, `Usage: sluice router [MODEL] [flags]

Runs the router as its own process: authenticates API keys into tenants,
tokenizes (the tokenizer and chat template come from --model, which must be
the workers' model), checks each request against the context (I2),
reserves on decode, prefills on prefill and streams tokens back.

--context is what the router advertises and admits. At start the router
asks the decode worker, through its ordinary admission path, to admit a
request of that length: an explicit --context that decode would refuse
makes the router refuse to start; "auto" starts from the model's training
context and lowers it to the most decode admits, and logs that (I2). Each
prefill worker reports its context in its load report and is vetted the
same way (refused, or with auto the context lowered to it): the effective
context is the smallest over every role. A worker that joins later is
vetted before its first request and refused if it does not admit it.

Example:
  SLUICE_SECRET=$(cat secret) sluice router --model m.gguf --context 512 --prefill 127.0.0.1:9001 --decode 127.0.0.1:9002
`)
	if code, ok := parseModelArg(fs, args); !ok {
		return code
	}
	if err := o.resolveHTTP(); err != nil {
		fmt.Fprintln(os.Stderr, "router:", err)
		return 2
	}
	log, err := o.logger()
	if err != nil {
		fmt.Fprintln(os.Stderr, "router:", err)
		return 2
	}
	log = log.With("process", "router")
	logStart(log, "router")
	sigs := catchSignals(log)
	defer sigs.stop()
	maxBody, err := preflight.ParseBytes(o.maxBody)
	if err != nil || maxBody <= 0 {
		fmt.Fprintln(os.Stderr, "router: --max-body must be a positive byte size")
		return 2
	}
	secret, err := node.LoadSecret(secretFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "router:", err)
		return 1
	}
	// Bound before the model loads and the workers are dialled (as sluice
	// serve).
	front, ok := o.bindFront(log, sigs)
	if !ok {
		return 1
	}
	defer front.close()
	keys, adminAddr, apiTLS, adminTLS, early := front.keys, front.adminAddr, front.apiTLS, front.adminTLS, front.early
	m, err := loadModel(log, o.model, o.hf, gguf.MemoryMap) // the router computes nothing with the weights
	if err != nil {
		log.Error("cannot load the model", "err", err)
		return 1
	}
	defer m.Close()
	sigs.loaded()
	ctxLen := m.Shape.TrainContext
	if o.context != "auto" && o.context != "" {
		n, err := strconv.Atoi(o.context)
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "router: --context %q is neither a positive token count nor \"auto\"\n", o.context)
			return 2
		}
		ctxLen = n
	}
	if ctxLen <= 0 {
		log.Error("the model does not state its context; give --context N")
		return 1
	}
	if o.context != "auto" && o.context != "" {
		o.setup(log, m, ctxLen)
	} else {
		o.setup(log, m, 0)
	}

	log.Info("model loaded", "model", m.Describe(), "fingerprint", m.Fingerprint().String())
	// I13: the handshake with each worker compares model fingerprints, so
	// a router never tokenizes for a model its workers do not run.
	tc := tcp.Config{Secret: secret, Encrypt: frameMAC, DeadAfter: deadAfter(peerTimeout), Model: m.Fingerprint()}
	prefillSpecs, decodeSpecs := splitList(prefillAddr), splitList(decodeAddr)
	if workersFile != "" {
		if flagSet(fs, "prefill") || flagSet(fs, "decode") {
			fmt.Fprintln(os.Stderr, "router: give the workers either in --workers-file or with --prefill and --decode, not both")
			return 2
		}
		wl, err := node.ReadWorkers(workersFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "router:", err)
			return 2
		}
		prefillSpecs, decodeSpecs = wl.Prefill, wl.Decode
	}
	if len(prefillSpecs) == 0 || len(decodeSpecs) == 0 {
		fmt.Fprintln(os.Stderr, "router: --prefill and --decode (or the --workers-file) each need at least one address")
		return 2
	}
	cctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	// Names resolve to one worker per address; the workers are named by
	// address, as the prefill workers name them (same specs, same DNS).
	prefillAddrs, perr := resolveUntil(cctx, prefillSpecs)
	decodeAddrs, derr := resolveUntil(cctx, decodeSpecs)
	if perr != nil || derr != nil {
		log.Error("cannot resolve the workers' addresses", "prefill", prefillSpecs, "decode", decodeSpecs, "err", errors.Join(perr, derr))
		return 1
	}
	decodes, code := connectAll(cctx, log, "decode", decodeAddrs, tc)
	if code != 0 {
		return code
	}
	auto := o.context == "auto" || o.context == ""
	modelCtx := ctxLen
	// I2: every reachable decode worker must admit the router's context;
	// with auto the context is lowered to what the smallest admits. One
	// not reachable yet is vetted by the cluster once it answers (so is
	// one that joins later), and refused if it does not admit it.
	checked := make([]bool, len(decodes))
	for i, dc := range decodes {
		if dc.Check(cctx) != nil {
			continue
		}
		checked[i] = true
		if err := node.ProbeDecodeContext(cctx, dc, ctxLen, m.Fingerprint()); err != nil && auto {
			lo, hi := 1, ctxLen-1
			for lo < hi {
				mid := (lo + hi + 1) / 2
				if node.ProbeDecodeContext(cctx, dc, mid, m.Fingerprint()) == nil {
					lo = mid
				} else {
					hi = mid - 1
				}
			}
			log.Info(fmt.Sprintf("--context auto: lowered the context from the model's %d to %d tokens, the most the decode worker %s admits (I2)", modelCtx, lo, decodeAddrs[i]))
			ctxLen = lo
		} else if err != nil {
			log.Error(fmt.Sprintf("refusing to start: the decode worker at %s does not admit a request of the router's context %d tokens (%v); start decode with a pool that holds it, or lower the router's --context", decodeAddrs[i], ctxLen, err),
				"code", preflight.Code)
			return 1
		}
	}
	prefills, code := connectAll(cctx, log, "prefill", prefillAddrs, tc)
	if code != 0 {
		return code
	}
	// I2 on the prefill role too: every reachable prefill worker's context
	// (from its load report) must hold the router's; with auto the
	// context is lowered to the smallest. One not reachable yet, or one
	// that joins later, is vetted by the cluster before its first request.
	pchecked := make([]bool, len(prefills))
	for i, pc := range prefills {
		if pc.Check(cctx) != nil {
			continue
		}
		n, err := node.PrefillContext(cctx, node.LoadOf(pc))
		if err != nil {
			continue
		}
		pchecked[i] = true
		if n <= 0 || n >= ctxLen {
			continue
		}
		if !auto {
			log.Error(fmt.Sprintf("refusing to start: the prefill worker at %s admits a context of %d tokens, below the router's %d; start prefill with --context (and a pool) that holds it, or lower the router's --context", prefillAddrs[i], n, ctxLen),
				"code", preflight.Code)
			return 1
		}
		log.Info(fmt.Sprintf("--context auto: lowered the context from %d to %d tokens, the most the prefill worker %s admits (I2)", ctxLen, n, prefillAddrs[i]))
		ctxLen = n
	}
	var pw, dw []node.Worker
	pvet := func(l func(context.Context) (*handoff.Load, error)) func(context.Context) error {
		return func(ctx context.Context) error { return node.ProbePrefillContext(ctx, l, ctxLen) }
	}
	for i, pc := range prefills {
		w := node.Worker{Name: prefillAddrs[i], Prefill: pc, Conn: pc, Load: node.LoadOf(pc)}
		if !pchecked[i] {
			w.Vet = pvet(w.Load)
		}
		pw = append(pw, w)
	}
	vet := func(d handoff.Decode) func(context.Context) error {
		return func(ctx context.Context) error { return node.ProbeDecodeContext(ctx, d, ctxLen, m.Fingerprint()) }
	}
	for i, dc := range decodes {
		w := node.Worker{Name: decodeAddrs[i], Decode: dc, Conn: dc, Load: node.LoadOf(dc)}
		if !checked[i] {
			w.Vet = vet(dc)
		}
		dw = append(dw, w)
	}
	cl, err := node.NewCluster(pw, dw, weights, log)
	if err != nil {
		log.Error("cluster", "err", err)
		return 1
	}
	cl.Start(probe)
	defer cl.Close()
	if resolveEvery > 0 || workersFile != "" {
		dctx, stopDiscovery := context.WithCancel(context.Background())
		defer stopDiscovery()
		pd := &node.Discovery{Specs: prefillSpecs, Resolver: node.DNS{}, Log: log, Remove: func(a string) { cl.Remove("prefill", a) }, Add: func(a string) {
			r := tcp.NewRedialer(a, tc)
			cl.Add("prefill", node.Worker{Name: a, Prefill: r, Conn: r, Load: node.LoadOf(r), Close: func() { r.Close() }, Vet: pvet(node.LoadOf(r))})
		}}
		dd := &node.Discovery{Specs: decodeSpecs, Resolver: node.DNS{}, Log: log, Remove: func(a string) { cl.Remove("decode", a) }, Add: func(a string) {
			r := tcp.NewRedialer(a, tc)
			cl.Add("decode", node.Worker{Name: a, Decode: r, Conn: r, Load: node.LoadOf(r), Close: func() { r.Close() }, Vet: vet(r)})
		}}
		for _, d := range []*node.Discovery{pd, dd} {
			d.Sync(dctx)
			if resolveEvery > 0 {
				go d.Run(dctx, resolveEvery)
			}
		}
		if workersFile != "" {
			reloadOnHUP(dctx, log, sigs, workersFile, pd, dd)
		}
	}
	eng, err := engine.NewDisaggregatedPairs(engine.DisaggConfig{Model: m.Name, Vocab: m.Runtime.Vocab(), Fingerprint: m.Fingerprint(), Context: ctxLen,
		MaxConcurrency: o.maxConc, MaxQueue: o.maxQueue, QueueTimeout: o.queueWait, MaxMigrations: migrationsFlag(maxMigrations), MaxRetries: migrationsFlag(maxRetries)}, cl)
	if err != nil {
		log.Error("engine", "err", err)
		return 1
	}
	ct, err := o.loadChatTemplate(log, m)
	if err != nil {
		log.Error(err.Error())
		return 1
	}
	checkChatTemplate(log, ct)
	// The router's own load: its queue (sluice_queue_*), in /metrics and
	// the load line as `sluice serve` has them; the workers export theirs.
	stats := func() router.EngineStats {
		qs := eng.QueueStats()
		return router.EngineStats{Queue: &qs}
	}
	reg := prometheus.NewRegistry()
	// Streams moved to another pair after their decode worker (or the
	// link to it) failed mid-stream (--max-migrations); each one went on
	// bit for bit, so this counts failures survived, not failures seen.
	migrated := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_cluster_migrations_total",
		Help: "Streams that moved to another prefill/decode pair after a transport failure past their first token (they resume exactly)."},
		func() float64 { return float64(eng.Migrated()) })
	// Requests retried on the pair that had just failed them: a lost
	// connection before the first token with no other pair left.
	sameRetried := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_cluster_same_pair_retries_total",
		Help: "Requests retried on the prefill/decode pair that had just failed them (a connection lost before the first token, no other pair left)."},
		func() float64 { return float64(eng.SameRetried()) })
	for _, c := range []prometheus.Collector{cl, migrated, sameRetried, router.LoadCollector(stats, func() string { return eng.Info().Model })} {
		if err := reg.Register(c); err != nil {
			log.Error("metrics", "err", err)
			return 1
		}
	}
	srv, err := router.New(router.Config{Engine: eng, Tokenizer: m.Tokenizer(), Chat: ct, BOSText: m.BOSText(), ReasoningFormat: o.reasoningFormat,
		Keys: keys, MaxBodyBytes: maxBody, MaxConcurrency: o.routerSlots(), TenantConcurrency: o.tenantMax, Logger: log,
		MetricsOffAPI: adminAddr != "", MetricsTenantLabels: o.metricsTenantLabels,
		// /ready: at least one usable worker in each pool (the probe
		// redials lost connections, so a restarted worker is used again).
		Ready: cl.Ready, Registry: reg})
	if err != nil {
		log.Error("router", "err", err)
		return 1
	}
	logThinking(log, srv)
	defer early.readyAdmin(log, srv.AdminHandler(), adminTLS)()
	log.Info("router ready", "model", m.Name, "context", ctxLen, "prefill", prefillAddrs, "decode", decodeAddrs,
		"encrypt_decode", decodes[0].Encrypt(), "encrypt_prefill", prefills[0].Encrypt(), "weights", weights)
	loadCtx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	if o.loadEvery > 0 {
		go node.LogLoad(loadCtx, log, o.loadEvery, stats) // running, waiting
	}
	return serveHTTP(log, sigs, early, apiTLS, srv, o.drain, func(ctx context.Context) error { stopLoad(); return eng.Close(ctx) })
}

// reloadOnHUP re-reads the workers file on every SIGHUP (sigs) from the
// moment it returns until ctx ends.
func reloadOnHUP(ctx context.Context, log *slog.Logger, sigs *roleSignals, path string, prefill, decode *node.Discovery) {
	sig, stop := sigs.notifyHUP()
	context.AfterFunc(ctx, stop)
	go node.OnSignal(ctx, sig, func() {
		if err := node.Reload(ctx, path, prefill, decode); err != nil {
			log.Error("SIGHUP: the workers file was not reloaded; keeping the current workers", "file", path, "err", err)
			return
		}
		log.Info("SIGHUP: workers file reloaded", "file", path)
	})
}

// splitList splits a comma-separated flag value, dropping empty entries.
func splitList(v string) []string {
	var out []string
	for _, a := range strings.Split(v, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// connectAll connects to every worker of one role. A worker that fails
// authentication (I12) or runs another model (I13) makes the router refuse
// to start; one that cannot be reached yet is kept, marked down until the
// probe reaches it, as long as one worker of the role answers.
func connectAll(ctx context.Context, log *slog.Logger, role string, addrs []string, tc tcp.Config) ([]*tcp.Redialer, int) {
	out := make([]*tcp.Redialer, len(addrs))
	errs := make([]error, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = tcp.ConnectRedialer(ctx, a, tc, log)
		}()
	}
	wg.Wait()
	up := 0
	for i, err := range errs {
		switch {
		case err == nil:
			up++
		case errors.Is(err, handoff.ErrModelMismatch) || errors.Is(err, handoff.ErrAuth):
			log.Error(connectFailure(role, err), role, addrs[i], "err", err, "code", wireCode(err))
			return nil, 1
		default:
			log.Warn("a "+role+" worker is not reachable yet; it is used once it answers", role, addrs[i], "err", err)
			out[i] = tcp.NewRedialer(addrs[i], tc)
		}
	}
	if up == 0 {
		log.Error(connectFailure(role, errs[0]), role, addrs, "err", errs[0], "code", wireCode(errs[0]))
		return nil, 1
	}
	return out, 0
}

// resolveUntil resolves worker specs, retrying until ctx ends (DNS for a
// Service may lag the pods at start).
func resolveUntil(ctx context.Context, specs []string) ([]string, error) {
	for {
		as, err := node.Resolve(ctx, node.DNS{}, specs)
		if err == nil && len(as) > 0 {
			return as, nil
		}
		if err == nil {
			err = fmt.Errorf("%v resolve to no address", specs)
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(500 * time.Millisecond):
		}
	}
}
