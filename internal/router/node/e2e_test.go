package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.uber.org/goleak"

	"sluice/internal/gguf"
	"sluice/internal/preflight"
	"sluice/internal/router"
	"sluice/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type refCase struct {
	Prompt        string  `json:"prompt"`
	PromptIDs     []int32 `json:"prompt_token_ids"`
	GeneratedIDs  []int32 `json:"generated_token_ids"`
	GeneratedText string  `json:"generated_text"`
}

// storiesRefs reads llama.cpp's greedy outputs for stories260K.
func storiesRefs(t testing.TB) []refCase {
	t.Helper()
	data, err := os.ReadFile(testenv.Shared(t, "reference/reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Models []struct {
			File  string    `json:"file"`
			Cases []refCase `json:"cases"`
		} `json:"models"`
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	for _, m := range ref.Models {
		if m.File == "stories260K.gguf" {
			return m.Cases
		}
	}
	t.Fatal("no stories260K cases in reference.json")
	return nil
}

func loadStories(t testing.TB) *Model {
	t.Helper()
	m, err := LoadModel(testenv.Shared(t, "models/stories260K.gguf"), gguf.MemoryAuto)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

type served struct {
	stack  *Stack
	ts     *httptest.Server
	client *openai.Client
}

func serve(t testing.TB, m *Model, c LocalConfig, keys *router.Keys) *served {
	t.Helper()
	st, err := BuildLocal(m, c)
	if err != nil {
		t.Fatal(err)
	}
	ct, err := m.ChatTemplate()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := router.New(router.Config{Engine: st.Engine, Tokenizer: m.Tokenizer(), Chat: ct, BOSText: m.BOSText(),
		Keys: keys, MaxConcurrency: 256, Stats: st.Stats, Info: st.Info})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ts.Close()
		if err := st.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	cl := openai.NewClient(option.WithBaseURL(ts.URL+"/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	return &served{stack: st, ts: ts, client: &cl}
}

// The whole path on a real model: HTTP -> tokenizer -> engine (each
// transport, and colocated) -> detokenizer, compared with llama.cpp's
// greedy text.
func TestStoriesMatchesLlamaCpp(t *testing.T) {
	m := loadStories(t)
	refs := storiesRefs(t)
	for _, mode := range []LocalConfig{
		{Colocated: true},
		{Transport: TransportInproc},
		{Transport: TransportTCP},
		{Transport: TransportSHM},
	} {
		name := mode.Transport
		if mode.Colocated {
			name = "colocated"
		}
		t.Run(name, func(t *testing.T) {
			mode.Pools = Pools{Context: 256, PoolTokens: 1024}
			s := serve(t, m, mode, nil)
			ctx := context.Background()
			for _, rc := range refs {
				r, err := s.client.Completions.New(ctx, openai.CompletionNewParams{Model: "stories260K",
					Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(rc.Prompt)}, MaxTokens: openai.Int(32), Temperature: openai.Float(0)})
				if err != nil {
					t.Fatal(err)
				}
				if r.Choices[0].Text != rc.GeneratedText || r.Choices[0].FinishReason != "length" {
					t.Fatalf("%q:\n got  %q\n want %q", rc.Prompt, r.Choices[0].Text, rc.GeneratedText)
				}
				// I9: the prompt tokens llama.cpp counted (BOS included).
				if r.Usage.PromptTokens != int64(len(rc.PromptIDs)) || r.Usage.CompletionTokens != 32 {
					t.Fatalf("usage %+v, want %d prompt tokens", r.Usage, len(rc.PromptIDs))
				}
			}
			// A stop string cuts the reference text before it, whatever the
			// engine does with the cancel that follows.
			r, err := s.client.Completions.New(ctx, openai.CompletionNewParams{
				Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(refs[0].Prompt)}, MaxTokens: openai.Int(32), Temperature: openai.Float(0),
				Stop: openai.CompletionNewParamsStopUnion{OfString: openai.String("Lily")}})
			if err != nil || r.Choices[0].Text != ", there was a little girl named " || r.Choices[0].FinishReason != "stop" {
				t.Fatalf("stop: %v %+v", err, r)
			}
			// Streaming gives the same text.
			st := s.client.Completions.NewStreaming(ctx, openai.CompletionNewParams{
				Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(refs[0].Prompt)}, MaxTokens: openai.Int(32), Temperature: openai.Float(0)})
			var b strings.Builder
			for st.Next() {
				if ch := st.Current(); len(ch.Choices) > 0 {
					b.WriteString(ch.Choices[0].Text)
				}
			}
			if st.Err() != nil || b.String() != refs[0].GeneratedText {
				t.Fatalf("stream %q, %v", b.String(), st.Err())
			}
			// Over-capacity prompts are refused with a 400 before any page
			// is touched (I2), and every pool is whole again.
			_, err = s.client.Completions.New(ctx, openai.CompletionNewParams{
				Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(strings.Repeat("Once upon a time ", 80))}, MaxTokens: openai.Int(8)})
			var ae *openai.Error
			if !errors.As(err, &ae) || ae.StatusCode != 400 || ae.Code != router.CodeContextLength {
				t.Fatalf("over-capacity: %v", err)
			}
			for role, p := range s.stack.Pools {
				if st := p.Stats(); st.Free != st.Pages {
					t.Fatalf("%s pool not free after the requests: %+v", role, st)
				}
			}
			// The metrics read the roles' own counters.
			es := s.stack.Stats()
			if !mode.Colocated && (es.Handoffs != uint64(len(refs)+2) || es.HandoffBytes == 0 || es.HandoffSeconds <= 0) {
				t.Fatalf("handoff metrics: %d handoffs (want %d), %d bytes, %v s", es.Handoffs, len(refs)+2, es.HandoffBytes, es.HandoffSeconds)
			}
			resp, err := http.Get(s.ts.URL + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			role := "decode"
			if mode.Colocated {
				role = "colocated"
			}
			if want := fmt.Sprintf(`sluice_kv_pages{role=%q,state="free"} 64`, role); !strings.Contains(string(body), want) {
				t.Fatalf("metrics lack %s:\n%s", want, body)
			}
		})
	}
}

func TestChatOnStories(t *testing.T) {
	m := loadStories(t)
	s := serve(t, m, LocalConfig{Pools: Pools{Context: 256, PoolTokens: 512}, Transport: TransportInproc}, nil)
	r, err := s.client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me a story")}, MaxCompletionTokens: openai.Int(16), Temperature: openai.Float(0)})
	if err != nil {
		t.Fatal(err)
	}
	// stories260K has no chat template: the fallback renders
	// "User: Tell me a story\nAssistant:"; its tokens (with BOS) are what
	// the encoder gives for that text.
	want := len(m.Tok.Encode("User: Tell me a story\nAssistant:", true, true))
	if r.Usage.PromptTokens != int64(want) || r.Usage.CompletionTokens == 0 || r.Choices[0].Message.Content == "" {
		t.Fatalf("got %+v (want %d prompt tokens)", r, want)
	}
}

func TestBuiltInDefaultModel(t *testing.T) {
	m, err := LoadModel("", gguf.MemoryAuto)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !m.BuiltIn || m.Name != BuiltInName {
		t.Fatalf("built-in model named %q", m.Name)
	}
	s := serve(t, m, LocalConfig{Pools: Pools{Context: 128, PoolTokens: 256}}, nil)
	page, err := s.client.Models.List(context.Background())
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != BuiltInName {
		t.Fatalf("models: %v %+v", err, page)
	}
	r, err := s.client.Completions.New(context.Background(), openai.CompletionNewParams{
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hello")}, MaxTokens: openai.Int(8), Temperature: openai.Float(0)})
	if err != nil || r.Usage.CompletionTokens == 0 {
		t.Fatalf("%v %+v", err, r)
	}
}

// Remote preflight against a running sluice reads the server's own figures
// (advertised context, every role's pool) and finds them consistent.
func TestRemotePreflightOfServe(t *testing.T) {
	m := loadStories(t)
	s := serve(t, m, LocalConfig{Pools: Pools{Context: 200, PoolTokens: 300}}, nil)
	rep, err := preflight.Remote(context.Background(), s.ts.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Server != "sluice" || !rep.OK() {
		var b strings.Builder
		rep.WriteText(&b)
		t.Fatalf("remote preflight:\n%s", b.String())
	}
	var b strings.Builder
	rep.WriteText(&b)
	// 300 tokens round up to 19 pages of 16 = 304 per role; context 200.
	for _, want := range []string{"304", "200"} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("report lacks %s:\n%s", want, b.String())
		}
	}
}

// I2: a process whose context exceeds a role's pool does not start.
func TestRefusesContextLargerThanPool(t *testing.T) {
	m := loadStories(t)
	_, err := BuildLocal(m, LocalConfig{Pools: Pools{Context: 512, PoolTokens: 256}})
	pe, ok := IsPreflight(err)
	if !ok {
		t.Fatalf("want a preflight refusal, got %v", err)
	}
	msg := pe.Error()
	for _, want := range []string{"512", "256", "--kv-memory", "prefill", "decode"} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal %q lacks %q", msg, want)
		}
	}
	// auto lowers it instead.
	st, err := BuildLocal(m, LocalConfig{Pools: Pools{PoolTokens: 256}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	if c := st.Engine.Info().Context; c != 256 {
		t.Fatalf("auto context %d, want 256", c)
	}
}
