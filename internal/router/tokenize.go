package router

import (
	"encoding/json"
	"net/http"
	"strings"
)

// /tokenize and /detokenize as vLLM shapes them: the same tokenizer and
// chat template the generation routes use, so "count" is what a request
// of the same input would prefill, and the same authentication (a tenant
// key where keys are configured). They reach no engine and hold no slot:
// their work is bounded by the request body's size.

type tokenizeRequest struct {
	Model    string          `json:"model"`
	Prompt   *string         `json:"prompt"`
	Messages json.RawMessage `json:"messages"`
	// AddSpecialTokens: a prompt's default is true (BOS as a completion
	// gets it); messages' default is what /v1/chat/completions does (BOS
	// unless the template wrote it).
	AddSpecialTokens    *bool           `json:"add_special_tokens"`
	AddGenerationPrompt *bool           `json:"add_generation_prompt"`
	ChatTemplateKwargs  json.RawMessage `json:"chat_template_kwargs"`
	// Tools: the chat request's tools, rendered by the template as
	// /v1/chat/completions renders them (vLLM's /tokenize takes them), so
	// count is a chat-with-tools request's prompt_tokens too.
	Tools json.RawMessage `json:"tools"`
	// ReasoningEffort: the chat request's, given to the template as
	// /v1/chat/completions gives it (Server.reasoningEffort), so count
	// is that request's prompt_tokens.
	ReasoningEffort *string `json:"reasoning_effort"`
	ReturnTokenStrs bool    `json:"return_token_strs"`
}

type tokenizeResponse struct {
	Count       int      `json:"count"`
	MaxModelLen int      `json:"max_model_len"`
	Tokens      []int32  `json:"tokens"`
	TokenStrs   []string `json:"token_strs"`
}

type detokenizeRequest struct {
	Model  string  `json:"model"`
	Tokens []int64 `json:"tokens"`
}

func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	tenant, e := s.authenticate(r)
	if e != nil {
		s.fail(w, r, e)
		return
	}
	if e := s.overRate(w, tenant); e != nil {
		s.fail(w, r, e)
		return
	}
	var req tokenizeRequest
	if e := decodeBody(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), &req); e != nil {
		s.fail(w, r, e)
		return
	}
	info := s.cfg.Engine.Info()
	if e := checkModel(req.Model, info.Model); e != nil {
		s.fail(w, r, e)
		return
	}
	hasMsgs := len(strings.TrimSpace(string(req.Messages))) > 0 && strings.TrimSpace(string(req.Messages)) != "null"
	var ids []int32
	var err error
	switch {
	case req.Prompt != nil && hasMsgs:
		s.fail(w, r, badParam("messages", "give prompt or messages, not both"))
		return
	case req.Prompt != nil:
		if req.AddGenerationPrompt != nil || len(req.ChatTemplateKwargs) > 0 {
			s.fail(w, r, badParam("add_generation_prompt", "add_generation_prompt and chat_template_kwargs apply to messages, not to a prompt"))
			return
		}
		if !isNull(req.Tools) {
			s.fail(w, r, badParam("tools", "tools apply to messages, not to a prompt"))
			return
		}
		if req.ReasoningEffort != nil {
			s.fail(w, r, badParam("reasoning_effort", "reasoning_effort applies to messages (through the chat template), not to a prompt"))
			return
		}
		ids, err = s.cfg.Tokenizer.Encode(*req.Prompt, req.AddSpecialTokens == nil || *req.AddSpecialTokens, true)
	case hasMsgs:
		tools, _, e := parseTools(req.Tools, nil, schemaCheck{s.schemas, tenant, r.Context()})
		if e != nil {
			s.fail(w, r, e)
			return
		}
		if e := checkReasoningEffort(req.ReasoningEffort); e != nil {
			s.fail(w, r, e)
			return
		}
		text, add, e := s.chatText(req.Messages, req.ChatTemplateKwargs, req.ReasoningEffort, RenderOptions{Tools: tools.render, NoGenerationPrompt: req.AddGenerationPrompt != nil && !*req.AddGenerationPrompt})
		if e != nil {
			s.fail(w, r, e)
			return
		}
		if req.AddSpecialTokens != nil {
			add = *req.AddSpecialTokens
		}
		ids, err = s.cfg.Tokenizer.Encode(text, add, true)
	default:
		s.fail(w, r, newErr(http.StatusBadRequest, CodeMissingParam, "prompt", "give prompt (a string) or messages"))
		return
	}
	if err != nil {
		s.fail(w, r, newErr(http.StatusBadRequest, CodeTokenize, "prompt", "the input could not be tokenized: %v", err))
		return
	}
	if ids == nil {
		ids = []int32{}
	}
	resp := tokenizeResponse{Count: len(ids), MaxModelLen: info.Context, Tokens: ids}
	if req.ReturnTokenStrs {
		tt, ok := s.cfg.Tokenizer.(tokenTexter)
		if !ok {
			s.fail(w, r, unsupported("return_token_strs", "this server's tokenizer cannot name single tokens"))
			return
		}
		resp.TokenStrs = make([]string, len(ids))
		for i, id := range ids {
			resp.TokenStrs[i] = tt.TokenText(id)
		}
	}
	writeJSON(w, http.StatusOK, resp)
	s.metrics.requests.WithLabelValues("/tokenize", "200", "").Inc()
}

func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	tenant, e := s.authenticate(r)
	if e != nil {
		s.fail(w, r, e)
		return
	}
	if e := s.overRate(w, tenant); e != nil {
		s.fail(w, r, e)
		return
	}
	var req detokenizeRequest
	if e := decodeBody(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), &req); e != nil {
		s.fail(w, r, e)
		return
	}
	info := s.cfg.Engine.Info()
	if e := checkModel(req.Model, info.Model); e != nil {
		s.fail(w, r, e)
		return
	}
	if req.Tokens == nil {
		s.fail(w, r, newErr(http.StatusBadRequest, CodeMissingParam, "tokens", "tokens (an array of token ids) is required"))
		return
	}
	d := s.cfg.Tokenizer.NewDecoder()
	var b strings.Builder
	for i, id := range req.Tokens {
		if id < 0 || id >= int64(info.Vocab) {
			s.fail(w, r, badParam("tokens", "token %d at index %d is outside the vocabulary [0, %d)", id, i, info.Vocab))
			return
		}
		b.WriteString(d.Push(int32(id)))
	}
	b.WriteString(d.Flush())
	writeJSON(w, http.StatusOK, map[string]string{"prompt": b.String()})
	s.metrics.requests.WithLabelValues("/detokenize", "200", "").Inc()
}
