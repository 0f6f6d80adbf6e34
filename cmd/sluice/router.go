package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"sluice/internal/engine"
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
		connectTimeout time.Duration
	)
	o.register(fs, false)
	o.registerHTTP(fs)
	fs.StringVar(&prefillAddr, "prefill", "127.0.0.1:9001", "address of the prefill worker")
	fs.StringVar(&decodeAddr, "decode", "127.0.0.1:9002", "address of the decode worker")
	fs.StringVar(&secretFile, "secret-file", "", "file (mode 600) holding the roles' shared secret; without it $"+node.SecretEnv+" is used. Never given on the command line (I12)")
	fs.BoolVar(&frameMAC, "frame-mac", false, "authenticate every frame after the handshake, not only the connection (costs throughput); always on when listening on or dialling an address that is not loopback (I12), this flag turns it on for loopback too")
	fs.DurationVar(&connectTimeout, "connect-timeout", 30*time.Second, "how long to keep trying to reach the workers at start")
	usageFor(fs, `Usage: sluice router [flags]

Runs the router as its own process: authenticates API keys into tenants,
tokenizes (the tokenizer and chat template come from --model, which must be
the workers' model), checks each request against the context (I2),
reserves on decode, prefills on prefill and streams tokens back.

--context is what the router advertises and admits. At start the router
asks the decode worker, through its ordinary admission path, to admit a
request of that length: an explicit --context that decode would refuse
makes the router refuse to start; "auto" starts from the model's training
context and lowers it to the most decode admits, and logs that (I2). The
prefill worker checks its own context; give every role the same --context.

Example:
  SLUICE_SECRET=$(cat secret) sluice router --model m.gguf --context 512 --prefill 127.0.0.1:9001 --decode 127.0.0.1:9002
`)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "router: unexpected arguments %q\n", fs.Args())
		return 2
	}
	log, err := o.logger()
	if err != nil {
		fmt.Fprintln(os.Stderr, "router:", err)
		return 2
	}
	log = log.With("process", "router")
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
	keys, err := loadKeysFlag(o.apiKeys, log)
	if err != nil {
		log.Error(err.Error())
		return 1
	}
	m, err := node.LoadModel(o.model)
	if err != nil {
		log.Error("cannot load the model", "err", err)
		return 1
	}
	defer m.Close()
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
	tc := tcp.Config{Secret: secret, FrameMAC: frameMAC, Model: m.Fingerprint()}
	cctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	dc, err := tcp.ConnectRedialer(cctx, decodeAddr, tc, log)
	if err != nil {
		log.Error(connectFailure("decode", err), "decode", decodeAddr, "err", err, "code", wireCode(err))
		return 1
	}
	defer dc.Close()
	auto := o.context == "auto" || o.context == ""
	if err := node.ProbeDecodeContext(cctx, dc, ctxLen, m.Fingerprint()); err != nil && auto {
		// I2 with auto: lower the advertised context to what decode admits.
		lo, hi := 1, ctxLen-1
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if node.ProbeDecodeContext(cctx, dc, mid, m.Fingerprint()) == nil {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		log.Info(fmt.Sprintf("--context auto: lowered the context from the model's %d to %d tokens, the most the decode worker admits (I2)", ctxLen, lo))
		ctxLen = lo
	} else if err != nil {
		log.Error(fmt.Sprintf("refusing to start: the decode worker at %s does not admit a request of the router's context %d tokens (%v); start decode with a pool that holds it, or lower the router's --context", decodeAddr, ctxLen, err),
			"code", preflight.Code)
		return 1
	}
	pc, err := tcp.ConnectRedialer(cctx, prefillAddr, tc, log)
	if err != nil {
		log.Error(connectFailure("prefill", err), "prefill", prefillAddr, "err", err, "code", wireCode(err))
		return 1
	}
	defer pc.Close()
	eng, err := engine.NewDisaggregated(engine.DisaggConfig{Model: m.Name, Vocab: m.Runtime.Vocab(), Fingerprint: m.Fingerprint(), Context: ctxLen,
		MaxConcurrency: o.maxConc, MaxQueue: o.maxQueue, QueueTimeout: o.queueWait}, pc, dc)
	if err != nil {
		log.Error("engine", "err", err)
		return 1
	}
	ct, err := m.ChatTemplate()
	if err != nil {
		log.Error("the model's chat template does not parse", "err", err)
		return 1
	}
	checkChatTemplate(log, ct)
	adminAddr := o.adminAddr(keys != nil)
	srv, err := router.New(router.Config{Engine: eng, Tokenizer: m.Tokenizer(), Chat: ct, BOSText: m.BOSText(),
		Keys: keys, MaxBodyBytes: maxBody, MaxConcurrency: o.routerSlots(), TenantConcurrency: o.tenantMax, Logger: log,
		MetricsOffAPI: adminAddr != "", MetricsTenantLabels: o.metricsTenantLabels,
		// /ready: both workers reachable (a lost connection is redialled
		// by the probe, so a restarted worker makes the router ready again).
		Ready: func(ctx context.Context) error {
			return node.CheckPeers(ctx, []node.Peer{{Role: "decode", Conn: dc}, {Role: "prefill", Conn: pc}})
		}})
	if err != nil {
		log.Error("router", "err", err)
		return 1
	}
	stopAdmin, err := serveAdmin(log, adminAddr, srv.AdminHandler())
	if err != nil {
		log.Error("cannot serve metrics", "addr", adminAddr, "err", err)
		return 1
	}
	defer stopAdmin()
	log.Info("router ready", "model", m.Name, "context", ctxLen, "prefill", prefillAddr, "decode", decodeAddr,
		"frame_mac_decode", dc.FrameMAC(), "frame_mac_prefill", pc.FrameMAC())
	return serveHTTP(log, o.listen, srv, o.drain, eng.Close)
}
