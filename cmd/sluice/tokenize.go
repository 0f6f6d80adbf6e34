package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"sluice/internal/tokenizer"
)

func init() {
	register(command{name: "tokenize", summary: "print the token ids of a text under a GGUF model's tokenizer", run: runTokenize})
}

func runTokenize(args []string) int {
	fs := flag.NewFlagSet("tokenize", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: sluice tokenize --model PATH (--text TEXT | --stdin) [--json] [--no-special] [--no-parse-special]

Tokenizes TEXT with the tokenizer stored in a GGUF file (a model or a
vocab-only file), as llama.cpp's llama-tokenize does: BOS is added when the
vocabulary asks for it, and special-token text such as "<|im_start|>" or
"<s>" becomes its id.

Without --json it prints one line per token: the id and the token's piece.
With --json it prints one JSON object: {"token_ids":[...]}.

Flags:
`)
		fs.PrintDefaults()
	}
	model := fs.String("model", "", "GGUF file to take the tokenizer from, or hf://ORG/REPO[:QUANT] as sluice serve takes it (required)")
	text := fs.String("text", "", "text to tokenize")
	stdin := fs.Bool("stdin", false, "read the text from standard input instead of --text")
	asJSON := fs.Bool("json", false, `print {"token_ids":[...]}`)
	noSpecial := fs.Bool("no-special", false, "add no BOS/EOS and treat special-token text as plain text")
	noParse := fs.Bool("no-parse-special", false, "treat special-token text as plain text (BOS is still added)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *model == "" {
		fmt.Fprintln(os.Stderr, "sluice tokenize: --model is required (a GGUF model or vocab-only file)")
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "sluice tokenize: unexpected argument %q (the text goes in --text, or on standard input with --stdin)\n", fs.Arg(0))
		return 2
	}
	if *stdin {
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			fmt.Fprintf(os.Stderr, "sluice tokenize: reading standard input: %v\n", err)
			return 1
		}
		*text = string(b)
	}
	path, err := localModel(*model)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sluice tokenize: %v\n", err)
		return 1
	}
	tk, err := tokenizer.Load(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sluice tokenize: %s: %v\n", *model, err)
		return 1
	}
	ids := tk.Encode(*text, !*noSpecial, !*noSpecial && !*noParse)
	if *asJSON {
		if ids == nil {
			ids = []int32{}
		}
		out, _ := json.Marshal(struct {
			TokenIDs []int32 `json:"token_ids"`
		}{ids})
		fmt.Println(string(out))
		return 0
	}
	for _, id := range ids {
		fmt.Printf("%6d -> %q\n", id, tk.TokenText(id))
	}
	return 0
}
