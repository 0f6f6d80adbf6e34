package main

import (
	"flag"
	"fmt"
	"time"

	"sluice/internal/cli"
)

// parseModelArg is parseFlags for the commands that load a model (serve,
// router, prefill, decode): one argument that is not a flag is the model,
// as `vllm serve MODEL` takes it, wherever it stands among the flags
// (`sluice serve model.gguf --port 8000`). The standard flag package stops
// at the first such argument, so without this every flag after it was
// reported as an "unexpected argument" and the user learned nothing. The
// model given twice (the argument and --model or -hf) is refused, never
// one of them silently dropped.
//
// It then checks the numeric flags against roleBounds (exit 2, one line).
func parseModelArg(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if code, ok := parseModelArgOnly(fs, args); !ok {
		return code, false
	}
	if err := cli.CheckBounds(fs, roleBounds); err != nil {
		fmt.Fprintf(fs.Output(), "sluice %s: %v\n", fs.Name(), err)
		return 2, false
	}
	return 0, true
}

// roleBounds are the least values of the roles' numeric flags whose
// default lies above them. Below them a value was replaced by a default
// with no word (--max-concurrency 0 ran 64 sequences, --queue-timeout 0
// waited 30 s, --threads 0 ran one thread) or crashed the process
// (--probe-interval 0: a panic in time.NewTicker).
var roleBounds = []cli.Bound{
	{Flag: "threads", Min: 1, Why: "threads per forward step"},
	{Flag: "max-concurrency", Min: 1, Why: "sequences or requests at once"},
	{Flag: "max-queue", Min: 0, Why: "requests that may wait for their turn"},
	{Flag: "tenant-max-concurrency", Min: 0, Why: "0: no per-tenant limit"},
	{Flag: "max-migrations", Min: 0, Why: "0: never"},
	{Flag: "max-retries", Min: 0, Why: "0: never"},
	{Flag: "prefill-workers", Min: 1, Why: "workers in this process"},
	{Flag: "decode-workers", Min: 1, Why: "workers in this process"},
	{Flag: "queue-timeout", Min: float64(time.Millisecond), Why: "how long a request may wait in the queue"},
	{Flag: "probe-interval", Min: float64(time.Millisecond), Why: "how often workers are probed"},
	{Flag: "drain-timeout", Min: 0, Why: "0: cut at once"},
	{Flag: "peer-timeout", Min: 0, Why: "0: no heartbeat"},
	{Flag: "resolve-interval", Min: 0, Why: "0: resolve only at start"},
	{Flag: "connect-timeout", Min: 0, Why: "how long to keep trying at start"},
	{Flag: "load-log-interval", Min: 0, Why: "0: no load line"},
	{Flag: "score-decode-free-pages", Min: 0, Why: "a scorer weight; 0 turns it off"},
	{Flag: "score-decode-queue", Min: 0, Why: "a scorer weight; 0 turns it off"},
	{Flag: "score-prefill-queue", Min: 0, Why: "a scorer weight; 0 turns it off"},
	{Flag: "score-prefix-affinity", Min: 0, Why: "a scorer weight; 0 turns it off"},
}

// parseModelArgOnly is parseModelArg without the bounds.
func parseModelArgOnly(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if code, ok := parseFlags(fs, args); !ok {
		return code, false
	}
	if fs.NArg() == 0 {
		return 0, true
	}
	model, rest := fs.Arg(0), fs.Args()[1:]
	name := "sluice " + fs.Name()
	if cli.IsSet(fs, "hf") || cli.IsSet(fs, "model") {
		// The model came first, as a flag: this argument is a stray
		// word (often an unquoted value with a space), not a model.
		fmt.Fprintf(fs.Output(), "%s: unexpected arguments %q: the model is given with --model or -hf and everything else must be a flag (quote a value that holds spaces). Run '%s --help' for all flags\n", name, fs.Args(), name)
		return 2, false
	}
	// The flags after the model first, so that a --model among them is
	// seen before the argument is taken.
	if code, ok := parseFlags(fs, rest); !ok {
		return code, false
	}
	if cli.IsSet(fs, "model") || cli.IsSet(fs, "hf") {
		fmt.Fprintf(fs.Output(), "%s: the model is given twice, as the argument %q and with --model or -hf; give it once\n", name, model)
		return 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected arguments %q: the model is %q and everything else must be a flag. Run '%s --help' for all flags\n", name, fs.Args(), model, name)
		return 2, false
	}
	if err := fs.Set("model", model); err != nil {
		fmt.Fprintf(fs.Output(), "%s: %v\n", name, err)
		return 2, false
	}
	return 0, true
}
