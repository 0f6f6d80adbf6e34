package main

import (
	"flag"
	"io"
	"strings"
	"testing"

	"sluice/internal/grammar"
)

// --grammar-mask-cache reaches the roles' pools as bytes; its default is
// the grammar package's, and a size that is not one is refused, named.
func TestGrammarMaskCacheFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int64
		ok   bool
	}{
		{nil, grammar.DefaultMaskBytes, true},
		{[]string{"--grammar-mask-cache", "64MiB"}, 64 << 20, true},
		{[]string{"--grammar-mask-cache", "0"}, 0, false},
		{[]string{"--grammar-mask-cache", "lots"}, 0, false},
	} {
		var o roleOpts
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o.register(fs, true)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		p, err := o.pools()
		if (err == nil) != c.ok || (c.ok && p.GrammarMaskBytes != c.want) {
			t.Errorf("%v: %d bytes, err %v", c.args, p.GrammarMaskBytes, err)
		}
		if err != nil && !strings.Contains(err.Error(), "--grammar-mask-cache") {
			t.Errorf("%v: the error does not name the flag: %v", c.args, err)
		}
	}
}
