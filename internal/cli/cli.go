// Package cli holds the command-line conventions every sluice command
// shares, so that `sluice serve` and `sluice bench serve` answer --help, a
// mistyped flag and another tool's spelling of a flag the same way.
package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"reflect"
	"strings"
	"time"
)

// ParseFlags parses args into fs. When it returns ok false the command must
// return code at once: 0 after --help printed the usage to stdout, 2 on a
// bad flag, after ONE line on the flag set's output (stderr unless the
// command chose another) saying which flag, the closest real one when the
// flag does not exist, and how to see them all. The whole usage on every
// typo buried the one line that mattered under 70 lines of help.
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
		fmt.Fprintln(errOut, parseError(fs, err))
		return 2, false
	}
	return 0, true
}

// parseError is the one line for a flag the command line got wrong.
func parseError(fs *flag.FlagSet, err error) string {
	cmd := "sluice " + fs.Name()
	help := fmt.Sprintf("Run '%s --help' for all flags", cmd)
	const undefined = "flag provided but not defined: "
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, undefined); ok {
		name = strings.TrimLeft(name, "-")
		if hint := otherTool(fs, name); hint != "" {
			return fmt.Sprintf("%s: %s. %s", cmd, hint, help)
		}
		if near := Closest(fs, name); near != "" {
			return fmt.Sprintf("%s: unknown flag %s; did you mean %s? %s", cmd, dashes(name), dashes(near), help)
		}
		return fmt.Sprintf("%s: unknown flag %s. %s", cmd, dashes(name), help)
	}
	// The flag package names flags with one dash ("invalid value "x" for
	// flag -threads"); the help and the docs spell them with two.
	msg = strings.ReplaceAll(msg, "flag -", "flag --")
	return fmt.Sprintf("%s: %s. %s", cmd, msg, help)
}

// dashes spells a flag as the docs do: -m, --model.
func dashes(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// Closest is the flag of fs nearest to name, or "" when none is near
// enough to be a plausible typo: at most a third of the name's letters
// edited (at least one), or name a prefix of the flag.
func Closest(fs *flag.FlagSet, name string) string {
	best, bestD := "", -1
	fs.VisitAll(func(f *flag.Flag) {
		d := editDistance(name, f.Name)
		if len(name) >= 3 && strings.HasPrefix(f.Name, name) {
			d = min(d, 1)
		}
		if bestD < 0 || d < bestD || (d == bestD && f.Name < best) {
			best, bestD = f.Name, d
		}
	})
	if bestD < 0 || bestD > max(1, len(name)/3) {
		return ""
	}
	return best
}

// editDistance is the edit distance of a and b counting a swap of two
// neighbouring letters as one edit, as a typist makes it (optimal string
// alignment; bytes: flag names are ASCII).
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			sub := d[i-1][j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			d[i][j] = min(sub, d[i-1][j]+1, d[i][j-1]+1)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// Alias makes name another spelling of the flag target, already defined in
// fs: both set the same value, so `-m x` is `--model x` (the names vLLM
// and llama-server users type). The help lists the alias with its target.
func Alias(fs *flag.FlagSet, name, target string) {
	t := fs.Lookup(target)
	if t == nil {
		panic("cli.Alias: no flag " + target)
	}
	fs.Var(t.Value, name, "same as "+dashes(target))
}

// IsSet reports whether the flag name was given on the command line,
// under its own name or an alias of it (Alias shares the Value, so -c
// counts as --context).
func IsSet(fs *flag.FlagSet, name string) bool {
	t := fs.Lookup(name)
	set := false
	same := func(v flag.Value) bool {
		// flag.Func's values are funcs, which == would panic on.
		return t != nil && reflect.TypeOf(v).Comparable() && reflect.TypeOf(t.Value).Comparable() && v == t.Value
	}
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name || same(f.Value) })
	return set
}

// List is a repeatable string flag: each use adds one value.
type List []string

func (l *List) String() string     { return strings.Join(*l, ",") }
func (l *List) Set(s string) error { *l = append(*l, s); return nil }

// Bound is the least value a numeric flag (int, float or duration) takes;
// Why says what the value means, for the error.
type Bound struct {
	Flag string
	Min  float64
	Why  string
}

// CheckBounds refuses a flag of fs set below its bound, naming the flag,
// its value and what to give instead. Flags fs does not define are
// skipped, so one table serves every role. Without it a value out of
// range was silently replaced by a default further down (--max-concurrency
// 0 ran with 64) or crashed the process (--probe-interval 0 panicked in
// time.NewTicker).
func CheckBounds(fs *flag.FlagSet, bounds []Bound) error {
	for _, b := range bounds {
		f := fs.Lookup(b.Flag)
		if f == nil {
			continue
		}
		g, ok := f.Value.(flag.Getter)
		if !ok {
			continue
		}
		var v float64
		var shown, least string
		switch x := g.Get().(type) {
		case int:
			v, shown, least = float64(x), fmt.Sprint(x), fmt.Sprint(int64(b.Min))
		case int64:
			v, shown, least = float64(x), fmt.Sprint(x), fmt.Sprint(int64(b.Min))
		case uint:
			v, shown, least = float64(x), fmt.Sprint(x), fmt.Sprint(int64(b.Min))
		case float64:
			// NaN passes every comparison below (NaN < min is false) and
			// an infinite weight times a score of 0 is NaN: the router's
			// weighted sums were then all NaN and it picked by rotation,
			// every scorer silently off ('--score-decode-queue nan').
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return fmt.Errorf("%s %v: give a finite number, at least %v (%s)", dashes(b.Flag), x, b.Min, b.Why)
			}
			v, shown, least = x, fmt.Sprint(x), fmt.Sprint(b.Min)
		case time.Duration:
			v, shown, least = float64(x), x.String(), time.Duration(b.Min).String()
		default:
			continue
		}
		if v < b.Min {
			return fmt.Errorf("%s %s: give at least %s (%s)", dashes(b.Flag), shown, least, b.Why)
		}
	}
	return nil
}
