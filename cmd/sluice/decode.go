package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"sluice/internal/engine"
	"sluice/internal/handoff"
	"sluice/internal/handoff/tcp"
	"sluice/internal/kv"
	"sluice/internal/preflight"
	"sluice/internal/router"
	"sluice/internal/router/node"
)

func init() {
	register(command{
		name:    "decode",
		summary: "run a decode worker: accepts verified KV handoffs and decodes them",
		run:     runDecode,
	})
}

// workerOpts are the flags of the prefill and decode processes.
type workerOpts struct {
	roleOpts
	listen     string
	secretFile string
	frameMAC   bool
	deadAfter  time.Duration
	metrics    string
	drain      time.Duration
	// draining is set once SIGTERM/SIGINT starts the drain: /ready is 503
	// from then on.
	draining atomic.Bool
	// early is the admin listener, bound before the model loads (nil
	// without --metrics-listen).
	early *earlyServer
	// sigs catches SIGTERM/SIGINT from the start (startWorker).
	sigs *roleSignals
}

// readiness is the worker's /ready check: not draining, and check (the
// worker's own dependencies; nil: none) passes.
func (o *workerOpts) readiness(check func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		if o.draining.Load() {
			return errors.New("the worker is draining")
		}
		if check != nil {
			return check(ctx)
		}
		return nil
	}
}

func (o *workerOpts) registerWorker(fs *flag.FlagSet, defListen string) {
	o.worker = true
	o.register(fs, true)
	fs.StringVar(&o.listen, "listen", defListen, "address the role's authenticated handoff service listens on")
	fs.StringVar(&o.secretFile, "secret-file", "", "file (mode 600) holding the roles' shared secret, at least 16 bytes; without it $"+node.SecretEnv+" is used. Never given on the command line (I12)")
	fs.BoolVar(&o.frameMAC, "encrypt", false, "encrypt every frame between roles (AES-256-GCM under keys from an ephemeral X25519 exchange; I15); always on when listening on or dialling an address that is not loopback, so this turns it on for loopback too")
	fs.BoolVar(&o.frameMAC, "frame-mac", false, "the same as --encrypt (its former name: every frame is now encrypted, which also authenticates it)")
	fs.DurationVar(&o.deadAfter, "peer-timeout", tcp.DefaultDeadAfter, "how long a peer (worker or router) may send nothing, not even a heartbeat, before it is declared dead and its connection closed: its requests fail over or end with an error. Both sides ping every eighth of it when idle; a slow or CPU-starved peer keeps sending and stays up. 0: no heartbeat (a peer whose process hangs then holds its calls until it resumes, though a prompt the router gives up still ends within 20 s: the connection is closed if the worker does not acknowledge it within 10 s; a peer cut off by the network or whose host froze is noticed by TCP within 20 s either way)")
	fs.DurationVar(&o.drain, "drain-timeout", 30*time.Second, "on SIGTERM/SIGINT, how long sequences in flight may finish before connections close")
	fs.StringVar(&o.metrics, "metrics-listen", "", "when set, serve Prometheus /metrics (this role's KV pages by state, integrity violations, refusals, late writes), /health (liveness) and /ready (readiness) on this HTTP address")
}

// serveWorkerMetrics serves /metrics, /health (liveness: the process
// answers) and /ready (readiness: ready returns nil; nil ready means
// always) for a worker process.
func serveWorkerMetrics(log *slog.Logger, early *earlyServer, model string, stats func() router.EngineStats, ready func(context.Context) error) (func(), error) {
	if early == nil {
		return func() {}, nil
	}
	h, err := router.MetricsHandler(stats, model, computeClassFailures())
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(`{"status":"ok"}` + "\n")) })
	mux.HandleFunc("GET /ready", router.ReadyHandler(ready))
	return early.readyAdmin(log, mux, nil), nil
}

// startWorker parses flags, loads the model and runs preflight for role.
func startWorker(name, role string, o *workerOpts, fs *flag.FlagSet, args []string) (*slog.Logger, *node.Model, engine.Config, tcp.Config, int) {
	if code, ok := parseModelArg(fs, args); !ok {
		return nil, nil, engine.Config{}, tcp.Config{}, code
	}
	fail := func(code int, format string, a ...any) (*slog.Logger, *node.Model, engine.Config, tcp.Config, int) {
		fmt.Fprintf(os.Stderr, name+": "+format+"\n", a...)
		return nil, nil, engine.Config{}, tcp.Config{}, code
	}
	log, err := o.logger()
	if err != nil {
		return fail(2, "%v", err)
	}
	log = log.With("process", role)
	logStart(log, role)
	o.sigs = catchSignals(log)
	pools, err := o.pools()
	if err != nil {
		return fail(2, "%v", err)
	}
	mem, err := o.memory()
	if err != nil {
		return fail(2, "%v", err)
	}
	secret, err := node.LoadSecret(o.secretFile)
	if err != nil {
		return fail(1, "%v", err)
	}
	// The admin listener is bound before the model loads (as sluice
	// serve's): a port in use fails now, and meanwhile probes get 503
	// model_loading. It lives until the process exits.
	if o.metrics != "" {
		if o.early, err = bindEarly(log, "", o.metrics, "--metrics-listen", nil, nil); err != nil {
			return fail(1, "%v", err)
		}
	}
	m, err := loadModel(log, o.model, o.hf, mem)
	if err != nil {
		return fail(1, "%v", err)
	}
	o.sigs.loaded()
	weights := m.Placement.String()
	if m.BuiltIn {
		weights = "built in (generated in memory)"
	}
	log.Info("model loaded", "model", m.Describe(), "fingerprint", m.Fingerprint().String(), "weights", weights)
	o.setup(log, m, pools.Context)
	pools = o.sizeAutoKV(log, m, pools, 1)
	rep := m.Preflight(pools, role)
	logPreflight(log, rep)
	if !rep.OK {
		m.Close()
		return nil, nil, engine.Config{}, tcp.Config{}, 1
	}
	ec, err := m.RoleConfig(rep, role, o.threads, o.maxConc)
	if err != nil {
		m.Close()
		return fail(1, "%v", err)
	}
	ec.Verify, ec.GrammarMaskBytes = pools.Verify, pools.GrammarMaskBytes
	ec.ChunkTokens, ec.StepTokens, ec.SharedStepTokens = o.chunk, o.stepTokens, o.sharedStep
	ec.HandoffAfterPrefill = o.afterPrefill
	raiseProcs(log, o.threads)
	o.lowerCompute(log, flagSet(fs, "compute-priority"))
	// A worker holds KV: a peer worker of another --kv-type is refused at
	// the handshake (kv_type_mismatch).
	return log, m, ec, tcp.Config{Secret: secret, Encrypt: o.frameMAC, DeadAfter: deadAfter(o.deadAfter), Model: m.Fingerprint(), HoldsKV: true, KVType: ec.KVType}, -1
}

// connectFailure is the log message of a role that could not connect to
// its peer at start: a peer of another model (I13) or secret (I12) is a
// refusal to start, not an unreachable peer.
func connectFailure(peer string, err error) string {
	switch {
	case errors.Is(err, handoff.ErrModelMismatch):
		return "refusing to start: the " + peer + " worker runs another model (I13); start every role with the same model file"
	case errors.Is(err, handoff.ErrAuth):
		return "refusing to start: the " + peer + " worker failed authentication (I12); give every role the same shared secret"
	case errors.Is(err, handoff.ErrKVTypeMismatch):
		return "refusing to start: the " + peer + " worker stores KV pages of another type; start every role with the same --kv-type"
	case errors.Is(err, handoff.ErrVersion):
		return "refusing to start: the " + peer + " worker runs a sluice build of another protocol version; run the same build on every role"
	}
	return "cannot reach the " + peer + " worker"
}

// wireCode is an error's stable code (handoff.ToWire), for log fields.
func wireCode(err error) string { c, _ := handoff.ToWire(err); return c }

// serveRole serves d/p over TCP until SIGTERM/SIGINT (sigs), then
// drains: it waits (up to drain) until pool holds no page in use, so
// sequences in flight finish, before closing the connections.
func serveRole(log *slog.Logger, sigs *roleSignals, addr string, tc tcp.Config, d handoff.Decode, p handoff.Prefill, pool *kv.Pool, drain time.Duration, draining *atomic.Bool) int {
	srv, err := tcp.NewServer(tc, d, p)
	if err != nil {
		log.Error("handoff service", "err", err)
		return 1
	}
	srv.OnError = func(remote net.Addr, err error) {
		log.Warn("connection ended with an error", "remote", remote.String(), "err", err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		log.Error("cannot listen", "addr", addr, "err", listenError(err, "--listen"))
		return 1
	}
	sigs.serving()
	ctx := sigs.Drain
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	log.Info("listening", "addr", l.Addr().String(), "encrypt", tc.Encrypt || !tcp.Loopback(l.Addr()))
	code := 0
	select {
	case <-ctx.Done():
		draining.Store(true)
		log.Info("shutting down: draining the sequences in flight", "timeout", drain)
		deadline := time.Now().Add(drain)
		// Idle prefix-cache pages are nobody's work in flight: waiting
		// for them would always time out.
		for pool.Stats().Held() > 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if n := pool.Stats().Held(); n > 0 {
			// Closing now cuts the sequences still holding pages: the
			// exit code says so, as serve's and the router's do.
			log.Error("drain timed out; closing with pages in use", "pages_in_use", n, "prefix_cache_idle", pool.Stats().CacheIdle)
			code = 1
		}
	case err := <-errc:
		log.Error("handoff service failed", "err", err)
		code = 1
	}
	srv.Close()
	return code
}

// prefixCacheFlag registers a worker's --prefix-cache; what says what the
// role's cache does.
func prefixCacheFlag(fs *flag.FlagSet, what string) *string {
	return fs.String("prefix-cache", "on", "on or off: "+what+"; keys salted with an HMAC of the tenant keyed by the deployment key file (the same in every role), never shared across tenants")
}

// setPrefixCache applies --prefix-cache to a worker's config; false (after
// logging) when the value is neither on nor off. The salts are keyed with
// the deployment's shared secret (I11), so prefill and decode derive the
// same ones.
func setPrefixCache(log *slog.Logger, v string, ec *engine.Config, tc tcp.Config) bool {
	if v != "on" && v != "off" {
		log.Error("--prefix-cache must be on or off", "value", v)
		return false
	}
	ec.PrefixCache, ec.CacheSecret = v == "on", tc.Secret
	return true
}

func runDecode(args []string) int {
	fs := flag.NewFlagSet("decode", flag.ContinueOnError)
	var o workerOpts
	o.registerWorker(fs, "127.0.0.1:9002")
	prefix := prefixCacheFlag(fs, "keep the verified full prompt pages of the SAME tenant's earlier handoffs and tell prefill not to send them again (decode_prefix_len)")
	usageFor(fs, `Usage: sluice decode [MODEL] [flags]

Runs a decode worker as its own process. It owns the destination KV pages:
it reserves them for a router, applies a prefill worker's page writes,
verifies the commit (count, coverage, owner, generation, digest; I5) and
decodes. It refuses to start when --context exceeds its KV pool (I2).

Example:
  SLUICE_SECRET=$(cat secret) sluice decode --model m.gguf --context 512 --kv-memory 64MiB --listen 127.0.0.1:9002
`)
	log, m, ec, tc, code := startWorker("decode", preflight.RoleDecode, &o, fs, args)
	if o.sigs != nil {
		defer o.sigs.stop()
	}
	if code >= 0 {
		return code
	}
	defer m.Close()
	if !setPrefixCache(log, *prefix, &ec, tc) {
		return 2
	}
	dw, err := engine.NewDecodeWorker(ec)
	if err != nil {
		log.Error("cannot start the decode worker", "err", err)
		return 1
	}
	defer dw.Close()
	stopMetrics, err := serveWorkerMetrics(log, o.early, m.Name, func() router.EngineStats {
		return node.Stats(map[string]*kv.Pool{preflight.RoleDecode: dw.Pool()}, dw)
	}, o.readiness(nil))
	if err != nil {
		log.Error("cannot serve metrics", "err", err)
		return 1
	}
	defer stopMetrics()
	log.Info("decode worker ready", "context", dw.Context())
	// Draining (SIGTERM), new reservations are refused with a retryable
	// "draining" (the router moves the request to another decode worker
	// at once and stops picking this one), so the drain ends when the
	// sequences in flight do.
	return serveRole(log, o.sigs, o.listen, tc, node.DrainingDecode{Decode: dw, Draining: &o.draining}, nil, dw.Pool(), o.drain, &o.draining)
}
