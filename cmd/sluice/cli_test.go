package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"sluice/internal/testenv"
)

// runBin runs the built command with args and returns its exit code,
// stdout and stderr.
func runBin(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(sluiceBinary(t), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

// Every command's --help goes to stdout and exits 0; `sluice help CMD` is
// the same text; a bad flag is a usage error on stderr (exit 2).
func TestHelpOnStdoutExitZero(t *testing.T) {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		args := []string{n, "--help"}
		if n == "demo" {
			args = []string{n, "incident", "--help"}
		}
		code, out, errb := runBin(t, args...)
		if code != 0 || !strings.Contains(out, "Usage: sluice "+n) || errb != "" {
			t.Errorf("sluice %s: exit %d, stdout %q..., stderr %q", strings.Join(args, " "), code, head(out), head(errb))
			continue
		}
		hcode, hout, _ := runBin(t, "help", n)
		if hcode != 0 || !strings.Contains(hout, "Usage: sluice "+n) {
			t.Errorf("sluice help %s: exit %d, stdout %q", n, hcode, head(hout))
		}
		if n == "demo" {
			continue // `demo --help` and `demo incident --help` print the same usage
		}
		if hout != out {
			t.Errorf("sluice help %s differs from sluice %s --help", n, n)
		}
		// A bad flag: one line naming it and where the flags are listed,
		// not the whole help.
		bcode, bout, berr := runBin(t, n, "--no-such-flag")
		if bcode != 2 || bout != "" || strings.Count(berr, "\n") != 1 || !strings.Contains(berr, "unknown flag --no-such-flag") || !strings.Contains(berr, "--help' for all flags") {
			t.Errorf("sluice %s --no-such-flag: exit %d, stdout %q, stderr %q", n, bcode, head(bout), head(berr))
		}
		// Every flag line of the help is "-name" and at most one word for
		// its value: a backquoted word in a flag's text becomes the value's
		// name ("-load-log-interval sluice serve").
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); strings.HasPrefix(l, "  -") && len(f) > 2 {
				t.Errorf("sluice %s --help: flag line %q names its value with more than one word", n, l)
			}
		}
	}
	if code, out, _ := runBin(t, "--help"); code != 0 || !strings.Contains(out, "Commands:") {
		t.Errorf("sluice --help: exit %d, stdout %q", code, head(out))
	}
	if code, out, errb := runBin(t); code != 2 || out != "" || !strings.Contains(errb, "Commands:") {
		t.Errorf("sluice with no command: exit %d, stdout %q", code, head(out))
	}
	if code, _, errb := runBin(t, "help", "nonsense"); code != 2 || !strings.Contains(errb, "unknown command") {
		t.Errorf("sluice help nonsense: exit %d, stderr %q", code, head(errb))
	}
}

func head(s string) string {
	if len(s) > 120 {
		return s[:120]
	}
	return s
}

// The workers have no HTTP API of their own: their help must not promise
// 429s; the commands that serve HTTP do send them.
func TestWorkerHelpSpeaksNoHTTP429(t *testing.T) {
	for _, n := range []string{"prefill", "decode"} {
		_, out, _ := runBin(t, n, "--help")
		if strings.Contains(out, "429") {
			t.Errorf("sluice %s --help speaks of 429:\n%s", n, out)
		}
	}
	for _, n := range []string{"serve", "router"} {
		if _, out, _ := runBin(t, n, "--help"); !strings.Contains(out, "429") {
			t.Errorf("sluice %s --help does not say what is refused with 429", n)
		}
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := runBin(t, "version")
	if code != 0 || !strings.HasPrefix(out, "sluice ") || !strings.Contains(out, runtime.Version()) {
		t.Fatalf("sluice version: exit %d %q", code, out)
	}
	bi := &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Path: "sluice", Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-12-01T09:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	want := fmt.Sprintf("sluice v1.2.3 0123456789ab+dirty 2026-12-01T09:00:00Z go1.99 %s/%s", runtime.GOOS, runtime.GOARCH)
	if got := versionString(bi, true); got != want {
		t.Errorf("versionString:\n got  %q\n want %q", got, want)
	}
	if got := versionString(&debug.BuildInfo{GoVersion: "go1.99"}, true); !strings.HasPrefix(got, "sluice (devel) unknown go1.99") {
		t.Errorf("no VCS info: %q", got)
	}
}

// --threads defaults: every core for generate, bench and a worker process;
// half of them per role in `sluice serve`, whose prefill and decode compute
// at once (at least one each).
func TestThreadsDefaults(t *testing.T) {
	for _, c := range []struct{ cores, shared, alone int }{{1, 1, 1}, {2, 1, 2}, {3, 1, 3}, {8, 4, 8}} {
		if got := roleThreads(c.cores, true); got != c.shared {
			t.Errorf("%d cores, two roles: %d threads each, want %d", c.cores, got, c.shared)
		}
		if got := roleThreads(c.cores, false); got != c.alone {
			t.Errorf("%d cores, one role: %d threads, want %d", c.cores, got, c.alone)
		}
	}
	n := runtime.NumCPU()
	for cmd, want := range map[string]int{"generate": n, "bench": n, "prefill": n, "decode": n, "serve": max(1, n/2)} {
		_, out, _ := runBin(t, cmd, "--help")
		i := strings.Index(out, "-threads")
		if i < 0 || !strings.Contains(out[i:], fmt.Sprintf("(default %d)", want)) && !strings.Contains(out[i:], fmt.Sprintf("(default \"%d\")", want)) {
			t.Errorf("sluice %s --help: --threads default is not %d:\n%s", cmd, want, out)
		}
	}
}

// JSON logs print durations as text ("30s"), not integer nanoseconds.
func TestJSONLogDurations(t *testing.T) {
	var b bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&b, &slog.HandlerOptions{ReplaceAttr: durationsAsText}))
	log.Info("draining", "timeout", 30*time.Second, slog.Group("g", "d", 1500*time.Millisecond))
	if !strings.Contains(b.String(), `"timeout":"30s"`) || !strings.Contains(b.String(), `"d":"1.5s"`) {
		t.Fatalf("log line %s", b.String())
	}
	o := roleOpts{logFormat: "json", logLevel: "info"}
	if _, err := o.logger(); err != nil {
		t.Fatal(err)
	}
}

// --served-model-name is the id clients see and send; an explicit
// --context past the model's training context starts (the pools hold it)
// but warns, as llama.cpp does.
func TestServedModelNameAndContextWarning(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a process")
	}
	model := testenv.Shared(t, "models/stories260K.gguf")
	p := startProc(t, "serve", "--model", model, "--context", "4096", "--kv-pool-tokens", "4096", "--served-model-name", "tiny-stories", "--listen", "127.0.0.1:0")
	addr := p.waitAddr(t)
	if !strings.Contains(p.log(), "--context 4096 is larger than the model's training context of 2048 tokens") {
		t.Fatalf("no training-context warning:\n%s", p.log())
	}
	cl := openai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey("x"), option.WithMaxRetries(0))
	ctx := context.Background()
	m, err := cl.Models.Get(ctx, "tiny-stories")
	if err != nil || m.ID != "tiny-stories" {
		t.Fatalf("models/tiny-stories: %v %+v", err, m)
	}
	r, err := cl.Completions.New(ctx, openai.CompletionNewParams{Model: "tiny-stories",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}, MaxTokens: openai.Int(4), Temperature: openai.Float(0)})
	if err != nil || r.Model != "tiny-stories" {
		t.Fatalf("completion as tiny-stories: %v %+v", err, r)
	}
	if _, err := cl.Models.Get(ctx, "stories260K"); err == nil {
		t.Fatal("the file name is still served next to --served-model-name")
	}
	// The shutdown log's duration is text in JSON logs.
	p.stop(t)
	if !strings.Contains(p.log(), `"timeout":"30s"`) {
		t.Errorf("drain log without a text duration:\n%s", p.log())
	}
}

// --prefill-chunk, --max-num-batched-tokens and --shared-step-tokens: every role that runs a
// scheduler takes them, --help explains them, and a value out of bounds
// (or a budget smaller than the chunk) is a usage error naming the flag,
// before any model loads.
// The roles that compute take --weights and refuse a placement they do
// not know before loading anything.
func TestWeightsFlagRefusesNonsense(t *testing.T) {
	for _, role := range []string{"serve", "prefill", "decode"} {
		_, out, _ := runBin(t, role, "--help")
		if !strings.Contains(out, "-weights") || !strings.Contains(out, "anonymous huge pages") {
			t.Errorf("%s --help lacks --weights", role)
		}
		code, _, errb := runBin(t, role, "--weights", "huge")
		if code != 2 || !strings.Contains(errb, `--weights: "huge" is not a weights placement: use auto, mmap or copy`) {
			t.Errorf("sluice %s --weights huge: exit %d, stderr %q", role, code, head(errb))
		}
	}
}

func TestBatchFlagsRefuseNonsense(t *testing.T) {
	for _, role := range []string{"serve", "prefill", "decode"} {
		_, out, _ := runBin(t, role, "--help")
		if !strings.Contains(out, "-max-num-batched-tokens") || !strings.Contains(out, "-prefill-chunk") || !strings.Contains(out, "-shared-step-tokens") {
			t.Errorf("%s --help lacks the batch flags", role)
		}
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"--prefill-chunk", "0"}, "--prefill-chunk 0: give 1 to 16384"},
			{[]string{"--prefill-chunk", "16385"}, "--prefill-chunk 16385"},
			{[]string{"--max-num-batched-tokens", "-3"}, "--max-num-batched-tokens -3: give 1 to 65536"},
			{[]string{"--max-num-batched-tokens", "65537"}, "--max-num-batched-tokens 65537"},
			{[]string{"--prefill-chunk", "128", "--max-num-batched-tokens", "64"}, "--max-num-batched-tokens 64 is smaller than --prefill-chunk 128"},
			{[]string{"--prefill-chunk", "512"}, "--max-num-batched-tokens 256 is smaller than --prefill-chunk 512"},
			{[]string{"--shared-step-tokens", "-1"}, "--shared-step-tokens -1: give 0 (the prefill chunk) or 1 to --max-num-batched-tokens (256)"},
			{[]string{"--shared-step-tokens", "257"}, "--shared-step-tokens 257"},
		} {
			code, _, errb := runBin(t, append([]string{role}, c.args...)...)
			if code != 2 || !strings.Contains(errb, c.want) {
				t.Errorf("sluice %s %v: exit %d, stderr %q, want 2 and %q", role, c.args, code, head(errb), c.want)
			}
		}
	}
}

// --nest-forward-cost: the roles whose steps pause (serve, prefill) take
// it and --help explains it; a value out of 1..--max-num-batched-tokens
// (or not auto) is a usage error before any model loads; decode, whose
// steps never pause, does not take it.
func TestNestForwardCostFlag(t *testing.T) {
	for _, role := range []string{"serve", "prefill"} {
		if _, out, _ := runBin(t, role, "--help"); !strings.Contains(out, "-nest-forward-cost") || !strings.Contains(out, "measured at start") {
			t.Errorf("%s --help lacks --nest-forward-cost", role)
		}
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"--nest-forward-cost", "0"}, `--nest-forward-cost "0": give auto (measured at start) or 1 to --max-num-batched-tokens (256) tokens`},
			{[]string{"--nest-forward-cost", "257"}, `--nest-forward-cost "257"`},
			{[]string{"--nest-forward-cost", "17", "--max-num-batched-tokens", "16", "--prefill-chunk", "16"}, `--nest-forward-cost "17": give auto (measured at start) or 1 to --max-num-batched-tokens (16)`},
			{[]string{"--nest-forward-cost", "fast"}, `--nest-forward-cost "fast"`},
		} {
			code, _, errb := runBin(t, append([]string{role}, c.args...)...)
			if code != 2 || !strings.Contains(errb, c.want) {
				t.Errorf("sluice %s %v: exit %d, stderr %q, want 2 and %q", role, c.args, code, head(errb), c.want)
			}
		}
	}
	if code, _, errb := runBin(t, "decode", "--nest-forward-cost", "4"); code != 2 || !strings.Contains(errb, "nest-forward-cost") {
		t.Errorf("decode --nest-forward-cost: exit %d, stderr %q", code, head(errb))
	}
	// A flag that would change nothing is refused, not taken and ignored:
	// decode hands off no prompt, a colocated serve has no handoff.
	if code, _, errb := runBin(t, "decode", "--handoff-after-prefill"); code != 2 || !strings.Contains(errb, "handoff-after-prefill") {
		t.Errorf("decode --handoff-after-prefill: exit %d, stderr %q", code, head(errb))
	}
	if code, _, errb := runBin(t, "serve", "--colocated", "--handoff-after-prefill"); code != 2 || !strings.Contains(errb, "--colocated has no handoff") {
		t.Errorf("serve --colocated --handoff-after-prefill: exit %d, stderr %q", code, head(errb))
	}
}

// What a user coming from llama-server or vLLM types first gets an answer
// that says what to do: --version prints the version; a flag given before
// any command says where flags go; a command missing its required flag
// says which; the help of every command that takes a key file names every
// option of its lines; generate's help does not claim fewer architectures
// than the loader runs.
func TestFirstCommandsAnswer(t *testing.T) {
	_, want, _ := runBin(t, "version")
	for _, v := range []string{"--version", "-v"} {
		if code, out, errb := runBin(t, v); code != 0 || out != want || errb != "" {
			t.Errorf("sluice %s: exit %d, stdout %q, stderr %q; want sluice version's %q", v, code, out, errb, want)
		}
	}
	code, out, errb := runBin(t, "-m", "model.gguf")
	if code != 2 || out != "" || strings.Count(errb, "\n") != 1 || !strings.Contains(errb, "'sluice serve -m model.gguf'") {
		t.Errorf("sluice -m model.gguf: exit %d, stdout %q, stderr %q", code, out, errb)
	}
	if code, _, errb := runBin(t, "tokenize", "--text", "hi"); code != 2 || !strings.HasPrefix(errb, "sluice tokenize: --model is required") {
		t.Errorf("sluice tokenize without --model: exit %d, stderr %q", code, head(errb))
	}
	for _, n := range []string{"serve", "router"} {
		_, help, _ := runBin(t, n, "--help")
		var line string
		for l := range strings.Lines(help) {
			if strings.HasPrefix(l, "  -api-keys") {
				line = l
			}
		}
		i := strings.Index(help, line)
		usage := help[i+len(line):]
		usage, _, _ = strings.Cut(usage, "\n")
		for _, opt := range []string{"weight=N", "rpm=N", "tpm=N"} {
			if !strings.Contains(usage, opt) {
				t.Errorf("sluice %s --help: --api-keys does not name %s: %q", n, opt, usage)
			}
		}
	}
	if _, help, _ := runBin(t, "generate", "--help"); strings.Contains(help, "llama or qwen2") {
		t.Errorf("sluice generate --help names two architectures; it runs every one sluice serves")
	}
}

// An --api-keys file others on the host can read is warned about (every
// tenant's key is in it); one of mode 600 is not.
func TestAPIKeysFileModeWarned(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		mode os.FileMode
		warn bool
	}{{0o644, true}, {0o640, true}, {0o600, false}, {0o400, false}} {
		p := filepath.Join(dir, fmt.Sprintf("keys-%o", c.mode))
		if err := os.WriteFile(p, []byte("sk-1 alice\n"), c.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, c.mode); err != nil { // past the umask
			t.Fatal(err)
		}
		var buf bytes.Buffer
		keys, err := loadKeysFlag(p, slog.New(slog.NewTextHandler(&buf, nil)))
		if err != nil || keys == nil {
			t.Fatalf("mode %o: %v", c.mode, err)
		}
		if got := strings.Contains(buf.String(), "readable by other users"); got != c.warn {
			t.Errorf("mode %o: warned %v, want %v:\n%s", c.mode, got, c.warn, buf.String())
		}
	}
}
