// Package cli holds the command-line conventions every sluice command
// shares, so that `sluice serve` and `sluice bench serve` answer --help and
// a bad flag the same way.
package cli

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"strings"
)

// ParseFlags parses args into fs. When it returns ok false the command must
// return code at once: 0 after --help printed the usage to stdout, 2 on a
// bad flag (the flag package has said which, with the usage, on the flag
// set's output, stderr unless the command chose another).
func ParseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) (code int, ok bool) {
	errOut := fs.Output()
	var buf bytes.Buffer
	fs.SetOutput(&buf)
	err := fs.Parse(args)
	fs.SetOutput(errOut)
	switch {
	case errors.Is(err, flag.ErrHelp):
		_, _ = io.Copy(stdout, &buf)
		return 0, false
	case err != nil:
		_, _ = io.Copy(errOut, &buf)
		return 2, false
	}
	return 0, true
}

// List is a repeatable string flag: each use adds one value.
type List []string

func (l *List) String() string     { return strings.Join(*l, ",") }
func (l *List) Set(s string) error { *l = append(*l, s); return nil }
