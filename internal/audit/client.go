package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// client speaks just enough of the OpenAI completions API to probe a server
// as a black box. It is written against the wire format, not against
// sluice, so it works with any OpenAI-compatible server.
type client struct {
	base  string
	model string
	http  *http.Client
}

// reply is one completion as the auditor saw it.
type reply struct {
	Status       int
	Text         string
	PromptTokens int
	HasUsage     bool
	ErrCode      string
	ErrMessage   string
	Latency      time.Duration // request sent to body fully read
	TTFT         time.Duration // request sent to first token-carrying chunk (streaming only)
}

type completionReq struct {
	Model         string   `json:"model,omitempty"`
	Prompt        string   `json:"prompt"`
	MaxTokens     int      `json:"max_tokens"`
	Temperature   float64  `json:"temperature"`
	Seed          *int     `json:"seed,omitempty"`
	Stream        bool     `json:"stream,omitempty"`
	StreamOptions *streamO `json:"stream_options,omitempty"`
}

type streamO struct {
	IncludeUsage bool `json:"include_usage"`
}

type completionResp struct {
	Choices []struct {
		Text string `json:"text"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens int `json:"prompt_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
		Code    any    `json:"code"`
	} `json:"error"`
}

func (c *client) complete(ctx context.Context, key, prompt string, maxTokens int, stream bool) (reply, error) {
	seed := 1
	body := completionReq{Model: c.model, Prompt: prompt, MaxTokens: maxTokens, Temperature: 0, Seed: &seed, Stream: stream}
	if stream {
		body.StreamOptions = &streamO{IncludeUsage: true}
	}
	buf, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/completions", bytes.NewReader(buf))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	r := reply{Status: resp.StatusCode}
	if resp.StatusCode != http.StatusOK || !stream {
		data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
		r.Latency = time.Since(start)
		if err != nil {
			return r, err
		}
		var cr completionResp
		if err := json.Unmarshal(data, &cr); err != nil {
			if resp.StatusCode == http.StatusOK {
				return r, fmt.Errorf("unparseable 200 body: %v", err)
			}
			r.ErrMessage = strings.TrimSpace(string(data))
			return r, nil
		}
		r.fill(&cr)
		return r, nil
	}
	// Streaming: SSE lines "data: {...}" until "data: [DONE]".
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var text strings.Builder
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data:") {
			continue
		}
		payload := strings.TrimSpace(strings.TrimPrefix(line, "data:"))
		if payload == "[DONE]" {
			break
		}
		var cr completionResp
		if err := json.Unmarshal([]byte(payload), &cr); err != nil {
			return r, fmt.Errorf("unparseable stream chunk %q: %v", payload, err)
		}
		if len(cr.Choices) > 0 && cr.Choices[0].Text != "" && r.TTFT == 0 {
			r.TTFT = time.Since(start)
		}
		var one reply
		one.fill(&cr)
		text.WriteString(one.Text)
		if one.HasUsage {
			r.HasUsage, r.PromptTokens = true, one.PromptTokens
		}
		if one.ErrCode != "" || one.ErrMessage != "" {
			r.ErrCode, r.ErrMessage = one.ErrCode, one.ErrMessage
		}
	}
	r.Latency = time.Since(start)
	if r.TTFT == 0 {
		r.TTFT = r.Latency
	}
	r.Text = text.String()
	return r, sc.Err()
}

func (r *reply) fill(cr *completionResp) {
	if len(cr.Choices) > 0 {
		r.Text = cr.Choices[0].Text
	}
	if cr.Usage != nil {
		r.HasUsage = true
		r.PromptTokens = cr.Usage.PromptTokens
	}
	if cr.Error != nil {
		r.ErrMessage = cr.Error.Message
		if cr.Error.Code != nil {
			r.ErrCode = fmt.Sprint(cr.Error.Code)
		}
	}
}

// modelInfo reads /v1/models: the first model's id and, when the server
// advertises it, its context length (sluice: context_length; vLLM:
// max_model_len).
func (c *client) modelInfo(ctx context.Context, key string) (id string, ctxLen int, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/models", nil)
	if err != nil {
		return "", 0, err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", 0, fmt.Errorf("GET /v1/models: HTTP %d", resp.StatusCode)
	}
	var ml struct {
		Data []struct {
			ID            string `json:"id"`
			ContextLength int    `json:"context_length"`
			MaxModelLen   int    `json:"max_model_len"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&ml); err != nil {
		return "", 0, fmt.Errorf("GET /v1/models: %v", err)
	}
	if len(ml.Data) == 0 {
		return "", 0, fmt.Errorf("GET /v1/models lists no model")
	}
	m := ml.Data[0]
	n := m.ContextLength
	if n == 0 {
		n = m.MaxModelLen
	}
	return m.ID, n, nil
}
