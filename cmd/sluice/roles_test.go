package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"sluice/internal/testenv"
)

// sluiceBinary builds the command once per test run.
func sluiceBinary(t *testing.T) string { return testenv.SluiceBinary(t) }

// proc is one role process whose JSON log lines are collected.
type proc struct {
	name  string
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []map[string]any
	raw   strings.Builder
	addr  chan string
	done  chan struct{}
}

func startProc(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	return startProcWith(t, (*exec.Cmd).Start, name, args...)
}

// startProcWith starts the role with start (e.g. inside a network
// namespace: testnet.Node.Start).
func startProcWith(t *testing.T, start func(*exec.Cmd) error, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, addr: make(chan string, 1), done: make(chan struct{})}
	p.cmd = exec.Command(sluiceBinary(t), append([]string{name, "--log-format", "json"}, args...)...)
	p.cmd.Env = append(os.Environ(), "SLUICE_SECRET=roles-test-shared-secret-0123456789")
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := start(p.cmd); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var m map[string]any
			p.mu.Lock()
			p.raw.WriteString(sc.Text() + "\n")
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				p.lines = append(p.lines, m)
				if m["msg"] == "listening" {
					a, _ := m["addr"].(string)
					p.addr <- strings.TrimPrefix(strings.TrimPrefix(a, "http://"), "https://")
				}
			}
			p.mu.Unlock()
		}
		io.Copy(io.Discard, stderr)
	}()
	t.Cleanup(func() { p.stop(t) })
	return p
}

// waitAddr returns the address the process listens on.
func (p *proc) waitAddr(t *testing.T) string {
	t.Helper()
	select {
	case a := <-p.addr:
		return a
	case <-p.done:
		t.Fatalf("%s exited before listening:\n%s", p.name, p.log())
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not listen within 60s:\n%s", p.name, p.log())
	}
	return ""
}

// waitLog waits (the router logs a request after answering it) for text
// to appear in the log.
func (p *proc) waitLog(text string) bool {
	for range 500 {
		if strings.Contains(p.log(), text) {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// field returns a field of the first log line with message msg.
func (p *proc) field(msg, key string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.lines {
		if l["msg"] == msg {
			v, _ := l[key].(string)
			return v
		}
	}
	return ""
}

// number returns a numeric field of the first log line with message msg
// (-1: none).
func (p *proc) number(msg, key string) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.lines {
		if l["msg"] == msg {
			if v, ok := l[key].(float64); ok {
				return v
			}
		}
	}
	return -1
}

func (p *proc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.raw.String()
}

// wait returns the exit code once the process ended.
func (p *proc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		p.cmd.Process.Kill()
		t.Fatalf("%s did not exit", p.name)
	}
	err := p.cmd.Wait()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}

func (p *proc) stop(t *testing.T) {
	if p.cmd.ProcessState != nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
	p.cmd.Wait()
}

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveSluiceBinary()
	os.Exit(code)
}

// waitStatus polls url until it answers want (bounded: 15s).
func waitStatus(t *testing.T, url string, want int, what string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	last := 0
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if last = resp.StatusCode; last == want {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: %s answered %d, want %d within 15s", what, url, last, want)
}

// Router, prefill and decode as three OS processes on loopback serve a
// request end to end; the text is llama.cpp's greedy continuation.
func TestRolesAsProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts three processes")
	}
	model := testenv.Shared(t, "models/stories260K.gguf")
	pool := []string{"--model", model, "--context", "256", "--kv-pool-tokens", "512"}
	dec := startProc(t, "decode", append(pool, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")...)
	daddr := dec.waitAddr(t)
	maddr := dec.field("metrics listening", "addr")
	pre := startProc(t, "prefill", append(pool, "--listen", "127.0.0.1:0", "--decode", daddr, "--metrics-listen", "127.0.0.1:0")...)
	paddr := pre.waitAddr(t)
	pmaddr := pre.field("metrics listening", "addr")
	keys := filepath.Join(t.TempDir(), "keys")
	os.WriteFile(keys, []byte("key-a tenant-a\nkey-b tenant-b\n"), 0o600)
	rt := startProc(t, "router", "--model", model, "--context", "256", "--listen", "127.0.0.1:0",
		"--prefill", paddr, "--decode", daddr, "--api-keys", keys, "--metrics-listen", "127.0.0.1:0")
	raddr := rt.waitAddr(t)
	radmin := rt.field("metrics listening", "addr")
	// The scorer weights read as the flags name them, not as a Go struct.
	if l := rt.log(); !strings.Contains(l, `"weights":{"decode_free_pages":2,"decode_queue":1,"prefill_queue":1,"prefix_affinity":2}`) || strings.Contains(l, "DecodeFreePages") {
		t.Errorf("router ready line does not log the weights readably:\n%s", l)
	}
	// Every role's first line says which build it is.
	for _, p := range []*proc{dec, pre, rt} {
		if p.field("starting", "version") == "" || p.field("starting", "revision") == "" || p.field("starting", "role") != p.name {
			t.Errorf("%s: no start line with role, version and revision:\n%s", p.name, p.log())
		}
	}

	cl := openai.NewClient(option.WithBaseURL("http://"+raddr+"/v1/"), option.WithAPIKey("key-b"), option.WithMaxRetries(0))
	r, err := cl.Completions.New(context.Background(), openai.CompletionNewParams{Model: "stories260K",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}, MaxTokens: openai.Int(32), Temperature: openai.Float(0)})
	if err != nil {
		t.Fatalf("%v\nrouter log:\n%s", err, rt.log())
	}
	// ../shared/reference/reference.json, stories260K, "Once upon a time".
	want := ", there was a little girl named Lily. She loved to play outside in the park. One day, she saw"
	if r.Choices[0].Text != want || r.Usage.PromptTokens != 5 || r.Usage.CompletionTokens != 32 {
		t.Fatalf("got %q %+v", r.Choices[0].Text, r.Usage)
	}
	// The tenant came from the key, across the process boundary.
	if !rt.waitLog(`"tenant":"tenant-b"`) {
		t.Fatalf("router did not log tenant-b:\n%s", rt.log())
	}
	// With API keys the router's metrics are on the admin listener only,
	// and name no tenant.
	if resp, err := http.Get("http://" + raddr + "/metrics"); err != nil || resp.StatusCode != 404 {
		t.Fatalf("router /metrics on the API listener: %v %v", err, resp.Status)
	}
	resp, err := http.Get(radmin)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "sluice_prompt_tokens_total 5") || strings.Contains(string(body), "tenant-b") {
		t.Fatalf("router admin metrics:\n%s", body)
	}
	// The router runs no forward pass: no compute threads to count.
	if strings.Contains(string(body), "sluice_compute_class_failures_total") {
		t.Errorf("router metrics count compute threads it does not have")
	}
	// The decode process exports its own pool: all 32 pages free again.
	resp, err = http.Get(maddr)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	// Each role that computes counts the compute threads the OS left
	// out of --compute-priority's class (none here).
	for _, want := range []string{`sluice_kv_pages{role="decode",state="free"} 32`, "\nsluice_compute_class_failures_total 0\n"} {
		if !strings.Contains(string(body), want) {
			t.Fatalf("decode metrics lack %s:\n%s", want, body)
		}
	}
	// The prefill process exports the prompt's first-token phases as it
	// saw them (the router's process has no prefill worker to record
	// them): one request, each phase counted once.
	resp, err = http.Get(pmaddr)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, phase := range []string{"prefill_queue", "prefill_wait", "prefill_compute", "prefill_push"} {
		if want := `sluice_first_token_phase_seconds_count{phase="` + phase + `",role="prefill"} 1`; !strings.Contains(string(body), want) {
			t.Fatalf("prefill metrics lack %s:\n%s", want, body)
		}
	}
	// The prefill process measured its forward pass's fixed cost at
	// start (--nest-forward-cost auto), logged it and exports what its
	// nested budget counts.
	nest := pre.number("nested budget: a forward pass's fixed cost, measured", "tokens")
	if nest < 1 || nest > 256 {
		t.Errorf("prefill measured a fixed cost of %v tokens:\n%s", nest, pre.log())
	}
	if want := fmt.Sprintf(`sluice_nested_forward_cost_tokens{role="prefill"} %v`+"\n", nest); !strings.Contains(string(body), want) {
		t.Errorf("prefill metrics lack %s", want)
	}
	// Its scheduler's counters, as the other roles export theirs (one
	// tenant's one prompt: nothing nested, nothing preempted), and no
	// gateway request counts: its prompts are the router's requests.
	for _, want := range []string{`sluice_nested_steps_total{role="prefill"} 0`, `sluice_preemptions_total{role="prefill"} 0`, "\nsluice_compute_class_failures_total 0"} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("prefill metrics lack %s", want)
		}
	}
	if strings.Contains(string(body), "vllm:num_requests_running") {
		t.Errorf("prefill metrics report gateway request counts:\n%s", body)
	}
	// Graceful shutdown: SIGTERM, exit 0.
	for _, p := range []*proc{rt, pre, dec} {
		if p.cmd.ProcessState != nil {
			continue
		}
		p.cmd.Process.Signal(syscall.SIGTERM)
		if code := p.wait(t); code != 0 {
			t.Fatalf("%s exited %d:\n%s", p.name, code, p.log())
		}
	}
}

// A decode process killed mid-stream: the client's stream ends with an
// error event, never a clean finish, and later requests fail fast (5xx)
// instead of hanging; once decode is back, requests succeed again.
func TestDecodeKilledMidStream(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts three processes")
	}
	model := testenv.Shared(t, "models/stories260K.gguf")
	pool := []string{"--model", model, "--context", "512", "--kv-pool-tokens", "1024"}
	dec := startProc(t, "decode", append(pool, "--listen", "127.0.0.1:0")...)
	daddr := dec.waitAddr(t)
	pre := startProc(t, "prefill", append(pool, "--listen", "127.0.0.1:0", "--decode", daddr, "--metrics-listen", "127.0.0.1:0")...)
	paddr := pre.waitAddr(t)
	pready := strings.TrimSuffix(pre.field("metrics listening", "addr"), "/metrics") + "/ready"
	rt := startProc(t, "router", "--model", model, "--context", "512", "--listen", "127.0.0.1:0", "--prefill", paddr, "--decode", daddr)
	raddr := rt.waitAddr(t)
	cl := openai.NewClient(option.WithBaseURL("http://"+raddr+"/v1/"), option.WithAPIKey("x"), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitStatus(t, "http://"+raddr+"/ready", 200, "router ready with both workers up")
	st := cl.Completions.NewStreaming(ctx, openai.CompletionNewParams{
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}, MaxTokens: openai.Int(500), Temperature: openai.Float(0)},
		option.WithJSONSet("ignore_eos", true))
	if !st.Next() {
		t.Fatalf("no first chunk: %v\n%s", st.Err(), rt.log())
	}
	dec.cmd.Process.Kill()
	finished := false
	for st.Next() {
		if ch := st.Current(); len(ch.Choices) > 0 && ch.Choices[0].FinishReason != "" {
			finished = true
		}
	}
	if finished || st.Err() == nil {
		t.Fatalf("stream after decode died: finished=%v err=%v", finished, st.Err())
	}
	_, err := cl.Completions.New(ctx, openai.CompletionNewParams{
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}, MaxTokens: openai.Int(8)})
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode < 500 || ae.Code == "" {
		t.Fatalf("request after decode died: %v", err)
	}
	dec.wait(t)
	// Readiness follows the dead peer; liveness does not.
	waitStatus(t, "http://"+raddr+"/ready", 503, "router not ready with decode dead")
	waitStatus(t, "http://"+raddr+"/health", 200, "router alive with decode dead")
	waitStatus(t, pready, 503, "prefill not ready with decode dead")

	// A decode worker restarted on the same address is used again: the
	// router and the prefill worker dial it anew; the text is llama.cpp's.
	dec2 := startProc(t, "decode", append(pool, "--listen", daddr)...)
	dec2.waitAddr(t)
	waitStatus(t, "http://"+raddr+"/ready", 200, "router ready again once decode is back")
	waitStatus(t, pready, 200, "prefill ready again once decode is back")
	var r *openai.Completion
	for range 20 {
		r, err = cl.Completions.New(ctx, openai.CompletionNewParams{
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}, MaxTokens: openai.Int(32), Temperature: openai.Float(0)})
		if err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || r.Choices[0].Text != ", there was a little girl named Lily. She loved to play outside in the park. One day, she saw" {
		t.Fatalf("after the decode restart: %v %+v\nrouter:\n%s\nprefill:\n%s", err, r, rt.log(), pre.log())
	}
}

// I2: each role refuses to start on a context larger than its pool, and
// says both numbers and what to change; the router refuses to advertise a
// context that decode does not admit.
func TestRoleRefusesContextLargerThanPool(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts processes")
	}
	model := testenv.Shared(t, "models/stories260K.gguf")
	for _, role := range []string{"decode", "prefill"} {
		args := []string{"--model", model, "--context", "512", "--kv-pool-tokens", "256", "--listen", "127.0.0.1:0"}
		if role == "prefill" {
			args = append(args, "--decode", "127.0.0.1:1")
		}
		p := startProc(t, role, args...)
		if code := p.wait(t); code == 0 {
			t.Fatalf("%s started with a context larger than its pool", role)
		}
		log := p.log()
		for _, want := range []string{"refusing to start", "--context 512", "256 tokens", "--kv-memory", "context_exceeds_kv_pool"} {
			if !strings.Contains(log, want) {
				t.Errorf("%s log lacks %q:\n%s", role, want, log)
			}
		}
	}
	// sluice serve too.
	p := startProc(t, "serve", "--model", model, "--context", "512", "--kv-pool-tokens", "256", "--listen", "127.0.0.1:0")
	if code := p.wait(t); code == 0 || !strings.Contains(p.log(), "refusing to start") {
		t.Fatalf("serve started (exit %d):\n%s", code, p.log())
	}

	// A decode worker whose context is 128 makes a router configured for
	// 256 refuse to start.
	dec := startProc(t, "decode", "--model", model, "--context", "128", "--kv-pool-tokens", "128", "--listen", "127.0.0.1:0")
	daddr := dec.waitAddr(t)
	rt := startProc(t, "router", "--model", model, "--context", "256", "--listen", "127.0.0.1:0", "--prefill", "127.0.0.1:1", "--decode", daddr, "--connect-timeout", "2s")
	if code := rt.wait(t); code == 0 {
		t.Fatalf("router started:\n%s", rt.log())
	}
	if l := rt.log(); !strings.Contains(l, "256") || !strings.Contains(l, "refusing to start") || !strings.Contains(l, "exceed the decode context of 128") {
		t.Fatalf("router log:\n%s", l)
	}
	// With auto the router lowers its context to what decode admits.
	rt = startProc(t, "router", "--model", model, "--listen", "127.0.0.1:0", "--prefill", "127.0.0.1:1", "--decode", daddr, "--connect-timeout", "2s")
	rt.wait(t)
	if l := rt.log(); !strings.Contains(l, "lowered the context from the model's 2048 to 128 tokens") {
		t.Fatalf("router log:\n%s", l)
	}
}

// Preflight as a command: exit 0 when the pool holds the context, 1 with
// the sentence when not.
func TestPreflightCommand(t *testing.T) {
	model := testenv.Shared(t, "models/stories260K.gguf")
	var out, errb strings.Builder
	// stories260K: 5 layers x 4 KV heads x 8 dims x 2 x 2 B = 640 B per
	// token with F16 pages (the default); 16-token pages of 10240 B; 512
	// tokens need 327680 B. With --kv-type f32, twice that.
	if code := runPreflight([]string{"--model", model, "--context", "512", "--kv-memory", "327680"}, &out, &errb); code != 0 {
		t.Fatalf("equal pool: exit %d\n%s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "640 B f16") || !strings.Contains(out.String(), "OK") {
		t.Fatalf("output:\n%s", out.String())
	}
	out.Reset()
	if code := runPreflight([]string{"--model", model, "--context", "512", "--kv-memory", "327680", "--kv-type", "f32"}, &out, &errb); code != 1 {
		t.Fatalf("F32 pages in the F16 pool's bytes: exit %d\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "1280 B f32") || !strings.Contains(out.String(), "256 tokens < context 512") {
		t.Fatalf("output:\n%s", out.String())
	}
	out.Reset()
	code := runPreflight([]string{"--model", model, "--context", "512", "--kv-memory", "327679", "--role", "decode", "--json"}, &out, &errb)
	if code != 1 {
		t.Fatalf("smaller pool: exit %d", code)
	}
	var rep struct {
		OK       bool     `json:"ok"`
		Problems []string `json:"problems"`
		Roles    []struct {
			PoolTokens int `json:"pool_capacity_tokens"`
		} `json:"roles"`
	}
	if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.OK || len(rep.Roles) != 1 || rep.Roles[0].PoolTokens != 496 || !strings.Contains(rep.Problems[0], "decode") {
		t.Fatalf("report %+v", rep)
	}
	// No pool size: the same default as serve and the workers, auto: on
	// any machine with 40 MiB to spare, capped at 64 sequences (the
	// default --max-concurrency) of 512 tokens, 32 pages each.
	out.Reset()
	if code := runPreflight([]string{"--model", model, "--context", "512", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("default pool: exit %d\n%s", code, errb.String())
	}
	var def struct {
		Roles []struct {
			PoolBytes int64  `json:"pool_bytes"`
			Pages     int    `json:"pages"`
			Sizing    string `json:"sizing"`
		} `json:"roles"`
	}
	if err := json.Unmarshal([]byte(out.String()), &def); err != nil {
		t.Fatal(err)
	}
	if len(def.Roles) != 2 || def.Roles[0].Pages != 64*32 || !strings.HasPrefix(def.Roles[0].Sizing, "--kv-memory auto") {
		t.Fatalf("default pool: %+v, want %d pages (--kv-memory %s)\n%s", def, 64*32, defaultKVMemory, out.String())
	}
	if code := runPreflight([]string{"--model", model, "--context", "512", "--kv-memory", "1MiB", "--kv-pool-tokens", "512"}, &out, &errb); code != 2 {
		t.Fatalf("both pool sizes: exit %d", code)
	}
}

// `sluice serve` with no model serves the built-in default model, named as
// such; SIGTERM lets an in-flight streaming request finish, then exits 0.
func TestServeBuiltInAndDrain(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a process")
	}
	p := startProc(t, "serve", "--listen", "127.0.0.1:0", "--kv-memory", "8MiB")
	addr := p.waitAddr(t)
	cl := openai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey("x"), option.WithMaxRetries(0))
	ctx := context.Background()
	page, err := cl.Models.List(ctx)
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != "sluice-default-synthetic" {
		t.Fatalf("models: %v %+v", err, page)
	}
	if !strings.Contains(p.log(), "built-in default model") {
		t.Fatalf("start-up log does not name the built-in model:\n%s", p.log())
	}
	// serve computes: its /metrics (on the API listener, no keys) counts
	// the compute threads the OS left out of --compute-priority's class.
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "\nsluice_compute_class_failures_total 0\n") {
		t.Errorf("serve metrics lack sluice_compute_class_failures_total:\n%s", body)
	}
	st := cl.Completions.NewStreaming(ctx, openai.CompletionNewParams{
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hello")}, MaxTokens: openai.Int(2000), Temperature: openai.Float(0)},
		option.WithJSONSet("ignore_eos", true)) // long enough to be in flight at SIGTERM
	if !st.Next() {
		t.Fatalf("no first chunk: %v", st.Err())
	}
	// The request is in flight: ask the server to stop.
	p.cmd.Process.Signal(syscall.SIGTERM)
	finish := ""
	for st.Next() {
		if ch := st.Current(); len(ch.Choices) > 0 && ch.Choices[0].FinishReason != "" {
			finish = string(ch.Choices[0].FinishReason)
		}
	}
	if st.Err() != nil || finish == "" {
		t.Fatalf("in-flight request did not finish cleanly across SIGTERM: finish %q err %v\n%s", finish, st.Err(), p.log())
	}
	if code := p.wait(t); code != 0 {
		t.Fatalf("serve exited %d:\n%s", code, p.log())
	}
	// The drain began before the request ended.
	if l := p.log(); !strings.Contains(l, "draining") || strings.Index(l, "draining") > strings.Index(l, `"msg":"request"`) {
		t.Fatalf("no drain in the log:\n%s", p.log())
	}
}

// Issue 30 item 3: I2 on every role. A prefill worker whose context (64)
// is below decode's (256): the router vets prefill workers as it vets
// decode workers. With --context auto it lowers its context to 64 and
// says which role set it, so /v1/models advertises 64 and a 171-token
// prompt gets 400 context_length_exceeded (before: 256 advertised, and a
// 502 handoff_failed blamed on decode after decode's pages were
// reserved); with --context 256 it refuses to start, naming the prefill
// worker.
func TestRouterVetsPrefillContext(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts processes")
	}
	model := testenv.Shared(t, "models/stories260K.gguf")
	dec := startProc(t, "decode", "--model", model, "--context", "256", "--kv-pool-tokens", "256", "--listen", "127.0.0.1:0")
	daddr := dec.waitAddr(t)
	pre := startProc(t, "prefill", "--model", model, "--context", "64", "--kv-pool-tokens", "64", "--listen", "127.0.0.1:0", "--decode", daddr)
	paddr := pre.waitAddr(t)

	rt := startProc(t, "router", "--model", model, "--context", "256", "--listen", "127.0.0.1:0", "--prefill", paddr, "--decode", daddr, "--connect-timeout", "5s")
	if code := rt.wait(t); code == 0 {
		t.Fatalf("router started with a context the prefill worker does not admit:\n%s", rt.log())
	}
	if l := rt.log(); !strings.Contains(l, "refusing to start") || !strings.Contains(l, "prefill worker at "+paddr) || !strings.Contains(l, "context of 64 tokens") {
		t.Fatalf("router log does not name the prefill worker's context:\n%s", l)
	}

	rt = startProc(t, "router", "--model", model, "--context", "auto", "--listen", "127.0.0.1:0", "--prefill", paddr, "--decode", daddr, "--connect-timeout", "5s")
	raddr := rt.waitAddr(t)
	if l := rt.log(); !strings.Contains(l, "to 64 tokens, the most the prefill worker "+paddr+" admits") {
		t.Fatalf("router log:\n%s", l)
	}
	resp, err := http.Get("http://" + raddr + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"context_length":64`) {
		t.Fatalf("/v1/models: %s", body)
	}
	cl := openai.NewClient(option.WithBaseURL("http://"+raddr+"/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	_, err = cl.Completions.New(context.Background(), openai.CompletionNewParams{Model: "stories260K",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(strings.Repeat("Once upon a time. ", 34))}, MaxTokens: openai.Int(4)})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "context_length_exceeded" {
		t.Fatalf("a prompt longer than the prefill context: %v, want 400 context_length_exceeded\nrouter log:\n%s", err, rt.log())
	}
	rt.stop(t)
}
