// Command sluice is a disaggregated prefill/decode LLM serving engine whose
// KV cache is isolated per tenant by construction. Each subcommand lives in
// its own file and registers itself in init.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"sluice/internal/cli"
)

// command is one subcommand. run receives the arguments after the
// subcommand name and returns the process exit code.
type command struct {
	name    string
	summary string
	run     func(args []string) int
}

var commands = map[string]command{}

func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("duplicate command " + c.name)
	}
	commands[c.name] = c
}

// usage lists the commands on w.
func usage(w io.Writer) {
	var b strings.Builder
	b.WriteString("sluice: a disaggregated prefill/decode LLM server with per-tenant KV isolation\n\n")
	b.WriteString("Usage: sluice <command> [flags]\n\nCommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "  %-12s %s\n", n, commands[n].summary)
	}
	b.WriteString("\nRun 'sluice help <command>' or 'sluice <command> --help' for the flags of a command.\n")
	fmt.Fprint(w, b.String())
}

func main() { os.Exit(run(os.Args[1:])) }

// run dispatches a command line (without the program name) and returns the
// exit code. Asked-for help goes to stdout with exit 0; a missing or
// unknown command is a usage error: stderr, exit 2.
func run(args []string) int {
	if len(args) == 0 {
		usage(os.Stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(os.Stdout)
		return 0
	case "-v", "-version", "--version":
		// llama-server's and vLLM's spelling of `sluice version`.
		return commands["version"].run(nil)
	case "help":
		if len(args) == 1 {
			usage(os.Stdout)
			return 0
		}
		// `sluice help CMD` is `sluice CMD --help`.
		c, ok := commands[args[1]]
		if !ok {
			fmt.Fprintf(os.Stderr, "sluice: unknown command %q\n\n", args[1])
			usage(os.Stderr)
			return 2
		}
		return c.run([]string{"--help"})
	}
	c, ok := commands[args[0]]
	if !ok && strings.HasPrefix(args[0], "-") {
		// `sluice -m model.gguf`, as llama-server is run: say where the
		// flags go instead of listing every command under an error about
		// a "command" the user never meant to give.
		fmt.Fprintf(os.Stderr, "sluice: %s is a flag, and flags come after a command: 'sluice serve %s'. Run 'sluice --help' for the commands\n", args[0], strings.Join(args, " "))
		return 2
	}
	if !ok {
		if hint := unknownCommandHint(args); hint != "" {
			fmt.Fprintf(os.Stderr, "sluice: unknown command %q: %s. Run 'sluice --help' for the commands\n", args[0], hint)
			return 2
		}
		fmt.Fprintf(os.Stderr, "sluice: unknown command %q\n\n", args[0])
		usage(os.Stderr)
		return 2
	}
	return c.run(args[1:])
}

// helpOut is where asked-for help goes (stdout, as the GNU and Go tools
// do); error messages about bad flags go to the flag set's own output.
var helpOut io.Writer = os.Stdout

// parseFlags parses args into fs (cli.ParseFlags, help to helpOut).
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	return cli.ParseFlags(fs, args, helpOut)
}

// parseFlagsTo is parseFlags for a command that writes to its own stdout
// (tests pass a buffer): asked-for help goes there.
func parseFlagsTo(fs *flag.FlagSet, args []string, stdout io.Writer) (code int, ok bool) {
	return cli.ParseFlags(fs, args, stdout)
}

// unknownCommandHint is the sentence for a first word that is not a
// command but says what the user meant: a model where llama-server takes
// one, or ollama's and vLLM's verbs ("" for anything else).
func unknownCommandHint(args []string) string {
	name := args[0]
	switch {
	case strings.HasSuffix(strings.ToLower(name), ".gguf") || strings.HasPrefix(name, "hf://"):
		return fmt.Sprintf("%s is a model, and the command comes first: 'sluice serve %s'", name, strings.Join(args, " "))
	}
	switch name {
	case "pull", "download", "fetch":
		return "a model is fetched the first time a command loads it: 'sluice serve --model hf://ORG/REPO:QUANT' (or 'sluice inspect --model hf://ORG/REPO:QUANT' to fetch it and print its metadata)"
	case "run", "chat", "complete", "infer":
		return "'sluice generate --model FILE --prompt TEXT' runs one prompt; 'sluice serve --model FILE' serves the OpenAI API"
	}
	return ""
}
