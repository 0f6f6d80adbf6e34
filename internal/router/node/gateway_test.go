package node

import (
	"context"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"sluice/internal/router"
)

// samples parses a text exposition into "name{labels}" -> value.
func samples(body string) map[string]float64 {
	out := map[string]float64{}
	for _, l := range strings.Split(body, "\n") {
		if l == "" || l[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if v, err := strconv.ParseFloat(l[i+1:], 64); err == nil {
			out[l[:i]] = v
		}
	}
	return out
}

// sum adds every sample of name whose labels contain all of labels.
func sum(s map[string]float64, name string, labels ...string) float64 {
	t := 0.0
	for k, v := range s {
		if k != name && !strings.HasPrefix(k, name+"{") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(k, l)
		}
		if ok {
			t += v
		}
	}
	return t
}

// The gateway names (vLLM's, SGLang's), scraped while requests queue and
// run, agree in every scrape with sluice's own gauges from the same
// snapshot, carry the served model's name and no tenant's.
func TestGatewayMetricsUnderLoad(t *testing.T) {
	m := loadStories(t)
	keys, err := router.ParseKeys(strings.NewReader("key-a acme-corp\nkey-b globex-inc\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := serve(t, m, LocalConfig{Transport: TransportTCP, Pools: Pools{Context: 512, PoolTokens: 2048, PageSize: 16},
		MaxConcurrency: 2, MaxQueue: 32, PrefixCache: true,
		// The queue's timeout (30 s by default) is not what this checks:
		// under -race on a loaded machine the last of the 8 requests of
		// 400 tokens waited longer than that for KV room (503
		// queue_timeout). They wait until served.
		QueueTimeout: 10 * time.Minute}, keys)
	prompt := strings.Repeat("Once upon a time there was a little girl who liked to play. ", 3)
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := []string{"key-a", "key-b"}[i%2]
			_, err := s.client.Completions.New(context.Background(), openai.CompletionNewParams{
				Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)}, MaxTokens: openai.Int(400)},
				option.WithAPIKey(key), option.WithJSONSet("ignore_eos", true))
			errs <- err
		}()
	}
	model := `model_name="stories260K"`
	sawLoad := false
	check := func(body string) {
		t.Helper()
		sm := samples(body)
		eq := func(what string, got, want float64) {
			t.Helper()
			if math.Abs(got-want) > 1e-9 {
				t.Errorf("%s = %v, sluice's own say %v\n%s", what, got, want, grepLines(body, "vllm:")+"\n"+grepLines(body, "sluice_kv_pages")+"\n"+grepLines(body, "sluice_queue"))
			}
		}
		waiting, running := sum(sm, "sluice_queue_waiting"), sum(sm, "sluice_queue_running")
		eq("vllm:num_requests_waiting", sum(sm, "vllm:num_requests_waiting", model), waiting)
		eq("vllm:num_requests_running", sum(sm, "vllm:num_requests_running", model), running)
		eq("sglang:num_queue_reqs", sum(sm, "sglang:num_queue_reqs", model), waiting)
		eq("sglang:num_running_reqs", sum(sm, "sglang:num_running_reqs", model), running)
		pages := sum(sm, "sluice_kv_pages", `role="decode"`)
		used := pages - sum(sm, "sluice_kv_pages", `role="decode"`, `state="free"`) - sum(sm, "sluice_prefix_cache_pages", `role="decode"`, `state="idle"`)
		eq("vllm:kv_cache_usage_perc", sum(sm, "vllm:kv_cache_usage_perc", model), used/pages)
		eq("sglang:token_usage", sum(sm, "sglang:token_usage", model), used/pages)
		eq("vllm:cache_config_info", sum(sm, "vllm:cache_config_info", model, `block_size="16"`, `num_gpu_blocks="`+strconv.Itoa(int(pages))+`"`), 1)
		eq("sglang:cache_config_info", sum(sm, "sglang:cache_config_info", model, `page_size="16"`, `num_pages="`+strconv.Itoa(int(pages))+`"`), 1)
		hits := sum(sm, "sluice_prefix_cache_tokens_total", `result="hit"`)
		eq("vllm:prefix_cache_hits_total", sum(sm, "vllm:prefix_cache_hits_total", model), hits)
		eq("vllm:prefix_cache_queries_total", sum(sm, "vllm:prefix_cache_queries_total", model), hits+sum(sm, "sluice_prefix_cache_tokens_total", `result="miss"`))
		for _, l := range strings.Split(body, "\n") {
			if (strings.HasPrefix(l, "vllm:") || strings.HasPrefix(l, "sglang:")) && (strings.Contains(l, "acme") || strings.Contains(l, "globex")) {
				t.Errorf("a tenant name in %s", l)
			}
		}
		if waiting > 0 && running > 0 && used > 0 {
			sawLoad = true
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for !sawLoad && time.Now().Before(deadline) && !t.Failed() {
		check(scrape(t, s.ts.URL))
		time.Sleep(5 * time.Millisecond)
	}
	if !sawLoad {
		t.Error("no scrape saw requests waiting and running with KV in use")
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	body := scrape(t, s.ts.URL)
	check(body)
	sm := samples(body)
	if got := sum(sm, "vllm:e2e_request_latency_seconds_count", model); got != n {
		t.Errorf("vllm:e2e_request_latency_seconds_count = %v, want %d", got, n)
	}
	if got := sum(sm, "sluice_e2e_request_latency_seconds_count"); got != n {
		t.Errorf("sluice_e2e_request_latency_seconds_count = %v, want %d", got, n)
	}
	if got, want := sum(sm, "vllm:generation_tokens_total", model), sum(sm, "sluice_completion_tokens_total"); got != want || got != n*400 {
		t.Errorf("vllm:generation_tokens_total = %v, sluice_completion_tokens_total %v, want %d", got, want, n*400)
	}
	if sum(sm, "vllm:prefix_cache_hits_total", model) == 0 {
		t.Error("8 requests of one prompt in two tenants hit no cached page")
	}
	if !strings.Contains(body, "# HELP vllm:num_requests_waiting vLLM's name") {
		t.Error("help text does not say which names are vLLM's")
	}
}
