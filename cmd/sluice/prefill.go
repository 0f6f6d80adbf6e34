package main

import (
	"context"
	"flag"
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
		name:    "prefill",
		summary: "run a prefill worker: runs prompts and pushes their KV to a decode worker",
		run:     runPrefill,
	})
}

func runPrefill(args []string) int {
	fs := flag.NewFlagSet("prefill", flag.ContinueOnError)
	var o workerOpts
	var decodeAddr string
	var connectTimeout, resolveEvery time.Duration
	var workersFile string
	o.registerWorker(fs, "127.0.0.1:9001")
	o.registerNestCost(fs)
	fs.StringVar(&decodeAddr, "decode", "127.0.0.1:9002", "addresses of the decode workers this prefill worker pushes KV pages to, comma-separated: the same strings as the router's --decode (the router names the decode worker of each request by them)")
	fs.DurationVar(&resolveEvery, "resolve-interval", 10*time.Second, "how often the --decode names are resolved again (new decode workers join, vanished ones are dropped); 0 resolves only at start. Give the router the same value")
	fs.StringVar(&workersFile, "workers-file", "", "the router's workers file, in place of --decode: its \"decode HOST:PORT\" lines are the decode workers (prefill lines are ignored); read again on SIGHUP. Reload the prefill workers before the routers, so a new decode worker is known here before a router sends it a request")
	fs.DurationVar(&connectTimeout, "connect-timeout", 30*time.Second, "how long to keep trying to reach the decode worker at start")
	prefix := prefixCacheFlag(fs, "reuse the full prompt pages of earlier prompts of the SAME tenant")
	sharedPre := fs.String("shared-prefix-file", "", sharedPrefixFlag)
	usageFor(fs, `Usage: sluice prefill [MODEL] [flags]

Runs a prefill worker as its own process. For each handoff it runs the
prompt, writes the KV pages into the decode worker's reservation in bounded
batches over an authenticated connection (I12), then sends the commit last.
It refuses to start when --context exceeds its KV pool (I2).

Example:
  SLUICE_SECRET=$(cat secret) sluice prefill --model m.gguf --context 512 --kv-memory 64MiB --decode 127.0.0.1:9002 --listen 127.0.0.1:9001
`)
	log, m, ec, tc, code := startWorker("prefill", preflight.RolePrefill, &o, fs, args)
	if o.sigs != nil {
		defer o.sigs.stop()
	}
	if code >= 0 {
		return code
	}
	defer m.Close()
	nestGiven, nestMeasure, _ := o.nestForward() // checked with the flags
	if err := node.SetNestForward(log, preflight.RolePrefill, &ec, nestGiven, nestMeasure); err != nil {
		log.Error(err.Error())
		return 1
	}
	if !setPrefixCache(log, *prefix, &ec, tc) {
		return 2
	}
	if *sharedPre != "" {
		if !ec.PrefixCache {
			log.Error("--shared-prefix-file needs --prefix-cache on")
			return 2
		}
		pub, err := loadSharedPrefix(*sharedPre, m, ec.PageSize, ec.Context, log)
		if err != nil {
			log.Error(err.Error())
			return 1
		}
		ec.PublicPrefix = pub
	}
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	specs := splitList(decodeAddr)
	if workersFile != "" {
		if flagSet(fs, "decode") {
			cancel()
			log.Error("give the decode workers either in --workers-file or with --decode, not both")
			return 2
		}
		wl, err := node.ReadWorkers(workersFile)
		if err != nil {
			cancel()
			log.Error("cannot read the workers file", "err", err)
			return 2
		}
		specs = wl.Decode
	}
	if len(specs) == 0 {
		cancel()
		log.Error("--decode needs at least one address")
		return 2
	}
	addrs, err := resolveUntil(ctx, specs)
	if err != nil {
		cancel()
		log.Error("cannot resolve the decode workers' addresses", "decode", specs, "err", err)
		return 1
	}
	dcs, code := connectAll(ctx, log, "decode", addrs, tc)
	cancel()
	if code != 0 {
		return code
	}
	set := map[string]handoff.Decode{}
	for i, dc := range dcs {
		defer dc.Close()
		set[addrs[i]] = dc
	}
	ds := node.NewDecodeSet(set)
	if resolveEvery > 0 || workersFile != "" {
		dctx, stopDiscovery := context.WithCancel(context.Background())
		defer stopDiscovery()
		// A decode worker that leaves keeps its connection: handoffs bound
		// to it may still be finishing.
		d := &node.Discovery{Specs: specs, Resolver: node.DNS{}, Log: log,
			Add: func(a string) { ds.Add(a, tcp.NewRedialer(a, tc)) }, Remove: func(a string) { ds.Remove(a) }}
		d.Sync(dctx)
		if resolveEvery > 0 {
			go d.Run(dctx, resolveEvery)
		}
		if workersFile != "" {
			reloadOnHUP(dctx, log, o.sigs, workersFile, nil, d)
		}
	}
	pw, err := engine.NewPrefillWorker(ec, ds)
	if err != nil {
		log.Error("cannot start the prefill worker", "err", err)
		return 1
	}
	defer pw.Close()
	stopMetrics, err := serveWorkerMetrics(log, o.early, m.Name, func() router.EngineStats {
		st := node.Stats(map[string]*kv.Pool{preflight.RolePrefill: pw.Pool()}, nil)
		// The prompts' first-token phases as this worker saw them (its
		// queue, step wait, steps, push): the router process exports its
		// own (queue, handoff), so a remote worker's are here.
		st.Phases = map[string][]engine.PhaseStat{"prefill": pw.FirstTokenPhases()}
		// Its scheduler's counters (nested steps, preemptions, grammar
		// deferrals), as the other roles export theirs.
		sched := pw.SchedStats()
		st.Sched = map[string]engine.SchedStats{"prefill": sched}
		st.NestForward = map[string]int{"prefill": sched.NestForward}
		st.CommitAsides = router.PrefillAsides(pw.Stats())
		return st
	}, o.readiness(ds.Check))
	if err != nil {
		log.Error("cannot serve metrics", "err", err)
		return 1
	}
	defer stopMetrics()
	log.Info("prefill worker ready", "context", pw.Context(), "decode", addrs, "encrypt_decode", dcs[0].Encrypt())
	return serveRole(log, o.sigs, o.listen, tc, nil, node.Routed{Inner: pw, Set: ds, Draining: &o.draining}, pw.Pool(), o.drain, &o.draining)
}
