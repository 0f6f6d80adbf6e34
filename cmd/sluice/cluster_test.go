package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"sluice/internal/testenv"
)

// The cluster as separate processes on loopback: 2 decode and 2 prefill
// workers (each prefill worker connected to both decode workers), one
// router over all four. Every greedy output equals llama.cpp's reference,
// both decode workers take requests (the router's metrics say so), and
// after one decode process is killed requests still succeed on the other.
func TestClusterAsProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts five processes")
	}
	model := testenv.Shared(t, "models/stories260K.gguf")
	pool := []string{"--model", model, "--context", "256", "--kv-pool-tokens", "512"}
	var daddrs, paddrs []string
	var decs []*proc
	for range 2 {
		d := startProc(t, "decode", append(pool, "--listen", "127.0.0.1:0")...)
		daddrs = append(daddrs, d.waitAddr(t))
		decs = append(decs, d)
	}
	for range 2 {
		p := startProc(t, "prefill", append(pool, "--listen", "127.0.0.1:0", "--decode", strings.Join(daddrs, ","))...)
		paddrs = append(paddrs, p.waitAddr(t))
	}
	rt := startProc(t, "router", "--model", model, "--context", "256", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--prefill", strings.Join(paddrs, ","), "--decode", strings.Join(daddrs, ","), "--probe-interval", "200ms")
	raddr := rt.waitAddr(t)
	cl := openai.NewClient(option.WithBaseURL("http://"+raddr+"/v1/"), option.WithMaxRetries(0))
	// ../shared/reference/reference.json, stories260K, "Once upon a time".
	want := ", there was a little girl named Lily. She loved to play outside in the park. One day, she saw"
	ask := func(i int) {
		t.Helper()
		r, err := cl.Completions.New(context.Background(), openai.CompletionNewParams{Model: "stories260K",
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}, MaxTokens: openai.Int(32), Temperature: openai.Float(0)})
		if err != nil {
			t.Fatalf("request %d: %v\nrouter log:\n%s", i, err, rt.log())
		}
		if r.Choices[0].Text != want {
			t.Fatalf("request %d: %q", i, r.Choices[0].Text)
		}
	}
	for i := range 12 {
		ask(i)
	}
	admin := rt.field("metrics listening", "addr")
	body := get(t, admin)
	for _, d := range daddrs {
		if strings.Contains(body, `sluice_cluster_picks_total{role="decode",worker="`+d+`"} 0`) || !strings.Contains(body, `worker="`+d+`"`) {
			t.Fatalf("decode worker %s took no request:\n%s", d, body)
		}
	}
	decs[0].cmd.Process.Kill()
	decs[0].wait(t)
	for i := range 12 {
		ask(100 + i)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
