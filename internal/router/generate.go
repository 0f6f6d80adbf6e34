package router

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"sluice/internal/engine"
	"sluice/internal/sample"
)

// cancelGrace bounds the wait for a cancelled stream's terminal event. The
// engine ends a cancelled request within a decode step once its handoff has
// committed (I10); a minute covers a long prefill and transfer.
const cancelGrace = time.Minute

// outcome is how one generation ended, for the response and the metrics.
type outcome struct {
	finish     string
	usage      engine.Usage
	err        *apiError
	clientGone bool
}

// run consumes the engine stream and answers the client. It returns only
// after the stream's terminal event, so no request leaves the engine behind.
//
// Disconnect policy (I10): when the client goes away run calls Cancel and
// keeps draining; the engine decides when the request can stop without
// tearing a transfer. run never writes to a client known to be gone, and
// every write carries a deadline, so a dead client cannot block it.
func (s *Server) run(w http.ResponseWriter, r *http.Request, g *generation, st engine.Stream) outcome {
	var (
		out       outcome
		dec       = s.cfg.Tokenizer.NewDecoder()
		stops     = sample.NewStopMatcher(g.p.stop)
		text      strings.Builder
		sse       *sseWriter
		cancelled bool
		stopped   bool
		tokens    int
		last      time.Time
		ctxDone   = r.Context().Done()
	)
	// stuck fires if the engine breaks its promise to end a cancelled
	// stream; the handler then gives up rather than hang forever.
	var stuck <-chan time.Time
	cancel := func() {
		if !cancelled {
			cancelled = true
			st.Cancel()
			stuck = time.After(cancelGrace)
		}
	}
	emit := func(t string) {
		if t == "" || out.clientGone {
			return
		}
		if !g.p.stream {
			text.WriteString(t)
			return
		}
		if sse == nil {
			sse = s.startSSE(w, r, g)
		}
		if err := sse.content(t); err != nil {
			out.clientGone = true
			cancel()
		}
	}

loop:
	for {
		select {
		case <-ctxDone:
			ctxDone = nil
			out.clientGone = true
			cancel()
		case <-stuck:
			s.log.Error("the engine did not end a cancelled request", "id", g.id, "grace", cancelGrace)
			out.err = newErr(http.StatusInternalServerError, CodeInternal, "", "the engine did not end the request")
			break loop
		case ev, ok := <-st.Events():
			if !ok {
				// The engine contract promises a terminal event; a stream
				// that closes without one must not look like success (I8).
				out.err = newErr(http.StatusInternalServerError, CodeInternal, "", "the engine ended the request without a result")
				break loop
			}
			if ev.Err == nil && !ev.Done {
				now := time.Now()
				if tokens == 0 {
					s.metrics.ttft.Observe(now.Sub(g.start).Seconds())
				} else {
					s.metrics.itl.Observe(now.Sub(last).Seconds())
				}
				last = now
				if stopped {
					continue // draining after our own Cancel
				}
				tokens++
				if s.cfg.Tokenizer.IsEOG(ev.Token) {
					continue
				}
				piece, hit := stops.Push(dec.Push(ev.Token))
				emit(piece)
				if hit {
					stopped = true
					out.finish = "stop"
					cancel()
				}
				continue
			}
			out.usage = ev.Usage
			var failure *apiError
			if ev.Err != nil {
				failure = fromEngine(ev.Err)
				if failure.Status >= 500 {
					// Logged even when the client is gone: an integrity
					// failure is never silent (I8).
					s.log.Error("request failed", "id", g.id, "tenant", g.tenant, "code", failure.Code, "err", ev.Err)
				}
			}
			switch {
			case stopped && (failure == nil || failure.Code == engine.CodeCancelled):
				// We cancelled after a stop string: the client received
				// `tokens` tokens, whatever the engine produced meanwhile.
				out.usage.CompletionTokens = tokens
			case failure != nil:
				// A failure other than our own cancel fails the request even
				// after a stop string matched (I8: fail closed).
				if !out.clientGone {
					out.err = failure
				}
			default:
				out.finish = ev.Finish
				if piece, hit := stops.Push(dec.Flush()); hit {
					emit(piece)
					out.finish = "stop"
					break loop
				} else {
					emit(piece)
				}
				emit(stops.Flush())
			}
			break loop
		}
	}
	if out.clientGone {
		return out
	}
	u := usageJSON{PromptTokens: out.usage.PromptTokens, CompletionTokens: out.usage.CompletionTokens,
		TotalTokens:         out.usage.PromptTokens + out.usage.CompletionTokens,
		PromptTokensDetails: promptTokenDetails{CachedTokens: out.usage.CachedTokens}}

	if !g.p.stream {
		if out.err != nil {
			writeError(w, out.err)
			return out
		}
		if g.chat {
			writeJSON(w, http.StatusOK, chatResponse{ID: g.id, Object: "chat.completion", Created: g.created, Model: g.model,
				Choices: []chatChoice{{Message: chatMessageJSON{Role: "assistant", Content: text.String()}, FinishReason: out.finish}},
				Usage:   u})
		} else {
			f := out.finish
			writeJSON(w, http.StatusOK, completionResponse{ID: g.id, Object: "text_completion", Created: g.created, Model: g.model,
				Choices: []completionChoice{{Text: text.String(), FinishReason: &f}}, Usage: &u})
		}
		return out
	}

	if sse == nil {
		if out.err != nil {
			// Nothing was sent yet: the client gets a proper status.
			writeError(w, out.err)
			return out
		}
		sse = s.startSSE(w, r, g)
	}
	var err error
	if out.err != nil {
		// A failure after streaming started ends the stream with an error
		// event and no [DONE], never a clean finish_reason.
		err = sse.event(out.err.body())
	} else {
		err = sse.finish(out.finish)
		if err == nil && g.p.includeUsage {
			err = sse.usage(u)
		}
		if err == nil {
			err = sse.raw("[DONE]")
		}
	}
	if err != nil {
		out.clientGone = true
	}
	return out
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// sseWriter writes one response's server-sent events.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	g       *generation
	timeout time.Duration
}

func (s *Server) startSSE(w http.ResponseWriter, r *http.Request, g *generation) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	sw := &sseWriter{w: w, rc: http.NewResponseController(w), g: g, timeout: s.cfg.WriteTimeout}
	if g.chat {
		// OpenAI opens a chat stream with the assistant role and empty content.
		empty := ""
		_ = sw.event(sw.chatChunk(chatDelta{Role: "assistant", Content: &empty}, nil))
	}
	return sw
}

func (sw *sseWriter) raw(data string) error {
	if err := sw.rc.SetWriteDeadline(time.Now().Add(sw.timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	if _, err := sw.w.Write([]byte("data: " + data + "\n\n")); err != nil {
		return err
	}
	if err := sw.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

func (sw *sseWriter) event(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return sw.raw(string(b))
}

func (sw *sseWriter) chatChunk(d chatDelta, finish *string) chatChunk {
	return chatChunk{ID: sw.g.id, Object: "chat.completion.chunk", Created: sw.g.created, Model: sw.g.model,
		Choices: []chatChunkChoice{{Delta: d, FinishReason: finish}}}
}

func (sw *sseWriter) completionChunk(text string, finish *string) completionResponse {
	return completionResponse{ID: sw.g.id, Object: "text_completion", Created: sw.g.created, Model: sw.g.model,
		Choices: []completionChoice{{Text: text, FinishReason: finish}}}
}

func (sw *sseWriter) content(t string) error {
	if sw.g.chat {
		return sw.event(sw.chatChunk(chatDelta{Content: &t}, nil))
	}
	return sw.event(sw.completionChunk(t, nil))
}

func (sw *sseWriter) finish(reason string) error {
	if sw.g.chat {
		return sw.event(sw.chatChunk(chatDelta{}, &reason))
	}
	return sw.event(sw.completionChunk("", &reason))
}

// usage is the extra last chunk of stream_options.include_usage: no
// choices, only usage.
func (sw *sseWriter) usage(u usageJSON) error {
	if sw.g.chat {
		return sw.event(chatChunk{ID: sw.g.id, Object: "chat.completion.chunk", Created: sw.g.created, Model: sw.g.model,
			Choices: []chatChunkChoice{}, Usage: &u})
	}
	return sw.event(completionResponse{ID: sw.g.id, Object: "text_completion", Created: sw.g.created, Model: sw.g.model,
		Choices: []completionChoice{}, Usage: &u})
}
