package main

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"sluice/internal/testenv"
)

// The flags vLLM and llama-server users type mean the same here: -m is
// --model, --max-model-len and -c are --context, --host and --port make the
// API's address, --api-key KEY is one key for the single tenant. And the
// role says which build it is in its first log line.
func TestServeTakesVLLMFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a process")
	}
	model := testenv.Shared(t, "models/stories260K.gguf")
	p := startProc(t, "serve", "-m", model, "--max-model-len", "200", "--kv-pool-tokens", "512",
		"--host", "127.0.0.1", "--port", "0", "--api-key", "sk-test-key",
		// --api-key moves /metrics to 127.0.0.1:9090 by default, which
		// another server on the machine may hold.
		"--metrics-listen", "127.0.0.1:0")
	addr := p.waitAddr(t)
	if !strings.HasPrefix(addr, "127.0.0.1:") || strings.HasSuffix(addr, ":0") {
		t.Fatalf("listening on %q, want 127.0.0.1 and a port", addr)
	}
	if !strings.Contains(p.log(), `"context":200`) {
		t.Errorf("--max-model-len 200 did not set the context:\n%s", p.log())
	}
	for _, c := range []struct {
		key  string
		want int
	}{{"", 401}, {"wrong", 401}, {"sk-test-key", 200}} {
		req, _ := http.NewRequest("GET", "http://"+addr+"/v1/models", nil)
		if c.key != "" {
			req.Header.Set("Authorization", "Bearer "+c.key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("key %q: %d, want %d", c.key, resp.StatusCode, c.want)
		}
	}
	if v, r := p.field("starting", "version"), p.field("starting", "revision"); v == "" || r == "" {
		t.Errorf("no start line with version and revision:\n%s", p.log())
	}
}

func TestResolveHTTP(t *testing.T) {
	for _, c := range []struct {
		listen, host, port, want, err string
	}{
		{"127.0.0.1:8080", "", "", "127.0.0.1:8080", ""},
		{"127.0.0.1:8080", "0.0.0.0", "", "0.0.0.0:8080", ""},
		{"127.0.0.1:8080", "", "9000", "127.0.0.1:9000", ""},
		{"127.0.0.1:8080", "::1", "9000", "[::1]:9000", ""},
		{"127.0.0.1:8080", "", "http", "", "--port"},
		{"127.0.0.1:8080", "", "70000", "", "--port"},
	} {
		o := serveOpts{listen: c.listen, host: c.host, port: c.port}
		err := o.resolveHTTP()
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%+v: err %v, want one naming %s", c, err, c.err)
			}
			continue
		}
		if err != nil || o.listen != c.want {
			t.Errorf("%+v: %q %v, want %q", c, o.listen, err, c.want)
		}
	}
	o := serveOpts{listen: "127.0.0.1:8080", apiKey: "k", apiKeys: "file"}
	if err := o.resolveHTTP(); err == nil {
		t.Error("--api-key with --api-keys accepted")
	}
}

// A binary built without VCS stamping (-buildvcs=false, the Dockerfile)
// still says its version and revision: the Makefile and the Dockerfile
// stamp them at link time, and buildVersion prefers those stamps.
func TestVersionWithoutVCSStamps(t *testing.T) {
	defer func(v, r string) { version, revision = v, r }(version, revision)
	version, revision = "v0.0.0-20261206051600-0123456789ab", "0123456789abcdef0123456789abcdef01234567+dirty"
	noVCS := &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Path: "sluice", Version: "(devel)"}}
	want := "sluice v0.0.0-20261206051600-0123456789ab 0123456789ab+dirty go1.99 " + runtime.GOOS + "/" + runtime.GOARCH
	if got := versionString(noVCS, true); got != want {
		t.Errorf("stamped, no VCS:\n got  %q\n want %q", got, want)
	}
	version, revision = "", ""
	if got := versionString(noVCS, true); !strings.HasPrefix(got, "sluice (devel) unknown go1.99") {
		t.Errorf("no stamps at all: %q", got)
	}
	for _, f := range []string{"Makefile", "deploy/Dockerfile"} {
		b, err := os.ReadFile(testenv.ModuleRoot() + "/" + f)
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`-X main\.version=\S+ -X main\.revision=`).Match(b) {
			t.Errorf("%s does not stamp main.version and main.revision", f)
		}
	}
	mk, _ := os.ReadFile(testenv.ModuleRoot() + "/Makefile")
	for _, target := range []string{"build", "serve"} {
		m := regexp.MustCompile(`(?m)^` + target + `:\n\t(.*)$`).FindSubmatch(mk)
		if m == nil || !strings.Contains(string(m[1]), "$(LDFLAGS)") {
			t.Errorf("make %s does not link with $(LDFLAGS): %q", target, m)
		}
	}
}

// `sluice serve MODEL` is `sluice serve --model MODEL`, as `vllm serve
// MODEL` takes it, with flags before and after; the model given twice is
// refused, never one of the two dropped; a stray second argument is named.
func TestServeTakesModelArgument(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a process")
	}
	model, err := filepath.Abs("../../testdata/models/stories260K.gguf")
	if err != nil {
		t.Fatal(err)
	}
	// --ctx-size: llama-server's long name of -c.
	p := startProc(t, "serve", model, "--ctx-size", "200", "--kv-pool-tokens", "512", "--host", "127.0.0.1", "--port", "0")
	addr := p.waitAddr(t)
	if got := p.field("model loaded", "model"); got != "stories260K" {
		t.Errorf("model loaded %q, want stories260K:\n%s", got, p.log())
	}
	if !strings.Contains(p.log(), `"context":200`) {
		t.Errorf("--context after the model was not taken:\n%s", p.log())
	}
	resp, err := http.Get("http://" + addr + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"id":"stories260K"`) {
		t.Errorf("/v1/models: %s", b)
	}
	for _, c := range []struct {
		args []string
		says string
	}{
		// Each also carries a flag value refused later, so that a server
		// that wrongly started exits at once instead of serving.
		{[]string{"serve", model, "--model", model, "--port", "none"}, "the model is given twice"},
		{[]string{"serve", "--port", "none", "--model", model, model}, "the model is given with --model or -hf and everything else must be a flag"},
		{[]string{"router", model, "-hf", "a/b", "--port", "none"}, "the model is given twice"},
		{[]string{"decode", "--kv-memory", "none", model, "extra", "--listen", "127.0.0.1:0"}, `unexpected arguments ["extra" "--listen" "127.0.0.1:0"]: the model is`},
	} {
		code, out, errb := runBin(t, c.args...)
		if code != 2 || out != "" || strings.Count(errb, "\n") != 1 || !strings.Contains(errb, c.says) {
			t.Errorf("sluice %s: exit %d, stdout %q, stderr %q; want exit 2 and one line saying %q", strings.Join(c.args, " "), code, head(out), errb, c.says)
		}
	}
}

// A listener whose address another process holds names the flag that
// moves it: the API's --port, the admin listener's --metrics-listen (whose
// default with a key, 127.0.0.1:9090, is also Prometheus's own port).
func TestListenConflictNamesTheFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a process")
	}
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	_, port, _ := net.SplitHostPort(held.Addr().String())
	for _, c := range []struct {
		args []string
		flag string
	}{
		{[]string{"serve", "--host", "127.0.0.1", "--port", port, "--kv-pool-tokens", "4096"}, "--port"},
		{[]string{"serve", "--port", "0", "--api-key", "sk-x", "--metrics-listen", held.Addr().String(), "--kv-pool-tokens", "4096"}, "--metrics-listen"},
	} {
		code, _, errb := runBin(t, c.args...)
		if code != 1 || !strings.Contains(errb, "another process holds this address") || !strings.Contains(errb, c.flag) {
			t.Errorf("sluice %s: exit %d, stderr %s; want exit 1 naming %s", strings.Join(c.args, " "), code, errb, c.flag)
		}
		// The ports are bound before the model loads: a conflict costs no
		// load (a real model's takes a minute).
		if strings.Contains(errb, "built-in default model") {
			t.Errorf("sluice %s: the model was loaded before the bind failed:\n%s", strings.Join(c.args, " "), errb)
		}
	}
}

// The admin listener's default address is Prometheus's own port: a bind
// conflict there says so and names the flag that moves it.
func TestDefaultAdminConflictNamesPrometheus(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for flags, want := range map[string][]string{
		defaultAdminFlags:  {"--metrics-listen", "Prometheus", "another process holds this address"},
		"--metrics-listen": {"--metrics-listen", "another process holds this address"},
	} {
		e, err := bindEarly(log, "127.0.0.1:0", held.Addr().String(), flags, nil, nil)
		if err == nil {
			e.close()
			t.Fatalf("%s: bound an address another listener holds", flags)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", flags, err, w)
			}
		}
		if flags == "--metrics-listen" && strings.Contains(err.Error(), "Prometheus") {
			t.Errorf("an address the operator chose is not the default: %q", err)
		}
	}
}

// A numeric flag below its least value is refused at once, in one line
// naming it, by every role: it was replaced by a default without a word
// (--max-concurrency 0 ran 64 sequences) or, for --probe-interval 0, made
// the router panic once its workers answered.
func TestRoleFlagsBelowBoundsRefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		says string
	}{
		// Each also carries a value refused later, so that a role that
		// wrongly started exits at once instead of serving.
		{[]string{"serve", "--max-concurrency", "0", "--port", "none"}, "--max-concurrency 0: give at least 1"},
		{[]string{"serve", "--threads", "0", "--port", "none"}, "--threads 0: give at least 1"},
		{[]string{"serve", "--queue-timeout", "0s", "--port", "none"}, "--queue-timeout 0s: give at least 1ms"},
		{[]string{"router", "--probe-interval", "0s", "--port", "none"}, "--probe-interval 0s: give at least 1ms"},
		{[]string{"decode", "--peer-timeout", "-1s", "--kv-memory", "none"}, "--peer-timeout -1s: give at least 0s"},
		{[]string{"prefill", "--max-concurrency", "-5", "--kv-memory", "none"}, "--max-concurrency -5: give at least 1"},
	} {
		code, out, errb := runBin(t, c.args...)
		if code != 2 || out != "" || strings.Count(errb, "\n") != 1 || !strings.Contains(errb, c.says) {
			t.Errorf("sluice %s: exit %d, stdout %q, stderr %q; want exit 2 and one line saying %q", strings.Join(c.args, " "), code, head(out), errb, c.says)
		}
	}
}

// --chat-template (vLLM's flag; --chat-template-file, llama-server's)
// replaces the model's template: a file, or the template itself. A path
// that does not exist exits 2 before the model loads; a template that does
// not parse exits 1; neither is served with the model's template instead.
func TestChatTemplateFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a process")
	}
	model, err := filepath.Abs("../../testdata/models/stories260K.gguf")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "t.jinja")
	if err := os.WriteFile(file, []byte("{% for m in messages %}<<{{ m['content'] }}>>{% endfor %}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, flagName := range []string{"--chat-template", "--chat-template-file"} {
		p := startProc(t, "serve", model, flagName, file, "--kv-pool-tokens", "1024", "--host", "127.0.0.1", "--port", "0")
		addr := p.waitAddr(t)
		tokens := func(body string) string {
			resp, err := http.Post("http://"+addr+"/tokenize", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			_, after, _ := strings.Cut(string(b), `"tokens":`)
			list, _, _ := strings.Cut(after, "]")
			return list
		}
		chat, plain := tokens(`{"messages":[{"role":"user","content":"hi"}]}`), tokens(`{"prompt":"<<hi>>"}`)
		if chat == "" || chat != plain {
			t.Errorf("%s: messages tokenize to %s, the template's text <<hi>> to %s", flagName, chat, plain)
		}
	}
	// --port none: refused after the template, so that a path wrongly
	// taken as a template ends at once instead of serving.
	code, _, errb := runBin(t, "serve", model, "--chat-template", "/no/such/template.jinja", "--port", "none")
	if code != 2 || !strings.Contains(errb, `--chat-template "/no/such/template.jinja"`) || !strings.Contains(errb, "no such file") {
		t.Errorf("missing template file: exit %d, stderr %s", code, errb)
	}
	// A template that does not parse ends start-up; wrongly accepted, the
	// server would reach "listening" (then it is stopped and the test
	// fails). The port is bound before the template is read, so a held
	// port cannot stand in for this.
	p := startProc(t, "serve", model, "--chat-template", "{% for %}", "--host", "127.0.0.1", "--port", "0", "--kv-pool-tokens", "1024")
	select {
	case <-p.addr:
		p.stop(t)
		t.Fatalf("a template that does not parse was served:\n%s", p.log())
	case <-p.done:
	}
	if code := p.wait(t); code != 1 || !strings.Contains(p.log(), "--chat-template: the inline template does not parse") {
		t.Errorf("template that does not parse: exit %d, stderr %s", code, p.log())
	}
}

// A role that refuses its context logs each preflight line with the
// context its verdict speaks of, not "context":0 beside "pool holds N
// tokens < context C".
func TestRefusedPreflightLogsTheContext(t *testing.T) {
	model, err := filepath.Abs("../../testdata/models/stories260K.gguf")
	if err != nil {
		t.Fatal(err)
	}
	code, _, errb := runBin(t, "serve", model, "--context", "100000", "--kv-memory", "1MiB", "--log-format", "json", "--port", "0")
	if code != 1 || !strings.Contains(errb, `"msg":"preflight"`) {
		t.Fatalf("exit %d, want 1 with preflight lines:\n%s", code, errb)
	}
	for l := range strings.Lines(errb) {
		if strings.Contains(l, `"msg":"preflight"`) && !strings.Contains(l, `"context":100000`) {
			t.Errorf("preflight line without the refused context: %s", l)
		}
	}
}
