package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"sluice/internal/sample"
)

// completionRequest is POST /v1/completions. Polymorphic fields stay raw
// until validated so a type error names its parameter.
type completionRequest struct {
	Model    string          `json:"model"`
	Prompt   json.RawMessage `json:"prompt"`
	Echo     bool            `json:"echo"`
	BestOf   *int            `json:"best_of"`
	Suffix   json.RawMessage `json:"suffix"`
	Logprobs json.RawMessage `json:"logprobs"` // integer 0..20 (legacy)
	commonParams
}

// chatRequest is POST /v1/chat/completions.
type chatRequest struct {
	Model               string          `json:"model"`
	Messages            json.RawMessage `json:"messages"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Logprobs            json.RawMessage `json:"logprobs"` // boolean
	TopLogprobs         *int            `json:"top_logprobs"`
	Tools               json.RawMessage `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	Functions           json.RawMessage `json:"functions"`
	FunctionCall        json.RawMessage `json:"function_call"`
	ParallelToolCalls   *bool           `json:"parallel_tool_calls"`
	ResponseFormat      json.RawMessage `json:"response_format"`
	// ChatTemplateKwargs (vLLM's) are extra chat template variables
	// (parseTemplateKwargs).
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs"`
	// ReasoningEffort goes to a chat template that reads it
	// (Server.chatText).
	ReasoningEffort *string `json:"reasoning_effort"`
	// Fields OpenAI clients send beside the sampling parameters
	// (checkClientFields): accepted where they change nothing here,
	// refused naming them where they would.
	Store            *bool           `json:"store"`
	Metadata         json.RawMessage `json:"metadata"`
	ServiceTier      *string         `json:"service_tier"`
	SafetyIdentifier *string         `json:"safety_identifier"`
	Prediction       json.RawMessage `json:"prediction"`
	Modalities       []string        `json:"modalities"`
	Audio            json.RawMessage `json:"audio"`
	WebSearchOptions json.RawMessage `json:"web_search_options"`
	commonParams
}

// OpenAI's bounds of metadata.
const (
	maxMetadataKeys     = 16
	maxMetadataKeyLen   = 64
	maxMetadataValueLen = 512
)

// reasoningEfforts are OpenAI's values of reasoning_effort.
var reasoningEfforts = []string{"none", "minimal", "low", "medium", "high", "xhigh"}

// checkClientFields checks the chat fields that OpenAI clients and agent
// frameworks send beside the sampling parameters. What changes nothing
// here is accepted: store false (nothing is stored anyway), metadata (a
// label of a stored completion), service_tier auto/default (there is one
// tier), safety_identifier (like user), prediction (predicted outputs only
// make OpenAI faster; the output is the model's either way), text-only
// modalities, null audio and web_search_options. What would change what is
// done or returned is refused naming the field, never dropped.
func (c *chatRequest) checkClientFields() *apiError {
	if c.Store != nil && *c.Store {
		return unsupported("store", "store: true asks to keep the completion for later retrieval, which this server does not do; send store: false or leave it out")
	}
	if !isNull(c.Metadata) {
		var m map[string]json.RawMessage
		if json.Unmarshal(c.Metadata, &m) != nil {
			return badParam("metadata", "metadata must be an object of string values")
		}
		if len(m) > maxMetadataKeys {
			return badParam("metadata", "metadata has %d keys; at most %d are allowed", len(m), maxMetadataKeys)
		}
		for k, raw := range m {
			var v string
			if isNull(raw) || json.Unmarshal(raw, &v) != nil {
				return badParam("metadata", "metadata values must be strings; %q is not", k)
			}
			if len(k) > maxMetadataKeyLen || len(v) > maxMetadataValueLen {
				return badParam("metadata", "metadata keys are at most %d bytes and values at most %d bytes", maxMetadataKeyLen, maxMetadataValueLen)
			}
		}
	}
	if c.ServiceTier != nil {
		switch *c.ServiceTier {
		case "auto", "default":
		case "flex", "scale", "priority":
			return unsupported("service_tier", "service_tier %q is not offered: this server has one tier; send \"auto\" or \"default\", or leave it out", *c.ServiceTier)
		default:
			return badParam("service_tier", "service_tier must be \"auto\" or \"default\", got %q", *c.ServiceTier)
		}
	}
	if !isNull(c.Prediction) {
		if e := onlyKeys(c.Prediction, "prediction", "type", "content"); e != nil {
			return e
		}
		var pr struct {
			Type    string          `json:"type"`
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(c.Prediction, &pr) != nil || pr.Type != "content" || isNull(pr.Content) {
			return badParam("prediction", "prediction must be {\"type\": \"content\", \"content\": TEXT or text parts}")
		}
		var text string
		var parts []struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		}
		if json.Unmarshal(pr.Content, &text) != nil {
			if json.Unmarshal(pr.Content, &parts) != nil {
				return badParam("prediction", "prediction.content must be a string or an array of text parts")
			}
			for _, p := range parts {
				if p.Type != "text" || p.Text == nil {
					return badParam("prediction", "prediction.content parts must be {\"type\": \"text\", \"text\": ...}")
				}
			}
		}
	}
	for _, m := range c.Modalities {
		if m != "text" {
			return unsupported("modalities", "modalities %q is not supported: this server answers text only; send [\"text\"] or leave it out", m)
		}
	}
	if !isNull(c.Audio) {
		return unsupported("audio", "audio output is not supported: this server answers text only; remove audio")
	}
	if !isNull(c.WebSearchOptions) {
		return unsupported("web_search_options", "web search is not supported: the model answers from the prompt alone; remove web_search_options")
	}
	return checkReasoningEffort(c.ReasoningEffort)
}

// checkReasoningEffort accepts an absent reasoning_effort or one of
// OpenAI's values (chat completions and /tokenize alike).
func checkReasoningEffort(effort *string) *apiError {
	if effort != nil && !slices.Contains(reasoningEfforts, *effort) {
		return badParam("reasoning_effort", "reasoning_effort must be one of %s, got %q", strings.Join(reasoningEfforts, ", "), *effort)
	}
	return nil
}

type commonParams struct {
	MaxTokens     *int            `json:"max_tokens"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int            `json:"top_k"`
	MinP          *float64        `json:"min_p"`
	Seed          *int64          `json:"seed"`
	Stop          json.RawMessage `json:"stop"`
	StopTokenIDs  []int64         `json:"stop_token_ids"`
	N             *int            `json:"n"`
	Stream        bool            `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	// RawStreamOptions is stream_options again, to refuse unknown keys.
	RawStreamOptions  json.RawMessage    `json:"-"`
	PresencePenalty   *float64           `json:"presence_penalty"`
	FrequencyPenalty  *float64           `json:"frequency_penalty"`
	RepetitionPenalty *float64           `json:"repetition_penalty"`
	LogitBias         map[string]float64 `json:"logit_bias"`
	// IgnoreEOS (vLLM's extension) generates max_tokens tokens even past
	// end-of-sequence; for benchmarks.
	IgnoreEOS bool `json:"ignore_eos"`
	// User is OpenAI's end-user id: accepted, it changes no output
	// (safety_identifier, its newer name, is chat's).
	User *string `json:"user"`
	// PromptCacheKey (OpenAI) and CacheSalt (vLLM) only narrow prefix-cache
	// sharing within the caller's tenant (engine.Request.CacheScope); the
	// tenant's own salt is derived by the server, so neither can reach
	// another tenant's cache (I11).
	PromptCacheKey *string `json:"prompt_cache_key"`
	CacheSalt      *string `json:"cache_salt"`
}

// Bounds of the API, documented in docs/api.md's parameter table.
const (
	maxStops      = 16  // stop strings
	maxStopBytes  = 256 // bytes of one stop string
	maxStopTokens = 64  // stop_token_ids
	maxN          = 16  // n
	maxChoices    = 16  // prompts x n of one request
)

// jsonKeys lists the JSON names of v's fields, embedded structs included:
// the parameters a request type knows.
func jsonKeys(t reflect.Type, into map[string]bool) map[string]bool {
	if into == nil {
		into = map[string]bool{}
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			jsonKeys(f.Type, into)
			continue
		}
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
			into[name] = true
		}
	}
	return into
}

var (
	completionKeys = jsonKeys(reflect.TypeOf(completionRequest{}), nil)
	chatKeys       = jsonKeys(reflect.TypeOf(chatRequest{}), nil)
	tokenizeKeys   = jsonKeys(reflect.TypeOf(tokenizeRequest{}), nil)
	detokenizeKeys = jsonKeys(reflect.TypeOf(detokenizeRequest{}), nil)
)

// decodeBody reads a JSON object into v, mapping every failure onto the
// parameter it concerns. The body is already bounded by MaxBytesReader.
// A key v does not know is refused as unsupported: a parameter the client
// believes in must never be silently ignored. Keys match exactly (Go's
// decoder alone would also take "Temperature" for "temperature").
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
			// An integer too large for the field is of the right type:
			// "must be of type integer, not a JSON number 1e20-ish"
			// read as a contradiction. Name the range instead.
			if num, ok := strings.CutPrefix(te.Value, "number "); ok && jsonType(te.Type.String()) == "integer" && !strings.ContainsAny(num, ".eE") {
				if k := te.Type.Kind(); k >= reflect.Int && k <= reflect.Int64 {
					lim := uint64(1)<<(te.Type.Bits()-1) - 1
					return badParam(param, "%s %s is out of range: an integer from -%d to %d", param, num, lim+1, lim)
				}
				return badParam(param, "%s %s is out of range: an integer from 0 to %d", param, num, uint64(1)<<(te.Type.Bits()-1)*2-1)
			}
			return badParam(param, "%s must be of type %s, not a JSON %s", param, jsonType(te.Type.String()), te.Value)
		}
		return newErr(http.StatusBadRequest, CodeInvalidJSON, "", "the request body is not valid JSON: %v", err)
	}
	if dec.More() {
		return newErr(http.StatusBadRequest, CodeInvalidJSON, "", "the request body holds more than one JSON value")
	}
	var known map[string]bool
	var common *commonParams
	switch r := v.(type) {
	case *completionRequest:
		known, common = completionKeys, &r.commonParams
	case *chatRequest:
		known, common = chatKeys, &r.commonParams
	case *tokenizeRequest:
		known = tokenizeKeys
	case *detokenizeRequest:
		known = detokenizeKeys
	}
	if known != nil {
		var keys map[string]json.RawMessage
		if err := json.Unmarshal(data, &keys); err != nil {
			return newErr(http.StatusBadRequest, CodeInvalidJSON, "", "the request body must be a JSON object")
		}
		var unknown []string
		for k := range keys {
			if !known[k] {
				unknown = append(unknown, k)
			}
		}
		if len(unknown) > 0 {
			sort.Strings(unknown)
			k := unknown[0]
			// A key of the other generation route is named as such:
			// "not a parameter this server supports" for a
			// response_format sent to /v1/completions told the user
			// the server had no structured outputs at all.
			switch v.(type) {
			case *completionRequest:
				if chatKeys[k] {
					return unsupported(k, "%q is a parameter of /v1/chat/completions, not of /v1/completions; send the request there or remove it", k)
				}
			case *chatRequest:
				if completionKeys[k] {
					return unsupported(k, "%q is a parameter of /v1/completions, not of /v1/chat/completions; send the request there or remove it", k)
				}
			}
			if hint := llamaServerName(v, k); hint != "" {
				return unsupported(k, "%q is llama-server's name; this server takes OpenAI's and vLLM's: %s", k, hint)
			}
			return unsupported(k, "%q is not a parameter this server supports; remove it (docs/api.md lists the parameters)", k)
		}
		if common != nil {
			common.RawStreamOptions = keys["stream_options"]
		}
	}
	return nil
}

// llamaServerName is what to send instead of a key llama-server takes
// (its /completion and /tokenize names, which it also accepts on its /v1
// routes), for the request type v; "" for any other key. A user coming
// from llama-server gets the name to use, not only "remove it".
func llamaServerName(v any, key string) string {
	switch v.(type) {
	case *tokenizeRequest:
		switch key {
		case "content":
			return `send the text as "prompt" (or a chat as "messages")`
		case "add_special":
			return `send "add_special_tokens"`
		case "with_pieces":
			return `send "return_token_strs": true`
		}
	case *completionRequest, *chatRequest:
		switch key {
		case "n_predict":
			return `send "max_tokens"`
		case "repeat_penalty":
			return `send "repetition_penalty"`
		case "cache_prompt":
			return "remove it: the prefix cache is on, within your tenant (prompt_cache_key narrows it)"
		case "n_probs":
			if _, chat := v.(*chatRequest); chat {
				return `send "logprobs": true with "top_logprobs": N`
			}
			return `send "logprobs": N`
		case "json_schema":
			return `send "response_format": {"type": "json_schema", "json_schema": {"name": ..., "schema": ...}} to /v1/chat/completions`
		}
	}
	return ""
}

func jsonType(goType string) string {
	switch {
	case strings.HasPrefix(goType, "map"):
		return "object"
	case strings.HasPrefix(goType, "[]"):
		return "array"
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

// onlyKeys refuses, as unsupported, a key of the JSON object raw (the
// parameter param) outside allowed; a key whose value is null, "" or []
// in lenient is accepted as absent. Non-objects are left to the typed
// decoding.
func onlyKeys(raw json.RawMessage, param string, allowed ...string) *apiError {
	return onlyKeysLenient(raw, param, nil, allowed...)
}

func onlyKeysLenient(raw json.RawMessage, param string, lenient []string, allowed ...string) *apiError {
	var m map[string]json.RawMessage
	if isNull(raw) || json.Unmarshal(raw, &m) != nil {
		return nil
	}
	var bad []string
	for k, v := range m {
		if slices.Contains(allowed, k) {
			continue
		}
		if t := string(bytes.TrimSpace(v)); slices.Contains(lenient, k) && (t == "null" || t == `""` || t == "[]") {
			continue
		}
		bad = append(bad, k)
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	return unsupported(param+"."+bad[0], "%s.%s is not supported by this server; remove it", param, bad[0])
}

func unsupported(param, format string, args ...any) *apiError {
	return newErr(http.StatusBadRequest, CodeUnsupported, param, format, args...)
}

// isNull reports an absent or JSON null field.
func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

// params is a validated set of generation parameters.
type params struct {
	maxTokens int // 0 = not given
	// maxDefaulted: maxTokens is the route's default, not the client's
	// (a refusal that names max_tokens must say so).
	maxDefaulted bool
	sampling     sample.Params // Seed is set per choice (seed, seedGiven)
	seed         uint64
	seedGiven    bool
	stop         []string
	stopIDs      map[int32]bool
	n            int
	stream       bool
	includeUsage bool
	ignoreEOS    bool
	echo         bool
	cacheScope   string
	tools        toolSpec // chat: the tools and how the answer is read
}

// limits are what validation checks against: the served vocabulary and
// the effective context (I2).
type limits struct {
	vocab, context int
	// schemas checks the request's schemas (its tenant's, cached).
	schemas schemaCheck
}

func (c *commonParams) validate(maxTokensParam string, maxTokens *int, lim limits) (params, *apiError) {
	var p params
	if maxTokens != nil && c.MaxTokens != nil && *c.MaxTokens != *maxTokens {
		// Neither may silently win over the other.
		return p, badParam("max_tokens", "max_tokens %d and %s %d disagree; set only %s", *c.MaxTokens, maxTokensParam, *maxTokens, maxTokensParam)
	}
	if maxTokens == nil {
		maxTokens = c.MaxTokens
		maxTokensParam = "max_tokens"
	}
	if maxTokens != nil {
		if *maxTokens < 1 {
			return p, badParam(maxTokensParam, "%s must be at least 1, got %d", maxTokensParam, *maxTokens)
		}
		if *maxTokens > lim.context {
			// Refused before any arithmetic with the prompt length, so no
			// sum can wrap (I2).
			return p, newErr(http.StatusBadRequest, CodeContextLength, maxTokensParam,
				"%s %d exceeds this model's maximum context length of %d tokens", maxTokensParam, *maxTokens, lim.context)
		}
		p.maxTokens = *maxTokens
	}
	s := &p.sampling
	s.Temperature = 1
	if c.Temperature != nil {
		t := *c.Temperature
		if !(t >= 0 && t <= 2) {
			return p, badParam("temperature", "temperature must be between 0 and 2, got %v", t)
		}
		s.Temperature = float32(t)
	}
	if c.TopP != nil {
		t := *c.TopP
		// Checked as the float32 the sampler gets: a tiny top_p would
		// round to 0, which means "no limit" there.
		if !(t > 0 && t <= 1) || float32(t) < sample.MinPositive {
			return p, badParam("top_p", "top_p must be at least %g and at most 1, got %v", sample.MinPositive, t)
		}
		s.TopP = float32(t)
	}
	if c.TopK != nil {
		k := *c.TopK
		// -1 and 0 both mean "no limit", as in vLLM.
		if k < -1 || k > lim.vocab {
			return p, badParam("top_k", "top_k must be -1 or 0 (no limit) or at most the vocabulary size %d, got %d", lim.vocab, k)
		}
		s.TopK = max(k, 0)
	}
	if c.MinP != nil {
		m := *c.MinP
		if !(m >= 0 && m <= 1) {
			return p, badParam("min_p", "min_p must be between 0 and 1, got %v", m)
		}
		s.MinP = float32(m)
	}
	for _, pen := range []struct {
		name string
		v    *float64
		dst  *float32
	}{{"presence_penalty", c.PresencePenalty, &s.PresencePenalty}, {"frequency_penalty", c.FrequencyPenalty, &s.FrequencyPenalty}} {
		if pen.v != nil {
			if !(*pen.v >= -sample.MaxPenalty && *pen.v <= sample.MaxPenalty) {
				return p, badParam(pen.name, "%s must be between -%d and %d, got %v", pen.name, sample.MaxPenalty, sample.MaxPenalty, *pen.v)
			}
			*pen.dst = float32(*pen.v)
		}
	}
	if c.RepetitionPenalty != nil {
		r := *c.RepetitionPenalty
		// As the float32 the sampler gets: below sample.MinPositive it
		// would round to 0 ("off") or make the logits it divides infinite.
		if !(r > 0 && r <= sample.MaxRepetitionPenalty) || float32(r) < sample.MinPositive {
			return p, badParam("repetition_penalty", "repetition_penalty must be at least %g and at most %d (1 is off), got %v", sample.MinPositive, sample.MaxRepetitionPenalty, r)
		}
		s.RepetitionPenalty = float32(r)
	}
	if e := parseLogitBias(c.LogitBias, lim.vocab, s); e != nil {
		return p, e
	}
	if c.Seed != nil {
		// Any int64 (OpenAI's type); JSON integers are read exactly, so
		// seeds above 2^53 keep every bit. Negative seeds use their
		// two's-complement bits.
		p.seed, p.seedGiven = uint64(*c.Seed), true
	}
	p.n = 1
	if c.N != nil {
		if *c.N < 1 || *c.N > maxN {
			return p, badParam("n", "n must be between 1 and %d, got %d", maxN, *c.N)
		}
		p.n = *c.N
	}
	stops, e := parseStop(c.Stop)
	if e != nil {
		return p, e
	}
	p.stop = stops
	if len(c.StopTokenIDs) > maxStopTokens {
		return p, badParam("stop_token_ids", "stop_token_ids holds %d ids; at most %d are allowed", len(c.StopTokenIDs), maxStopTokens)
	}
	for i, id := range c.StopTokenIDs {
		if id < 0 || id >= int64(lim.vocab) {
			return p, badParam("stop_token_ids", "stop_token_ids[%d] = %d is outside the vocabulary [0, %d)", i, id, lim.vocab)
		}
		if p.stopIDs == nil {
			p.stopIDs = map[int32]bool{}
		}
		p.stopIDs[int32(id)] = true
	}
	p.stream = c.Stream
	p.ignoreEOS = c.IgnoreEOS
	scope, e := cacheScope(c.PromptCacheKey, c.CacheSalt)
	if e != nil {
		return p, e
	}
	p.cacheScope = scope
	if e := onlyKeys(c.RawStreamOptions, "stream_options", "include_usage"); e != nil {
		return p, e
	}
	if c.StreamOptions != nil {
		if !c.Stream {
			return p, badParam("stream_options", "stream_options is only allowed when stream is true")
		}
		p.includeUsage = c.StreamOptions.IncludeUsage
	}
	return p, nil
}

// parseLogitBias reads OpenAI's {"token id": bias} object into sorted
// entries.
func parseLogitBias(m map[string]float64, vocab int, s *sample.Params) *apiError {
	if len(m) == 0 {
		return nil
	}
	if len(m) > sample.MaxLogitBias {
		return badParam("logit_bias", "logit_bias holds %d entries; at most %d are allowed", len(m), sample.MaxLogitBias)
	}
	for k, v := range m {
		id, err := strconv.ParseInt(k, 10, 32)
		if err != nil || id < 0 || id >= int64(vocab) {
			return badParam("logit_bias", "logit_bias key %q is not a token id in [0, %d)", k, vocab)
		}
		if !(v >= -sample.MaxBias && v <= sample.MaxBias) {
			return badParam("logit_bias", "logit_bias of token %d must be between -%d and %d, got %v", id, sample.MaxBias, sample.MaxBias, v)
		}
		s.LogitBias = append(s.LogitBias, sample.Bias{ID: int32(id), Bias: float32(v)})
	}
	slices.SortFunc(s.LogitBias, func(a, b sample.Bias) int { return int(a.ID - b.ID) })
	for i := 1; i < len(s.LogitBias); i++ {
		if s.LogitBias[i].ID == s.LogitBias[i-1].ID {
			// "1" and "01" name the same token.
			return badParam("logit_bias", "logit_bias names token %d twice", s.LogitBias[i].ID)
		}
	}
	return nil
}

// validate checks a completions request: the common parameters, then the
// legacy ones.
func (c *completionRequest) validate(lim limits) (params, *apiError) {
	p, e := c.commonParams.validate("max_tokens", nil, lim)
	if e != nil {
		return p, e
	}
	if c.BestOf != nil && *c.BestOf != 1 && *c.BestOf != p.n {
		return p, unsupported("best_of", "best_of %d is not supported (no server-side ranking); omit it or set it to n", *c.BestOf)
	}
	if !isNull(c.Suffix) {
		var s string
		if err := json.Unmarshal(c.Suffix, &s); err != nil {
			return p, badParam("suffix", "suffix must be a string")
		}
		if s != "" {
			return p, unsupported("suffix", "suffix (insertion) is not supported")
		}
	}
	if !isNull(c.Logprobs) {
		var n int
		if err := json.Unmarshal(c.Logprobs, &n); err != nil {
			return p, badParam("logprobs", "logprobs must be an integer between 0 and %d for completions", sample.MaxTopLogprobs)
		}
		if n < 0 || n > sample.MaxTopLogprobs {
			return p, badParam("logprobs", "logprobs must be between 0 and %d, got %d", sample.MaxTopLogprobs, n)
		}
		p.sampling.Logprobs, p.sampling.TopLogprobs = true, n
	}
	p.echo = c.Echo
	if p.echo && p.sampling.Logprobs {
		// Prompt logprobs need every prompt position's logits; prefill
		// computes only the last one's.
		return p, unsupported("echo", "echo together with logprobs (prompt logprobs) is not supported; drop one of them")
	}
	return p, nil
}

// validate checks a chat request: the common parameters, logprobs, and the
// tool / format parameters this server does not implement.
func (c *chatRequest) validate(lim limits) (params, *apiError) {
	var empty = func(raw json.RawMessage) bool {
		t := string(bytes.TrimSpace(raw))
		return t == "" || t == "null" || t == "[]"
	}
	if e := c.checkClientFields(); e != nil {
		return params{}, e
	}
	if !empty(c.Functions) {
		return params{}, unsupported("functions", "functions (the legacy form of tools) are not supported; use tools")
	}
	if !isNull(c.FunctionCall) {
		var s string
		if json.Unmarshal(c.FunctionCall, &s) != nil || s != "none" {
			return params{}, unsupported("function_call", "function_call (the legacy form of tool_choice) is not supported; use tool_choice")
		}
	}
	tools, toolFormat, e := parseTools(c.Tools, c.ToolChoice, lim.schemas)
	if e != nil {
		return params{}, e
	}
	// OpenAI's parallel_tool_calls false: at most one call per answer.
	tools.single = c.ParallelToolCalls != nil && !*c.ParallelToolCalls
	format, e := parseResponseFormat(c.ResponseFormat, lim.schemas)
	if e != nil {
		return params{}, e
	}
	if toolFormat.Constrained() {
		if format.Constrained() {
			return params{}, unsupported("response_format", "response_format together with %s is not supported: the tool call's arguments are the constrained output; drop response_format or set tool_choice to \"auto\"", tools.choice)
		}
		format = toolFormat
	}
	p, e := c.commonParams.validate("max_completion_tokens", c.MaxCompletionTokens, lim)
	if e != nil {
		return p, e
	}
	p.sampling.Format = format
	p.tools = tools
	if tools.mode != toolModeNone && (p.n > 1 || len(p.stop) > 0) {
		return p, unsupported("tools", "tools with n > 1 or stop strings are not supported")
	}
	if format.Constrained() && p.ignoreEOS {
		return p, unsupported("ignore_eos", "ignore_eos together with response_format is not supported: a complete JSON value can only be followed by the end of the output")
	}
	if !isNull(c.Logprobs) {
		if err := json.Unmarshal(c.Logprobs, &p.sampling.Logprobs); err != nil {
			return p, badParam("logprobs", "logprobs must be a boolean for chat completions")
		}
	}
	if c.TopLogprobs != nil {
		n := *c.TopLogprobs
		if n < 0 || n > sample.MaxTopLogprobs {
			return p, badParam("top_logprobs", "top_logprobs must be between 0 and %d, got %d", sample.MaxTopLogprobs, n)
		}
		if !p.sampling.Logprobs {
			return p, badParam("top_logprobs", "top_logprobs needs logprobs set to true")
		}
		p.sampling.TopLogprobs = n
	}
	return p, nil
}

// parseResponseFormat reads response_format: text, json_object, or
// json_schema, whose schema is compiled here once to refuse what the
// grammar compiler refuses (naming the limit) before any worker sees it.
// The workers compile it again from the same text (I14).
func parseResponseFormat(raw json.RawMessage, schemas schemaCheck) (sample.Format, *apiError) {
	var f sample.Format
	if isNull(raw) {
		return f, nil
	}
	var rf struct {
		Type       string          `json:"type"`
		JSONSchema json.RawMessage `json:"json_schema"`
	}
	if json.Unmarshal(raw, &rf) != nil {
		return f, badParam("response_format", "response_format must be an object with a type")
	}
	switch rf.Type {
	case "text":
		return f, onlyKeys(raw, "response_format", "type")
	case "json_object":
		f.Kind = sample.FormatJSONObject
		return f, onlyKeys(raw, "response_format", "type")
	case "json_schema":
	default:
		return f, unsupported("response_format", "response_format %q is not supported; use \"text\", \"json_object\" or \"json_schema\"", rf.Type)
	}
	if e := onlyKeys(raw, "response_format", "type", "json_schema"); e != nil {
		return f, e
	}
	var js struct {
		Name        *string         `json:"name"`
		Schema      json.RawMessage `json:"schema"`
		Strict      *bool           `json:"strict"`
		Description *string         `json:"description"`
	}
	if json.Unmarshal(rf.JSONSchema, &js) != nil || isNull(rf.JSONSchema) {
		return f, badParam("response_format.json_schema", "response_format.json_schema must be an object with a name and a schema")
	}
	if e := onlyKeys(rf.JSONSchema, "response_format.json_schema", "name", "schema", "strict", "description"); e != nil {
		return f, e
	}
	if isNull(js.Schema) {
		return f, badParam("response_format.json_schema.schema", "response_format.json_schema.schema is required")
	}
	var b bytes.Buffer
	if err := json.Compact(&b, js.Schema); err != nil {
		return f, badParam("response_format.json_schema.schema", "the schema is not valid JSON")
	}
	if _, err := schemas.check(b.Bytes()); err != nil {
		return f, schemaError("response_format.json_schema.schema", err)
	}
	f.Kind, f.Schema = sample.FormatJSONSchema, b.String()
	return f, nil
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
	if isNull(raw) {
		return nil, nil
	}
	var many []string
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		if one == "" {
			return nil, badParam("stop", "stop is an empty string, which would match before the first token; remove stop or give a non-empty string")
		}
		many = []string{one}
	} else if err := json.Unmarshal(raw, &many); err != nil {
		return nil, badParam("stop", "stop must be a string or an array of strings")
	}
	if len(many) > maxStops {
		return nil, badParam("stop", "stop holds %d strings; at most %d are allowed", len(many), maxStops)
	}
	for i, s := range many {
		if len(s) > maxStopBytes {
			return nil, badParam("stop", "stop[%d] is %d bytes long; at most %d are allowed", i, len(s), maxStopBytes)
		}
		// An empty stop string matches everywhere. Dropping it silently
		// hid a client bug; honouring it ends every choice at once
		// (llama-server). Refused as vLLM does.
		if s == "" {
			return nil, badParam("stop", "stop[%d] is an empty string, which would match before the first token; remove it", i)
		}
	}
	return many, nil
}

// promptInput is a completions prompt: text, or token ids.
type promptInput struct {
	text   string
	tokens []int32
	isText bool
}

// parsePrompts reads a completions prompt: a string, an array of strings,
// an array of token ids, or an array of token-id arrays. Each prompt of a
// list is its own choice (or n choices).
func parsePrompts(raw json.RawMessage, vocab int) ([]promptInput, *apiError) {
	if isNull(raw) {
		return nil, newErr(http.StatusBadRequest, CodeMissingParam, "prompt", "prompt is required")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return []promptInput{{text: s, isText: true}}, nil
	}
	var ss []string
	if err := json.Unmarshal(raw, &ss); err == nil {
		if len(ss) == 0 {
			return nil, badParam("prompt", "prompt holds no prompts")
		}
		out := make([]promptInput, len(ss))
		for i, t := range ss {
			out[i] = promptInput{text: t, isText: true}
		}
		return out, nil
	}
	var ids []int64
	if err := json.Unmarshal(raw, &ids); err == nil {
		in, e := tokenPrompt(ids, vocab, "prompt")
		return []promptInput{in}, e
	}
	var idss [][]int64
	if err := json.Unmarshal(raw, &idss); err == nil {
		if len(idss) == 0 {
			return nil, badParam("prompt", "prompt holds no prompts")
		}
		out := make([]promptInput, len(idss))
		for i, l := range idss {
			in, e := tokenPrompt(l, vocab, fmt.Sprintf("prompt[%d]", i))
			if e != nil {
				return nil, e
			}
			out[i] = in
		}
		return out, nil
	}
	return nil, badParam("prompt", "prompt must be a string, an array of strings, an array of token ids, or an array of token-id arrays")
}

func tokenPrompt(ids []int64, vocab int, param string) (promptInput, *apiError) {
	if len(ids) == 0 {
		return promptInput{}, badParam("prompt", "%s holds no tokens", param)
	}
	out := make([]int32, len(ids))
	for i, id := range ids {
		if id < 0 || (vocab > 0 && id >= int64(vocab)) {
			return promptInput{}, badParam("prompt", "%s token %d at index %d is outside the vocabulary [0, %d)", param, id, i, vocab)
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
		Role       string          `json:"role"`
		Content    json.RawMessage `json:"content"`
		ToolCalls  []toolCallJSON  `json:"tool_calls"`
		ToolCallID *string         `json:"tool_call_id"`
		Name       *string         `json:"name"`
		// ReasoningContent is an earlier answer's reasoning, as this
		// server (and vLLM, llama-server) returned it.
		ReasoningContent *string `json:"reasoning_content"`
	}
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return nil, badParam("messages", "messages must be an array of {role, content} objects")
	}
	var rawMsgs []json.RawMessage
	_ = json.Unmarshal(raw, &rawMsgs)
	for i, m := range rawMsgs {
		// A key we do not know would change what the model sees if we
		// honoured it: refused unless empty, never dropped. name goes to
		// the template as message.name (as vLLM and Hugging Face pass it;
		// agent frameworks set it on every message); a template that does
		// not read it renders the message without it.
		if e := onlyKeysLenient(m, fmt.Sprintf("messages[%d]", i), []string{"refusal"}, "role", "content", "tool_calls", "tool_call_id", "name", "reasoning_content"); e != nil {
			return nil, e
		}
	}
	if len(msgs) == 0 {
		return nil, badParam("messages", "messages must hold at least one message")
	}
	out := make([]ChatMessage, len(msgs))
	for i, m := range msgs {
		switch m.Role {
		case "system", "developer", "user", "assistant", "tool":
		case "":
			return nil, badParam(fmt.Sprintf("messages[%d].role", i), "messages[%d].role is required", i)
		default:
			return nil, badParam(fmt.Sprintf("messages[%d].role", i), "messages[%d].role %q is not supported; use system, developer, user, assistant or tool", i, m.Role)
		}
		if len(m.ToolCalls) > 0 && m.Role != "assistant" {
			return nil, badParam(fmt.Sprintf("messages[%d].tool_calls", i), "only assistant messages carry tool_calls")
		}
		if m.ReasoningContent != nil && m.Role != "assistant" {
			return nil, badParam(fmt.Sprintf("messages[%d].reasoning_content", i), "only assistant messages carry reasoning_content")
		}
		if m.ToolCallID != nil && m.Role != "tool" {
			return nil, badParam(fmt.Sprintf("messages[%d].tool_call_id", i), "only tool messages carry a tool_call_id")
		}
		// A tool result answers one call: OpenAI refuses it without the
		// call's id, every client sends it, and no template of
		// testdata/templates reads a tool message without one.
		if m.Role == "tool" && (m.ToolCallID == nil || *m.ToolCallID == "") {
			return nil, newErr(http.StatusBadRequest, CodeMissingParam, fmt.Sprintf("messages[%d].tool_call_id", i), "messages[%d] is a tool message without tool_call_id; give the id of the assistant's tool call it answers", i)
		}
		if len(m.ToolCalls) > maxTools {
			return nil, badParam(fmt.Sprintf("messages[%d].tool_calls", i), "%d tool calls; at most %d", len(m.ToolCalls), maxTools)
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
		out[i] = ChatMessage{Role: role, Content: content, ReasoningContent: m.ReasoningContent}
		if m.Name != nil {
			if e := checkMessageName(*m.Name, i); e != nil {
				return nil, e
			}
			out[i].Name = *m.Name
		}
		if m.ToolCallID != nil {
			out[i].ToolCallID = *m.ToolCallID
		}
		for _, tc := range m.ToolCalls {
			if tc.Type != "" && tc.Type != "function" || tc.Function.Name == "" {
				return nil, badParam(fmt.Sprintf("messages[%d].tool_calls", i), "a tool call needs type \"function\" and a function name")
			}
			// Templates read the arguments as an object (Hugging Face's
			// convention, vLLM's json.loads), its keys in the order the
			// client wrote them (chatorder.go); a string that is not a
			// JSON object stays a string.
			var args any = tc.Function.Arguments
			if obj, err := decodeOrdered([]byte(tc.Function.Arguments)); err == nil {
				if _, ok := obj.(*jsonObject); ok {
					args = obj
				}
			}
			fn, call := &jsonObject{}, &jsonObject{}
			fn.set("name", tc.Function.Name)
			fn.set("arguments", args)
			call.set("id", tc.ID)
			call.set("type", "function")
			call.set("function", fn)
			out[i].ToolCalls = append(out[i].ToolCalls, call)
		}
	}
	return out, nil
}

// maxNameBytes bounds a message's name, as OpenAI does (64 characters).
const maxNameBytes = 64

// checkMessageName takes OpenAI's rule for a message's name: 1 to 64
// characters, none of them white space or one of <|\/>. The rule also keeps
// a name from spelling a chat template's markers (<|im_start|>, <start_of_turn>)
// into the rendered prompt.
func checkMessageName(name string, i int) *apiError {
	param := fmt.Sprintf("messages[%d].name", i)
	if name == "" {
		return nil
	}
	if len(name) > maxNameBytes {
		return badParam(param, "%s is %d bytes long; at most %d are allowed", param, len(name), maxNameBytes)
	}
	if j := strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || strings.ContainsRune("<|\\/>", r) }); j >= 0 {
		return badParam(param, "%s may not hold white space or any of < | \\ / > (found at byte %d)", param, j)
	}
	return nil
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
	// CompletionTokensDetails is set on the chat answers of a thinking
	// model whose reasoning is split out (think.go).
	CompletionTokensDetails *completionTokenDetails `json:"completion_tokens_details,omitempty"`
}

// completionTokenDetails is OpenAI's usage.completion_tokens_details:
// how many of completion_tokens were the reasoning's (its <think> and
// </think> included).
type completionTokenDetails struct {
	ReasoningTokens int `json:"reasoning_tokens"`
}

// promptTokenDetails is OpenAI's usage.prompt_tokens_details: how many of
// prompt_tokens were read from the prefix cache instead of computed.
type promptTokenDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// completionLogprobs is the legacy completions shape: parallel arrays, and
// top_logprobs as one {token text: logprob} object per token (holding the
// sampled token too, as vLLM does).
type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float32            `json:"token_logprobs"`
	TopLogprobs   []map[string]float32 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

type completionChoice struct {
	Text         string              `json:"text"`
	Index        int                 `json:"index"`
	Logprobs     *completionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
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
	Role    string  `json:"role"`
	Content *string `json:"content"`
	// ReasoningContent is a thinking model's reasoning (think.go).
	ReasoningContent *string        `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCallJSON `json:"tool_calls,omitempty"`
}

// chatTopLogprob and chatTokenLogprob are chat's logprobs.content items.
// Bytes is a JSON array of numbers (a []byte would be base64).
type chatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

type chatTokenLogprob struct {
	Token       string           `json:"token"`
	Logprob     float32          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []chatTopLogprob `json:"top_logprobs"`
}

type chatLogprobs struct {
	Content []chatTokenLogprob `json:"content"`
	Refusal []chatTokenLogprob `json:"refusal"`
}

type chatChoice struct {
	Index        int             `json:"index"`
	Message      chatMessageJSON `json:"message"`
	Logprobs     *chatLogprobs   `json:"logprobs"`
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
	Role             string         `json:"role,omitempty"`
	Content          *string        `json:"content,omitempty"`
	ReasoningContent *string        `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCallJSON `json:"tool_calls,omitempty"`
}

type chatChunkChoice struct {
	Index        int           `json:"index"`
	Delta        chatDelta     `json:"delta"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
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
