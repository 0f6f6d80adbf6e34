package main

import (
	"flag"
	"fmt"

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
func parseModelArg(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if code, ok := parseFlags(fs, args); !ok {
		return code, false
	}
	if fs.NArg() == 0 {
		return 0, true
	}
	model, rest := fs.Arg(0), fs.Args()[1:]
	name := "sluice " + fs.Name()
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
