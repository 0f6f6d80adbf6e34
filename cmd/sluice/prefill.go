package main

import (
	"context"
	"flag"
	"time"

	"sluice/internal/engine"
	"sluice/internal/handoff/tcp"
	"sluice/internal/kv"
	"sluice/internal/preflight"
	"sluice/internal/router"
	"sluice/internal/router/node"
)

func init() {
	register(command{
		name:    "prefill",
		summary: "run a prefill worker: runs prompts and pushes their KV to a decode worker",
		run:     runPrefill,
	})
}

func runPrefill(args []string) int {
	fs := flag.NewFlagSet("prefill", flag.ContinueOnError)
	var o workerOpts
	var decodeAddr string
	var connectTimeout time.Duration
	o.registerWorker(fs, "127.0.0.1:9001")
	fs.StringVar(&decodeAddr, "decode", "127.0.0.1:9002", "address of the decode worker this prefill worker pushes KV pages to")
	fs.DurationVar(&connectTimeout, "connect-timeout", 30*time.Second, "how long to keep trying to reach the decode worker at start")
	var prefix string
	fs.StringVar(&prefix, "prefix-cache", "on", "on or off: reuse the full prompt pages of earlier prompts of the SAME tenant (keys salted with an HMAC of the tenant keyed by the deployment key file; never shared across tenants)")
	usageFor(fs, `Usage: sluice prefill [flags]

Runs a prefill worker as its own process. For each handoff it runs the
prompt, writes the KV pages into the decode worker's reservation in bounded
batches over an authenticated connection (I12), then sends the commit last.
It refuses to start when --context exceeds its KV pool (I2).

Example:
  SLUICE_SECRET=$(cat secret) sluice prefill --model m.gguf --context 512 --kv-memory 64MiB --decode 127.0.0.1:9002 --listen 127.0.0.1:9001
`)
	log, m, ec, tc, code := startWorker("prefill", preflight.RolePrefill, &o, fs, args)
	if code >= 0 {
		return code
	}
	defer m.Close()
	if prefix != "on" && prefix != "off" {
		log.Error("--prefix-cache must be on or off", "value", prefix)
		return 2
	}
	// The salts are keyed with the deployment's shared secret (I11).
	ec.PrefixCache, ec.CacheSecret = prefix == "on", tc.Secret
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	dc, err := tcp.ConnectRedialer(ctx, decodeAddr, tc, log)
	cancel()
	if err != nil {
		log.Error(connectFailure("decode", err), "decode", decodeAddr, "err", err, "code", wireCode(err))
		return 1
	}
	defer dc.Close()
	pw, err := engine.NewPrefillWorker(ec, dc)
	if err != nil {
		log.Error("cannot start the prefill worker", "err", err)
		return 1
	}
	defer pw.Close()
	stopMetrics, err := serveWorkerMetrics(log, o.metrics, func() router.EngineStats {
		return node.Stats(map[string]*kv.Pool{preflight.RolePrefill: pw.Pool()}, nil)
	}, o.readiness(func(ctx context.Context) error { return node.CheckPeers(ctx, []node.Peer{{Role: "decode", Conn: dc}}) }))
	if err != nil {
		log.Error("cannot serve metrics", "err", err)
		return 1
	}
	defer stopMetrics()
	log.Info("prefill worker ready", "context", pw.Context(), "decode", decodeAddr, "frame_mac_decode", dc.FrameMAC())
	return serveRole(log, o.listen, tc, nil, pw, pw.Pool(), o.drain, &o.draining)
}
