package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
)

// completionRequest is POST /v1/completions. Polymorphic fields stay raw
// until validated so a type error names its parameter.
type completionRequest struct {
	Model  string          `json:"model"`
	Prompt json.RawMessage `json:"prompt"`
	commonParams
}

// chatRequest is POST /v1/chat/completions.
type chatRequest struct {
	Model               string          `json:"model"`
	Messages            json.RawMessage `json:"messages"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Tools               json.RawMessage `json:"tools"`
	commonParams
}

type commonParams struct {
	MaxTokens     *int            `json:"max_tokens"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int            `json:"top_k"`
	Seed          *int64          `json:"seed"`
	Stop          json.RawMessage `json:"stop"`
	N             *int            `json:"n"`
	Stream        bool            `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Logprobs json.RawMessage `json:"logprobs"`
	Echo     bool            `json:"echo"`
	BestOf   *int            `json:"best_of"`
	// IgnoreEOS (vLLM's extension) generates max_tokens tokens even past
	// end-of-sequence; for benchmarks.
	IgnoreEOS bool `json:"ignore_eos"`
	// PromptCacheKey (OpenAI) and CacheSalt (vLLM) only narrow prefix-cache
	// sharing within the caller's tenant (engine.Request.CacheScope); the
	// tenant's own salt is derived by the server, so neither can reach
	// another tenant's cache (I11).
	PromptCacheKey *string `json:"prompt_cache_key"`
	CacheSalt      *string `json:"cache_salt"`
}

// decodeBody reads a JSON object into v, mapping every failure onto the
// parameter it concerns. The body is already bounded by MaxBytesReader.
func decodeBody(r io.Reader, v any) *apiError {
	data, err := io.ReadAll(r)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return newErr(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "", "the request body exceeds the server's limit of %d bytes", mbe.Limit)
		}
		return newErr(http.StatusBadRequest, CodeInvalidJSON, "", "the request body could not be read: %v", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return newErr(http.StatusBadRequest, CodeInvalidJSON, "", "the request body is empty; send a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			param := strings.TrimPrefix(te.Field, "commonParams.")
			if param == "" {
				return newErr(http.StatusBadRequest, CodeInvalidJSON, "", "the request body must be a JSON object, not a JSON %s", te.Value)
			}
			return badParam(param, "%s must be of type %s, not a JSON %s", param, jsonType(te.Type.String()), te.Value)
		}
		return newErr(http.StatusBadRequest, CodeInvalidJSON, "", "the request body is not valid JSON: %v", err)
	}
	if dec.More() {
		return newErr(http.StatusBadRequest, CodeInvalidJSON, "", "the request body holds more than one JSON value")
	}
	return nil
}

func jsonType(goType string) string {
	switch {
	case strings.Contains(goType, "int"):
		return "integer"
	case strings.Contains(goType, "float"):
		return "number"
	case strings.Contains(goType, "bool"):
		return "boolean"
	case strings.Contains(goType, "string"):
		return "string"
	}
	return goType
}

// params is a validated set of generation parameters.
type params struct {
	maxTokens    int // 0 = not given
	temperature  float64
	topP         float64
	topK         int
	seed         uint64
	seedGiven    bool
	stop         []string
	stream       bool
	includeUsage bool
	ignoreEOS    bool
	cacheScope   string
}

const maxStops = 16

func (c *commonParams) validate(maxTokensParam string, maxTokens *int) (params, *apiError) {
	var p params
	if maxTokens == nil {
		maxTokens = c.MaxTokens
		maxTokensParam = "max_tokens"
	}
	if maxTokens != nil {
		if *maxTokens < 1 {
			return p, badParam(maxTokensParam, "%s must be at least 1, got %d", maxTokensParam, *maxTokens)
		}
		p.maxTokens = *maxTokens
	}
	p.temperature = 1
	if c.Temperature != nil {
		t := *c.Temperature
		if math.IsNaN(t) || t < 0 || t > 2 {
			return p, badParam("temperature", "temperature must be between 0 and 2, got %v", t)
		}
		p.temperature = t
	}
	p.topP = 1
	if c.TopP != nil {
		t := *c.TopP
		if math.IsNaN(t) || t <= 0 || t > 1 {
			return p, badParam("top_p", "top_p must be greater than 0 and at most 1, got %v", t)
		}
		p.topP = t
	}
	if c.TopK != nil {
		if *c.TopK < 0 {
			return p, badParam("top_k", "top_k must be 0 (no limit) or positive, got %d", *c.TopK)
		}
		p.topK = *c.TopK
	}
	if c.Seed != nil {
		p.seed, p.seedGiven = uint64(*c.Seed), true
	}
	if c.N != nil && *c.N != 1 {
		return p, badParam("n", "n must be 1: this server generates one choice per request, got %d", *c.N)
	}
	if c.BestOf != nil && *c.BestOf != 1 {
		return p, newErr(http.StatusBadRequest, CodeUnsupported, "best_of", "best_of is not supported; omit it or set it to 1")
	}
	if c.Echo {
		return p, newErr(http.StatusBadRequest, CodeUnsupported, "echo", "echo is not supported")
	}
	if l := bytes.TrimSpace(c.Logprobs); len(l) > 0 && !bytes.Equal(l, []byte("null")) && !bytes.Equal(l, []byte("false")) {
		return p, newErr(http.StatusBadRequest, CodeUnsupported, "logprobs", "logprobs are not supported")
	}
	stops, e := parseStop(c.Stop)
	if e != nil {
		return p, e
	}
	p.stop = stops
	p.stream = c.Stream
	p.ignoreEOS = c.IgnoreEOS
	scope, e := cacheScope(c.PromptCacheKey, c.CacheSalt)
	if e != nil {
		return p, e
	}
	p.cacheScope = scope
	if c.StreamOptions != nil {
		if !c.Stream {
			return p, badParam("stream_options", "stream_options is only allowed when stream is true")
		}
		p.includeUsage = c.StreamOptions.IncludeUsage
	}
	return p, nil
}

// maxCacheScope bounds prompt_cache_key and cache_salt.
const maxCacheScope = 256

// cacheScope joins prompt_cache_key and cache_salt into one narrowing
// scope, length-prefixed so that no pair of values can spell another pair.
func cacheScope(key, salt *string) (string, *apiError) {
	var b strings.Builder
	for _, f := range []struct {
		name string
		v    *string
	}{{"prompt_cache_key", key}, {"cache_salt", salt}} {
		if f.v == nil || *f.v == "" {
			continue
		}
		if len(*f.v) > maxCacheScope {
			return "", badParam(f.name, "%s is %d bytes; at most %d are allowed", f.name, len(*f.v), maxCacheScope)
		}
		fmt.Fprintf(&b, "%s:%d:%s;", f.name, len(*f.v), *f.v)
	}
	return b.String(), nil
}

func parseStop(raw json.RawMessage) ([]string, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		if one == "" {
			return nil, nil
		}
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, badParam("stop", "stop must be a string or an array of strings")
	}
	if len(many) > maxStops {
		return nil, badParam("stop", "stop holds %d strings; at most %d are allowed", len(many), maxStops)
	}
	out := many[:0]
	for _, s := range many {
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// promptInput is a completions prompt: text, or token ids.
type promptInput struct {
	text   string
	tokens []int32
	isText bool
}

func parsePrompt(raw json.RawMessage, vocab int) (promptInput, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return promptInput{}, newErr(http.StatusBadRequest, CodeMissingParam, "prompt", "prompt is required")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return promptInput{text: s, isText: true}, nil
	}
	var ss []string
	if err := json.Unmarshal(raw, &ss); err == nil {
		if len(ss) != 1 {
			return promptInput{}, badParam("prompt", "prompt must hold exactly one string (batches are not supported), got %d", len(ss))
		}
		return promptInput{text: ss[0], isText: true}, nil
	}
	var ids []int64
	if err := json.Unmarshal(raw, &ids); err == nil {
		return tokenPrompt(ids, vocab)
	}
	var idss [][]int64
	if err := json.Unmarshal(raw, &idss); err == nil {
		if len(idss) != 1 {
			return promptInput{}, badParam("prompt", "prompt must hold exactly one token list (batches are not supported), got %d", len(idss))
		}
		return tokenPrompt(idss[0], vocab)
	}
	return promptInput{}, badParam("prompt", "prompt must be a string, an array of one string, or an array of token ids")
}

func tokenPrompt(ids []int64, vocab int) (promptInput, *apiError) {
	if len(ids) == 0 {
		return promptInput{}, badParam("prompt", "prompt holds no tokens")
	}
	out := make([]int32, len(ids))
	for i, id := range ids {
		if id < 0 || (vocab > 0 && id >= int64(vocab)) {
			return promptInput{}, badParam("prompt", "prompt token %d at index %d is outside the vocabulary [0, %d)", id, i, vocab)
		}
		out[i] = int32(id)
	}
	return promptInput{tokens: out}, nil
}

// parseMessages reads chat messages; content is a string or an array of
// text parts.
func parseMessages(raw json.RawMessage) ([]ChatMessage, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, newErr(http.StatusBadRequest, CodeMissingParam, "messages", "messages is required")
	}
	var msgs []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return nil, badParam("messages", "messages must be an array of {role, content} objects")
	}
	if len(msgs) == 0 {
		return nil, badParam("messages", "messages must hold at least one message")
	}
	out := make([]ChatMessage, len(msgs))
	for i, m := range msgs {
		switch m.Role {
		case "system", "developer", "user", "assistant":
		case "":
			return nil, badParam(fmt.Sprintf("messages[%d].role", i), "messages[%d].role is required", i)
		default:
			return nil, badParam(fmt.Sprintf("messages[%d].role", i), "messages[%d].role %q is not supported; use system, developer, user or assistant", i, m.Role)
		}
		role := m.Role
		if role == "developer" {
			// OpenAI's newer name for the system role; templates know "system".
			role = "system"
		}
		content, e := parseContent(m.Content, i)
		if e != nil {
			return nil, e
		}
		out[i] = ChatMessage{Role: role, Content: content}
	}
	return out, nil
}

func parseContent(raw json.RawMessage, i int) (string, *apiError) {
	param := fmt.Sprintf("messages[%d].content", i)
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badParam(param, "%s must be a string or an array of text parts", param)
	}
	var b strings.Builder
	for j, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return "", newErr(http.StatusBadRequest, CodeUnsupported, param, "%s[%d] has type %q; only text parts are supported", param, j, p.Type)
		}
		b.WriteString(*p.Text)
	}
	return b.String(), nil
}

// Response shapes, as OpenAI sends them.

type usageJSON struct {
	PromptTokens        int                `json:"prompt_tokens"`
	CompletionTokens    int                `json:"completion_tokens"`
	TotalTokens         int                `json:"total_tokens"`
	PromptTokensDetails promptTokenDetails `json:"prompt_tokens_details"`
}

// promptTokenDetails is OpenAI's usage.prompt_tokens_details: how many of
// prompt_tokens were read from the prefix cache instead of computed.
type promptTokenDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

type completionChoice struct {
	Text         string  `json:"text"`
	Index        int     `json:"index"`
	Logprobs     *string `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

type completionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *usageJSON         `json:"usage,omitempty"`
}

type chatMessageJSON struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatChoice struct {
	Index        int             `json:"index"`
	Message      chatMessageJSON `json:"message"`
	Logprobs     *string         `json:"logprobs"`
	FinishReason string          `json:"finish_reason"`
}

type chatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   usageJSON    `json:"usage"`
}

type chatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type chatChunkChoice struct {
	Index        int       `json:"index"`
	Delta        chatDelta `json:"delta"`
	Logprobs     *string   `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

// chatChunk's Usage is null on every chunk but the last when the client
// asked for usage, and absent otherwise, as OpenAI does.
type chatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []chatChunkChoice `json:"choices"`
	Usage   *usageJSON        `json:"usage,omitempty"`
}
