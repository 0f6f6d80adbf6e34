package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// client speaks just enough of the OpenAI completions and chat APIs to probe
// a server as a black box. It is written against the wire format, not
// against sluice, so it works with any OpenAI-compatible server.
type client struct {
	base    string
	model   string
	http    *http.Client
	headers http.Header
	// retries is how many times a request that failed in transport (no
	// HTTP status, or a body cut off) is sent again on a fresh connection.
	retries int
	// onRetry is called once per resend (the report counts them).
	onRetry func(error)
}

// Endpoints.
const (
	pathCompletions = "/v1/completions"
	pathChat        = "/v1/chat/completions"
)

// reply is one completion as the auditor saw it.
type reply struct {
	Status       int
	Text         string
	PromptTokens int
	HasUsage     bool
	CachedTokens int
	HasCached    bool // usage.prompt_tokens_details.cached_tokens was present
	ErrCode      string
	ErrMessage   string
	Latency      time.Duration // request sent to body fully read
	TTFT         time.Duration // request sent to first token-carrying chunk (streaming only)
}

// call is one request the auditor sends.
type call struct {
	key       string
	path      string // pathCompletions or pathChat
	prompt    string
	maxTokens int
	stream    bool
}

type chatMsg struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type wireReq struct {
	Model         string    `json:"model,omitempty"`
	Prompt        *string   `json:"prompt,omitempty"`
	Messages      []chatMsg `json:"messages,omitempty"`
	MaxTokens     int       `json:"max_tokens"`
	Temperature   float64   `json:"temperature"`
	Seed          int       `json:"seed"`
	Stream        bool      `json:"stream,omitempty"`
	StreamOptions *streamO  `json:"stream_options,omitempty"`
}

type streamO struct {
	IncludeUsage bool `json:"include_usage"`
}

// body is the exact JSON the auditor sends for c (also printed in the curl
// commands that reproduce a finding).
func (cl *client) body(c call) wireReq {
	b := wireReq{Model: cl.model, MaxTokens: c.maxTokens, Temperature: 0, Seed: 1, Stream: c.stream}
	if c.path == pathChat {
		b.Messages = []chatMsg{{Role: "user", Content: c.prompt}}
	} else {
		p := c.prompt
		b.Prompt = &p
	}
	if c.stream {
		b.StreamOptions = &streamO{IncludeUsage: true}
	}
	return b
}

type wireResp struct {
	Choices []struct {
		Text    string `json:"text"`
		Message *struct {
			Content string `json:"content"`
		} `json:"message"`
		Delta *struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		PromptTokensDetails *struct {
			CachedTokens *int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
		Code    any    `json:"code"`
	} `json:"error"`
}

// errTransport marks an error with no HTTP answer (or a cut-off one).
var errTransport = errors.New("transport error")

// do sends c, resending it on a fresh connection after a transport error
// (servers such as llama-server close idle keep-alive connections, and Go
// does not resend a POST by itself).
func (cl *client) do(ctx context.Context, c call) (reply, error) {
	var last error
	for attempt := 0; attempt <= cl.retries; attempt++ {
		if attempt > 0 {
			if cl.onRetry != nil {
				cl.onRetry(last)
			}
			// Drop every idle connection: the one that failed may not be alone.
			cl.http.CloseIdleConnections()
		}
		r, err := cl.once(ctx, c)
		if err == nil || !errors.Is(err, errTransport) || ctx.Err() != nil {
			return r, err
		}
		last = err
	}
	return reply{}, fmt.Errorf("%w (after %d attempts on fresh connections)", last, cl.retries+1)
}

func (cl *client) once(ctx context.Context, c call) (reply, error) {
	buf, _ := json.Marshal(cl.body(c))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cl.base+c.path, bytes.NewReader(buf))
	if err != nil {
		return reply{}, err
	}
	for k, vs := range cl.headers {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	start := time.Now()
	resp, err := cl.http.Do(req)
	if err != nil {
		return reply{}, fmt.Errorf("%w: POST %s: %v", errTransport, c.path, err)
	}
	defer resp.Body.Close()
	r := reply{Status: resp.StatusCode}
	if resp.StatusCode != http.StatusOK || !c.stream {
		data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
		r.Latency = time.Since(start)
		if err != nil {
			return r, fmt.Errorf("%w: POST %s: reading the body: %v", errTransport, c.path, err)
		}
		var wr wireResp
		if err := json.Unmarshal(data, &wr); err != nil {
			if resp.StatusCode == http.StatusOK {
				return r, fmt.Errorf("POST %s: unparseable 200 body: %v", c.path, err)
			}
			r.ErrMessage = strings.TrimSpace(string(data))
			return r, nil
		}
		r.fill(&wr)
		return r, nil
	}
	// Streaming: SSE lines "data: {...}" until "data: [DONE]".
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var text strings.Builder
	done := false
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data:") {
			continue
		}
		payload := strings.TrimSpace(strings.TrimPrefix(line, "data:"))
		if payload == "[DONE]" {
			done = true
			break
		}
		var wr wireResp
		if err := json.Unmarshal([]byte(payload), &wr); err != nil {
			return r, fmt.Errorf("POST %s: unparseable stream chunk %q: %v", c.path, clip(payload, 200), err)
		}
		var one reply
		one.fill(&wr)
		if one.Text != "" && r.TTFT == 0 {
			r.TTFT = time.Since(start)
		}
		text.WriteString(one.Text)
		if one.HasUsage {
			r.HasUsage, r.PromptTokens = true, one.PromptTokens
			r.HasCached, r.CachedTokens = one.HasCached, one.CachedTokens
		}
		if one.ErrCode != "" || one.ErrMessage != "" {
			r.ErrCode, r.ErrMessage = one.ErrCode, one.ErrMessage
		}
	}
	r.Latency = time.Since(start)
	if err := sc.Err(); err != nil {
		return r, fmt.Errorf("%w: POST %s: stream cut off: %v", errTransport, c.path, err)
	}
	if !done && r.ErrMessage == "" {
		return r, fmt.Errorf("%w: POST %s: stream ended without [DONE]", errTransport, c.path)
	}
	if r.TTFT == 0 {
		r.TTFT = r.Latency
	}
	r.Text = text.String()
	return r, nil
}

func (r *reply) fill(wr *wireResp) {
	if len(wr.Choices) > 0 {
		ch := wr.Choices[0]
		switch {
		case ch.Message != nil:
			r.Text = ch.Message.Content
		case ch.Delta != nil:
			r.Text = ch.Delta.Content
		default:
			r.Text = ch.Text
		}
	}
	if wr.Usage != nil {
		r.HasUsage = true
		r.PromptTokens = wr.Usage.PromptTokens
		if d := wr.Usage.PromptTokensDetails; d != nil && d.CachedTokens != nil {
			r.HasCached, r.CachedTokens = true, *d.CachedTokens
		}
	}
	if wr.Error != nil {
		r.ErrMessage = wr.Error.Message
		if wr.Error.Code != nil {
			r.ErrCode = fmt.Sprint(wr.Error.Code)
		}
	}
}
