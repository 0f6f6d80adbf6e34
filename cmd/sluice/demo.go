package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"sluice/internal/incident"
)

func init() {
	register(command{
		name:    "demo",
		summary: "replay the cross-tenant KV leak incident against the real decode worker",
		run:     runDemo,
	})
}

func runDemo(args []string) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	model := fs.String("model", "", "GGUF model the decode worker runs (default: the built-in synthetic model)")
	asJSON := fs.Bool("json", false, "print the matrix cells as JSON instead of a table")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: sluice demo incident [--model PATH] [--json]

Replays the production incident (and its relatives) against sluice's real
decode worker, with misbehaving prefill peers:

  (a) a request rejected as over-long still reserves, sends one page and "complete"
  (b) a short transfer whose commit claims the full token count
  (c) a wrong digest (pages announced, bytes never placed)
  (d) no digest
  (e) a stale writer after an abort, its pages reused LIFO by another tenant
  (f) writes into another handoff's pages

Each case runs with every safeguard on, with each safeguard ALONE (admission,
count/coverage, digest, owner tags, scrub; every other one off) and with none.
Every tenant's KV is filled with its own canary value; "LEAK" means another
tenant's canary was actually read by a sequence's attention. The exit code is
0 only if every case errors with all safeguards on and each case is stopped by
at least one safeguard alone.

Flags:
`)
		fs.PrintDefaults()
	}
	if len(args) == 0 || args[0] != "incident" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			fs.SetOutput(helpOut)
			fs.Usage()
			return 0
		}
		fmt.Fprintln(os.Stderr, "sluice demo: the only demo is \"incident\"; run 'sluice demo incident'")
		fs.Usage()
		return 2
	}
	if code, ok := parseFlags(fs, args[1:]); !ok {
		return code
	}
	rt, name, err := incident.LoadModel(*model)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice demo:", err)
		return 1
	}
	cells, err := incident.Run(rt)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice demo:", err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(cells); err != nil {
			fmt.Fprintln(os.Stderr, "sluice demo:", err)
			return 1
		}
	} else {
		fmt.Printf("sluice incident replay (decode worker running %s)\n\n", name)
		fmt.Print(incident.Format(cells))
	}
	if bad := incident.Verdict(cells); bad != "" {
		fmt.Fprintln(os.Stderr, "\nFAILED:", bad)
		return 1
	}
	if !*asJSON {
		fmt.Println("\nverdict: every case fails closed with all safeguards on, and each is stopped by at least one safeguard alone.")
	}
	return 0
}
