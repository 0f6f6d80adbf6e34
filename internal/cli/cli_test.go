package cli

import (
	"bytes"
	"flag"
	"strings"
	"testing"
	"time"
)

func testFlags() (*flag.FlagSet, *bytes.Buffer, *string, *string) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var errb bytes.Buffer
	fs.SetOutput(&errb)
	listen := fs.String("listen", "127.0.0.1:8080", "address")
	model := fs.String("model", "", "`file`")
	fs.String("context", "auto", "tokens")
	fs.Int("threads", 2, "threads")
	fs.Int("max-num-batched-tokens", 256, "budget")
	Alias(fs, "m", "model")
	Alias(fs, "max-model-len", "context")
	return fs, &errb, listen, model
}

// A mistyped flag gets one line (not the whole help) naming the closest
// flag and the way to list them all, and exit code 2.
func TestUnknownFlagOneLineWithClosest(t *testing.T) {
	for _, c := range []struct{ arg, want string }{
		{"--lisen", "sluice serve: unknown flag --lisen; did you mean --listen? Run 'sluice serve --help' for all flags"},
		{"-thread", "unknown flag --thread; did you mean --threads?"},
		{"--max-num-batched", "did you mean --max-num-batched-tokens?"},
		{"--modle", "did you mean --model?"},
		{"--zzzzzz", "sluice serve: unknown flag --zzzzzz. Run 'sluice serve --help' for all flags"},
	} {
		fs, errb, _, _ := testFlags()
		var out bytes.Buffer
		code, ok := ParseFlags(fs, []string{c.arg, "x"}, &out)
		got := errb.String()
		if ok || code != 2 || out.Len() != 0 {
			t.Errorf("%s: code %d ok %v stdout %q", c.arg, code, ok, out.String())
		}
		if strings.Count(got, "\n") != 1 || !strings.Contains(got, c.want) {
			t.Errorf("%s: stderr %q, want one line with %q", c.arg, got, c.want)
		}
	}
}

// A flag of llama-server or vLLM gets sluice's flag for it, or why none is
// needed, not a "did you mean" for the nearest name (-t was "did you mean
// -c?"). A sluice flag the command lacks is not suggested.
func TestOtherServersFlagsAnswered(t *testing.T) {
	for _, c := range []struct{ arg, want string }{
		{"-t", "sluice serve: -t is llama-server's flag; sluice's is --threads"},
		{"-ngl", "-ngl is llama-server's flag: sluice runs on the CPU"},
		{"--max-num-seqs", "--max-num-seqs is vLLM's flag; sluice's is --max-concurrency"},
		{"--max-model-len", ""}, // a sluice alias: parsed, no error
		{"--tensor-parallel-size", "vLLM's flag: sluice runs on the CPUs"},
	} {
		fs, errb, _, _ := testFlags()
		fs.Int("max-concurrency", 64, "requests")
		var out bytes.Buffer
		_, ok := ParseFlags(fs, []string{c.arg, "1"}, &out)
		got := errb.String()
		if c.want == "" {
			if !ok {
				t.Errorf("%s: refused: %q", c.arg, got)
			}
			continue
		}
		if ok || strings.Count(got, "\n") != 1 || !strings.Contains(got, c.want) || strings.Contains(got, "did you mean") {
			t.Errorf("%s: stderr %q, want one line with %q", c.arg, got, c.want)
		}
	}
	// --gpu-memory-utilization maps to --kv-memory, which this set lacks:
	// no suggestion of a flag that is not there.
	fs, errb, _, _ := testFlags()
	ParseFlags(fs, []string{"--gpu-memory-utilization", "0.9"}, &bytes.Buffer{})
	if got := errb.String(); strings.Contains(got, "--kv-memory") || !strings.Contains(got, "unknown flag --gpu-memory-utilization") {
		t.Errorf("a flag this command lacks suggested: %q", got)
	}
}

func TestBadValueOneLine(t *testing.T) {
	fs, errb, _, _ := testFlags()
	code, _ := ParseFlags(fs, []string{"--threads", "many"}, &bytes.Buffer{})
	got := errb.String()
	if code != 2 || strings.Count(got, "\n") != 1 || !strings.Contains(got, `invalid value "many" for flag --threads`) || !strings.Contains(got, "sluice serve --help") {
		t.Errorf("code %d, stderr %q", code, got)
	}
}

func TestHelpGoesToStdout(t *testing.T) {
	fs, errb, _, _ := testFlags()
	var out bytes.Buffer
	if code, ok := ParseFlags(fs, []string{"--help"}, &out); ok || code != 0 || errb.Len() != 0 || !strings.Contains(out.String(), "-listen") {
		t.Errorf("code %d ok %v stdout %q stderr %q", code, ok, out.String(), errb.String())
	}
}

// An alias sets its target's value, and the help says which flag it is.
func TestAlias(t *testing.T) {
	fs, _, _, model := testFlags()
	if _, ok := ParseFlags(fs, []string{"-m", "a.gguf", "--max-model-len", "4096"}, &bytes.Buffer{}); !ok {
		t.Fatal("parse failed")
	}
	if *model != "a.gguf" || fs.Lookup("context").Value.String() != "4096" {
		t.Errorf("model %q context %q", *model, fs.Lookup("context").Value.String())
	}
	var out bytes.Buffer
	fs.SetOutput(&out)
	fs.PrintDefaults()
	if !strings.Contains(out.String(), "same as --model") || !strings.Contains(out.String(), "same as --context") {
		t.Errorf("help:\n%s", out.String())
	}
}

// A flag given through its alias counts as given.
func TestIsSetSeesAliases(t *testing.T) {
	fs, _, _, _ := testFlags()
	fs.Func("hook", "a func flag (not comparable)", func(string) error { return nil })
	if _, ok := ParseFlags(fs, []string{"--max-model-len", "4096", "--hook", "x"}, &bytes.Buffer{}); !ok {
		t.Fatal("parse failed")
	}
	if !IsSet(fs, "context") || IsSet(fs, "model") || IsSet(fs, "threads") || !IsSet(fs, "max-model-len") || !IsSet(fs, "hook") {
		t.Errorf("IsSet: context %v model %v threads %v", IsSet(fs, "context"), IsSet(fs, "model"), IsSet(fs, "threads"))
	}
}

func TestEditDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"listen", "listen", 0}, {"lisen", "listen", 1}, {"modle", "model", 1}, {"ab", "ba", 1}, {"kitten", "sitting", 3}, {"", "abc", 3}} {
		if got := editDistance(c.a, c.b); got != c.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
}

// A numeric flag below its bound is refused with its name, value and the
// least value; one at the bound passes; a flag the set lacks is skipped;
// a float that is not a finite number (NaN, Inf) is refused too.
func TestCheckBounds(t *testing.T) {
	bounds := []Bound{
		{"threads", 1, "threads per step"},
		{"probe-interval", float64(time.Millisecond), "a ticker period"},
		{"weight", 0, "a scorer weight"},
		{"not-defined", 5, "skipped"},
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, ""},
		{[]string{"--threads", "1", "--probe-interval", "1ms", "--weight", "0"}, ""},
		{[]string{"--threads", "0"}, "--threads 0: give at least 1 (threads per step)"},
		{[]string{"--threads", "-3"}, "--threads -3: give at least 1"},
		{[]string{"--probe-interval", "0s"}, "--probe-interval 0s: give at least 1ms (a ticker period)"},
		{[]string{"--weight", "-0.5"}, "--weight -0.5: give at least 0 (a scorer weight)"},
		// strconv.ParseFloat takes these spellings; none is a weight.
		{[]string{"--weight", "NaN"}, "--weight NaN: give a finite number, at least 0 (a scorer weight)"},
		{[]string{"--weight", "nan"}, "give a finite number"},
		{[]string{"--weight", "+Inf"}, "--weight +Inf: give a finite number"},
		{[]string{"--weight", "inf"}, "give a finite number"},
		{[]string{"--weight", "-Inf"}, "--weight -Inf: give a finite number"},
		{[]string{"--weight", "1e308"}, ""},
	} {
		fs := flag.NewFlagSet("router", flag.ContinueOnError)
		fs.Int("threads", 2, "")
		fs.Duration("probe-interval", time.Second, "")
		fs.Float64("weight", 1, "")
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		err := CheckBounds(fs, bounds)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%v: %q, want %q", c.args, got, c.want)
		}
	}
}
