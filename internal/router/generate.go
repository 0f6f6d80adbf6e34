package router

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"time"

	"sluice/internal/engine"
	"sluice/internal/grammar"
	"sluice/internal/sample"
)

// cancelGrace bounds the wait for a cancelled stream's terminal event. The
// engine ends a cancelled request within a decode step once its handoff has
// committed (I10); a minute covers a long prefill and transfer. A
// variable only so tests can shorten it.
var cancelGrace = time.Minute

// outcome is how one generation ended, for the response and the metrics.
type outcome struct {
	finish string // the first choice's
	usage  engine.Usage
	// prefilled is every choice's prompt tokens as the engine accounted
	// them: each choice prefills its prompt, while usage counts each
	// prompt once (OpenAI's rule for n > 1).
	prefilled  int
	err        *apiError
	clientGone bool
	// drainCut: the server cut the request at --drain-timeout (err is
	// then drain_timeout).
	drainCut bool
	// reasoningTokens are the choices' reasoning tokens (think.go).
	reasoningTokens int
	// first is where the time to its first token went (firstTiming), for
	// the request's log line; nil without a first token.
	first []engine.PhaseTime
}

// genPrompt is one prompt of a request: its tokens and, for echo, its text.
type genPrompt struct {
	tokens []int32
	echo   string
}

// choice is one generated sequence of a request: prompt i, sample j, at
// index i*n + j (OpenAI's order). Each is its own engine request, with its
// own pages and handoff.
type choice struct {
	index   int
	prompt  int
	st      engine.Stream
	events  <-chan engine.Event // nil once the terminal event arrived
	dec     Decoder
	stops   *sample.StopMatcher
	text    strings.Builder // non-streaming: the text so far
	offset  int             // bytes of text decoded so far, echo included
	lps     []tokenLogprob  // logprobs not yet sent (all, when not streaming)
	tokens  int             // tokens the client is accounted for
	finish  string
	stopped bool // a stop string or stop token matched: draining after our Cancel
	cancel  bool // Cancel was called
	// deadline is when a cancelled choice must have ended (cancelGrace).
	deadline time.Time
	last     time.Time
	usage    engine.Usage
	// calls and content are a finished tool-calling choice's answer
	// (toolSpec.toolCalls); text holds its whole output until then.
	calls   []toolCallJSON
	content *string
	// A streamed tool-calling choice: sent is how many bytes of text went
	// out as content; held marks that the rest is (maybe) a call and
	// waits for the end; callID is a named or required call already
	// opened on the stream (its arguments follow as they come), argSent
	// the end in text of the arguments sent of a required call.
	sent    int
	held    bool
	callID  string
	argSent int
	// A thinking model's choice (think.go): think follows its output;
	// reasoning is its reasoning so far (not streaming), rs what of it
	// may be sent, reasonTokens its tokens;
	// lead drops the white space between </think> and the answer.
	think        *grammar.Think
	reasoning    strings.Builder
	rs           reasoningText
	reasonTokens int
	lead         bool
}

// tokenLogprob is one reported token: its id, logprobs and text offset.
type tokenLogprob struct {
	id     int32
	lp     *sample.Logprobs
	offset int
}

// run consumes the engine streams of a request's choices and answers the
// client. It returns only after every stream's terminal event, so no
// request leaves the engine behind.
//
// Disconnect policy (I10): when the client goes away run calls Cancel on
// every choice and keeps draining; the engine decides when each can stop
// without tearing a transfer. run never writes to a client known to be
// gone, and every write carries a deadline, so a dead client cannot block
// it. A failure of one choice fails the request (I8: fail closed); the
// other choices are cancelled.
func (s *Server) run(w http.ResponseWriter, r *http.Request, g *generation, streams []engine.Stream) outcome {
	var (
		out     outcome
		sse     *sseWriter
		stuck   <-chan time.Time
		timer   *time.Timer
		ctxDone = r.Context().Done()
		cutDone = (<-chan struct{})(s.cut)
		first   = true
		live    = len(streams)
	)
	chs := make([]*choice, len(streams))
	for i, st := range streams {
		chs[i] = &choice{index: i, prompt: i / g.p.n, st: st, events: st.Events(),
			dec: s.cfg.Tokenizer.NewDecoder(), stops: sample.NewStopMatcher(g.p.stop)}
		if g.p.echo {
			chs[i].offset = len(g.prompts[chs[i].prompt].echo)
		}
		if th := s.newThink(g, g.prompts[chs[i].prompt].tokens); th != nil {
			chs[i].think = th
			chs[i].lead = th.Phase() == grammar.ThinkLead
		}
	}
	// stuck fires at the earliest deadline of a cancelled choice still
	// running: the engine broke its promise to end a cancelled stream, and
	// the handler gives up rather than hang forever. Choices that were not
	// cancelled (the others of n, still generating) have no deadline.
	arm := func() {
		var next time.Time
		for _, c := range chs {
			if c.events != nil && c.cancel && (next.IsZero() || c.deadline.Before(next)) {
				next = c.deadline
			}
		}
		if timer != nil {
			timer.Stop()
		}
		timer, stuck = nil, nil
		if !next.IsZero() {
			timer = time.NewTimer(time.Until(next))
			stuck = timer.C
		}
	}
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	cancel := func(c *choice) {
		if !c.cancel {
			c.cancel = true
			c.deadline = time.Now().Add(cancelGrace)
			c.st.Cancel()
			if stuck == nil {
				arm()
			}
		}
	}
	cancelAll := func() {
		for _, c := range chs {
			if c.events != nil {
				cancel(c)
			}
		}
	}
	gone := func() {
		out.clientGone = true
		cancelAll()
	}
	// textOut counts the chunks of token text (answer or reasoning)
	// written and flushed: the router's first_token_write ends at the
	// first token's.
	textOut := 0
	send := func(c *choice, t string, finish *string) {
		if out.clientGone || out.err != nil {
			return
		}
		if sse == nil {
			sse = s.startSSE(w, r, g)
		}
		lps := c.lps
		c.lps = nil
		if err := sse.chunk(c.index, t, lps, finish); err != nil {
			gone()
		} else if t != "" {
			textOut++
		}
	}
	// A tool-calling answer is read when its choice ends (toolCalls). On
	// a stream, a named call's arguments go out as they come (the output
	// is the arguments object); a required call's too, once its name is
	// complete (streamRequired); auto content goes out until the text may
	// be a call (streamAuto), and a call then waits for the end.
	holdTools := g.chat && g.p.tools.mode != toolModeNone
	emit := func(c *choice, t string) {
		if t == "" || out.clientGone {
			return
		}
		if !g.p.stream {
			c.text.WriteString(t)
			return
		}
		if !holdTools {
			send(c, t, nil)
			return
		}
		c.text.WriteString(t)
		switch g.p.tools.mode {
		case toolModeNamed:
			sw := sse0(&sse, func() *sseWriter { return s.startSSE(w, r, g) })()
			var d chatDelta
			i := 0
			if c.callID == "" {
				c.callID = newToolCallID()
				head := toolCallJSON{Index: &i, ID: c.callID, Type: "function"}
				head.Function.Name = g.p.tools.named
				if err := sw.event(sw.chatChunk(c.index, chatDelta{ToolCalls: []toolCallJSON{head}}, nil, nil)); err != nil {
					gone()
					return
				}
			}
			frag := toolCallJSON{Index: &i}
			frag.Function.Arguments = t
			d.ToolCalls = []toolCallJSON{frag}
			if err := sw.event(sw.chatChunk(c.index, d, nil, nil)); err != nil {
				gone()
			}
			c.sent = c.text.Len()
		case toolModeReq:
			text := c.text.String()
			name, start, end := scanRequired(text)
			if name == "" || start < 0 {
				return // the name is not complete yet
			}
			sw := sse0(&sse, func() *sseWriter { return s.startSSE(w, r, g) })()
			i := 0
			if c.callID == "" {
				c.callID, c.argSent = newToolCallID(), start
				head := toolCallJSON{Index: &i, ID: c.callID, Type: "function"}
				head.Function.Name = name
				if err := sw.event(sw.chatChunk(c.index, chatDelta{ToolCalls: []toolCallJSON{head}}, nil, nil)); err != nil {
					gone()
					return
				}
			}
			if end < 0 {
				end = len(text)
			}
			if end > c.argSent {
				frag := toolCallJSON{Index: &i}
				frag.Function.Arguments = text[c.argSent:end]
				c.argSent = end
				if err := sw.event(sw.chatChunk(c.index, chatDelta{ToolCalls: []toolCallJSON{frag}}, nil, nil)); err != nil {
					gone()
				}
			}
			c.sent = len(text)
		case toolModeAuto:
			if n := streamAuto(c); n > 0 {
				send(c, c.text.String()[c.sent:c.sent+n], nil)
				c.sent += n
			}
		}
	}
	// A thinking model's text goes to the reasoning or the answer by
	// where its output stands (think.go); reason sends the reasoning
	// (streamed as delta.reasoning_content, with the logprobs so far).
	reason := func(c *choice, t string) {
		if t = c.rs.push(t); t == "" || out.clientGone {
			return
		}
		if !g.p.stream {
			c.reasoning.WriteString(t)
			return
		}
		if out.err != nil {
			return
		}
		if sse == nil {
			sse = s.startSSE(w, r, g)
		}
		lps := c.lps
		c.lps = nil
		if err := sse.event(sse.chatChunk(c.index, chatDelta{ReasoningContent: &t}, s.chatLogprobs(g, lps), nil)); err != nil {
			gone()
		} else {
			textOut++
		}
	}
	text := func(c *choice, t string) {
		if c.think != nil && c.think.Phase() == grammar.ThinkIn {
			reason(c, t)
			return
		}
		if c.lead {
			if t = strings.TrimLeft(t, " \t\r\n"); t == "" {
				return
			}
			c.lead = false
		}
		emit(c, t)
	}
	// Cases: 0 the client's context, 1 the stuck timer, 2 the drain's
	// cut, 3.. the choices.
	const firstChoice = 3
	cases := make([]reflect.SelectCase, firstChoice+len(chs))
	for {
		if live == 0 {
			break
		}
		cases[0] = reflect.SelectCase{Dir: reflect.SelectRecv}
		if ctxDone != nil {
			cases[0].Chan = reflect.ValueOf(ctxDone)
		}
		cases[1] = reflect.SelectCase{Dir: reflect.SelectRecv}
		if stuck != nil {
			cases[1].Chan = reflect.ValueOf(stuck)
		}
		cases[2] = reflect.SelectCase{Dir: reflect.SelectRecv}
		if cutDone != nil {
			cases[2].Chan = reflect.ValueOf(cutDone)
		}
		for i, c := range chs {
			cases[firstChoice+i] = reflect.SelectCase{Dir: reflect.SelectRecv}
			if c.events != nil {
				cases[firstChoice+i].Chan = reflect.ValueOf(c.events)
			}
		}
		k, v, ok := reflect.Select(cases)
		if k == 0 {
			ctxDone = nil
			gone()
			continue
		}
		if k == 1 {
			late := false
			for _, c := range chs {
				late = late || (c.events != nil && c.cancel && !time.Now().Before(c.deadline))
			}
			if !late {
				arm() // the choice that set the timer ended; wait for the next
				continue
			}
			s.log.Error("the engine did not end a cancelled request", "id", g.id, "grace", cancelGrace)
			if out.err == nil {
				out.err = newErr(http.StatusInternalServerError, CodeInternal, "", "the engine did not end the request")
			}
			break
		}
		if k == 2 {
			// --drain-timeout ran out: end the request as the server's
			// decision, with an error the client can act on (retry
			// elsewhere); the choices are cancelled and drained as on a
			// disconnect (I10).
			cutDone = nil
			if !out.clientGone {
				out.drainCut = true
				out.err = newErr(http.StatusServiceUnavailable, CodeDrainTimeout, "", "the server is shutting down and its drain timeout ended this request before it finished; retry on another instance")
			}
			cancelAll()
			continue
		}
		c := chs[k-firstChoice]
		if !ok {
			// The engine contract promises a terminal event; a stream
			// that closes without one must not look like success (I8).
			c.events = nil
			live--
			if out.err == nil {
				out.err = newErr(http.StatusInternalServerError, CodeInternal, "", "the engine ended the request without a result")
			}
			cancelAll()
			continue
		}
		ev := v.Interface().(engine.Event)
		if ev.Err == nil && !ev.Done {
			now := s.now()
			firstToken, textBefore := first, textOut
			if first {
				s.metrics.ttft.Observe(now.Sub(g.start).Seconds())
				s.metrics.vTTFT.WithLabelValues(g.model).Observe(now.Sub(g.start).Seconds())
				if !ev.Sent.IsZero() {
					s.metrics.phases.Observe(g.tenant, PhaseFirstTokenDeliver, now.Sub(ev.Sent))
				}
				if d, ok := engineOther(g, ev); ok {
					s.metrics.phases.Observe(g.tenant, PhaseEngineOther, d)
				}
				out.first = firstTiming(g, ev, now)
				first = false
			} else if !c.last.IsZero() {
				s.metrics.itl.Observe(now.Sub(c.last).Seconds())
				s.metrics.vITL.WithLabelValues(g.model).Observe(now.Sub(c.last).Seconds())
			}
			c.last = now
			if c.stopped || c.cancel {
				continue // draining after our own Cancel
			}
			if bad := badLogprobs(g.p.sampling, ev.Logprobs); bad != "" {
				// The client would get a logprobs list that silently
				// lacks an entry or holds others than asked (I8).
				s.log.Error("engine broke the logprobs contract", "id", g.id, "choice", c.index, "problem", bad)
				if out.err == nil && !out.clientGone {
					out.err = newErr(http.StatusInternalServerError, CodeInternal, "", "the engine reported a token %s", bad)
				}
				cancelAll()
				continue
			}
			c.tokens++
			if s.cfg.Tokenizer.IsEOG(ev.Token) || g.p.stopIDs[ev.Token] {
				// A token that ends generation is accounted for, but
				// neither its text nor its logprobs are sent.
				if g.p.stopIDs[ev.Token] {
					c.stopped, c.finish = true, "stop"
					cancel(c)
				}
				continue
			}
			if c.think != nil {
				in := c.think.Phase() == grammar.ThinkIn
				if c.think.Step(ev.Token, s.spaceToken(ev.Token)) {
					// <think> or </think>: its text is neither reasoning
					// nor answer. What the decoder and the stop strings
					// still hold is the reasoning's when it closes (and
					// nothing when it opens).
					c.reasonTokens++
					if ev.Logprobs != nil {
						c.lps = append(c.lps, tokenLogprob{id: ev.Token, lp: ev.Logprobs, offset: c.offset})
					}
					rest := c.dec.Flush()
					c.offset += len(rest)
					rest, hit := c.stops.Push(rest)
					if !hit {
						rest += c.stops.Flush()
					}
					if in {
						reason(c, rest) // its trailing white space stays held: never sent
					}
					c.lead = c.think.Phase() == grammar.ThinkLead
					if hit {
						c.stopped, c.finish = true, "stop"
						cancel(c)
					}
					continue
				}
				if in {
					c.reasonTokens++
				}
			}
			piece := c.dec.Push(ev.Token)
			if ev.Logprobs != nil {
				c.lps = append(c.lps, tokenLogprob{id: ev.Token, lp: ev.Logprobs, offset: c.offset})
			}
			c.offset += len(piece)
			piece, hit := c.stops.Push(piece)
			text(c, piece)
			if firstToken && textOut > textBefore {
				// Its text went out at once, written and flushed.
				d := s.now().Sub(now)
				s.metrics.phases.Observe(g.tenant, PhaseFirstTokenWrite, d)
				out.first = append(out.first, engine.PhaseTime{Phase: PhaseFirstTokenWrite, D: d})
			}
			if hit {
				c.stopped, c.finish = true, "stop"
				cancel(c)
			}
			continue
		}
		c.events = nil
		live--
		c.usage = ev.Usage
		var failure *apiError
		if ev.Err != nil {
			failure = fromEngine(ev.Err)
			if failure.Status >= 500 {
				// Logged even when the client is gone: an integrity
				// failure is never silent (I8).
				s.log.Error("request failed", "id", g.id, "tenant", g.tenant, "choice", c.index, "code", failure.Code, "err", ev.Err)
			}
		}
		switch {
		case c.stopped && (failure == nil || failure.Code == engine.CodeCancelled):
			// We cancelled after a stop: the client received `tokens`
			// tokens, whatever the engine produced meanwhile.
			c.usage.CompletionTokens = c.tokens
		case failure != nil:
			// A failure other than our own cancel fails the request even
			// after a stop matched (I8: fail closed).
			if out.err == nil && !out.clientGone {
				out.err = failure
			}
			cancelAll()
			continue
		default:
			c.finish = ev.Finish
			if piece, hit := c.stops.Push(c.dec.Flush()); hit {
				text(c, piece)
				c.finish = "stop"
			} else {
				text(c, piece)
				text(c, c.stops.Flush())
			}
		}
		if holdTools {
			s.readTools(g, c)
		}
		if g.p.stream {
			if holdTools {
				s.sendTools(sse0(&sse, func() *sseWriter { return s.startSSE(w, r, g) }), c, &out, gone)
			}
			f := c.finish
			send(c, "", &f)
		}
	}

	for i, c := range chs {
		// Each prompt is counted once, as OpenAI does for n > 1.
		if i%g.p.n == 0 {
			out.usage.PromptTokens += c.usage.PromptTokens
			// Counted with its prompt: cached_tokens <= prompt_tokens.
			out.usage.CachedTokens += c.usage.CachedTokens
		}
		out.prefilled += c.usage.PromptTokens
		out.usage.CompletionTokens += c.usage.CompletionTokens
		out.reasoningTokens += c.reasonTokens
	}
	out.finish = chs[0].finish
	if out.clientGone {
		return out
	}
	u := usageJSON{PromptTokens: out.usage.PromptTokens, CompletionTokens: out.usage.CompletionTokens,
		TotalTokens:         out.usage.PromptTokens + out.usage.CompletionTokens,
		PromptTokensDetails: promptTokenDetails{CachedTokens: out.usage.CachedTokens}}
	if g.chat && s.think != nil {
		u.CompletionTokensDetails = &completionTokenDetails{ReasoningTokens: out.reasoningTokens}
	}

	if !g.p.stream {
		if out.err != nil {
			writeError(w, out.err)
			return out
		}
		if g.chat {
			resp := chatResponse{ID: g.id, Object: "chat.completion", Created: g.created, Model: g.model, Usage: u}
			for _, c := range chs {
				text := c.text.String()
				msg := chatMessageJSON{Role: "assistant", Content: &text}
				if holdTools && len(c.calls) > 0 {
					msg.Content, msg.ToolCalls = c.content, c.calls
				}
				if c.think != nil {
					if r := c.reasoning.String(); r != "" {
						msg.ReasoningContent = &r
					}
					if c.think.Phase() == grammar.ThinkIn && text == "" {
						// Cut (max_tokens) or ended inside the reasoning:
						// no answer at all.
						msg.Content = nil
					}
				}
				resp.Choices = append(resp.Choices, chatChoice{Index: c.index, Message: msg,
					Logprobs: s.chatLogprobs(g, c.lps), FinishReason: c.finish})
			}
			writeJSON(w, http.StatusOK, resp)
		} else {
			resp := completionResponse{ID: g.id, Object: "text_completion", Created: g.created, Model: g.model, Usage: &u}
			for _, c := range chs {
				f := c.finish
				text := c.text.String()
				if g.p.echo {
					text = g.prompts[c.prompt].echo + text
				}
				resp.Choices = append(resp.Choices, completionChoice{Text: text, Index: c.index, Logprobs: s.completionLogprobs(g, c.lps), FinishReason: &f})
			}
			writeJSON(w, http.StatusOK, resp)
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
		// event and no [DONE], never a clean finish_reason. A drain cut
		// is no failure of the request: [DONE] follows its error event,
		// so a client reading to [DONE] ends cleanly.
		err = sse.event(out.err.body())
		if err == nil && out.drainCut {
			err = sse.raw("[DONE]")
		}
	} else {
		if g.p.includeUsage {
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

// badLogprobs says how a token's logprobs break what p asked for (present
// exactly when asked, at most TopLogprobs alternatives), or "".
func badLogprobs(p sample.Params, lp *sample.Logprobs) string {
	switch {
	case p.Logprobs && lp == nil:
		return "without the logprobs asked for"
	case !p.Logprobs && lp != nil:
		return "with logprobs nobody asked for"
	case lp != nil && len(lp.Top) > p.TopLogprobs:
		return fmt.Sprintf("with %d top logprobs, more than the %d asked for", len(lp.Top), p.TopLogprobs)
	}
	return ""
}

// tokenTexter is the optional tokenizer method giving one token's bytes
// (special tokens as their text), for logprobs.
type tokenTexter interface {
	TokenText(id int32) string
}

func (s *Server) tokenText(id int32) string {
	if t, ok := s.cfg.Tokenizer.(tokenTexter); ok {
		return t.TokenText(id)
	}
	d := s.cfg.Tokenizer.NewDecoder()
	return d.Push(id) + d.Flush()
}

func byteInts(t string) []int {
	b := make([]int, len(t))
	for i := range len(t) {
		b[i] = int(t[i])
	}
	return b
}

// chatLogprobs renders logprobs.content; nil when none were asked.
func (s *Server) chatLogprobs(g *generation, lps []tokenLogprob) *chatLogprobs {
	if !g.p.sampling.Logprobs {
		return nil
	}
	out := &chatLogprobs{Content: []chatTokenLogprob{}}
	for _, e := range lps {
		t := s.tokenText(e.id)
		item := chatTokenLogprob{Token: t, Logprob: e.lp.Logprob, Bytes: byteInts(t), TopLogprobs: []chatTopLogprob{}}
		for _, a := range e.lp.Top {
			at := s.tokenText(a.ID)
			item.TopLogprobs = append(item.TopLogprobs, chatTopLogprob{Token: at, Logprob: a.Logprob, Bytes: byteInts(at)})
		}
		out.Content = append(out.Content, item)
	}
	return out
}

// completionLogprobs renders the legacy shape; nil when none were asked.
func (s *Server) completionLogprobs(g *generation, lps []tokenLogprob) *completionLogprobs {
	if !g.p.sampling.Logprobs {
		return nil
	}
	out := &completionLogprobs{Tokens: []string{}, TokenLogprobs: []float32{}, TopLogprobs: []map[string]float32{}, TextOffset: []int{}}
	for _, e := range lps {
		t := s.tokenText(e.id)
		out.Tokens = append(out.Tokens, t)
		out.TokenLogprobs = append(out.TokenLogprobs, e.lp.Logprob)
		out.TextOffset = append(out.TextOffset, e.offset)
		top := map[string]float32{}
		for _, a := range e.lp.Top {
			if at := s.tokenText(a.ID); !hasKey(top, at) {
				top[at] = a.Logprob
			}
		}
		if !hasKey(top, t) {
			top[t] = e.lp.Logprob
		}
		out.TopLogprobs = append(out.TopLogprobs, top)
	}
	return out
}

func hasKey(m map[string]float32, k string) bool { _, ok := m[k]; return ok }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// sseWriter writes one response's server-sent events.
type sseWriter struct {
	s       *Server
	w       http.ResponseWriter
	rc      *http.ResponseController
	g       *generation
	timeout time.Duration
}

// startSSE opens the stream: chat sends each choice's assistant role first
// (as OpenAI does), completions with echo each choice's prompt text.
func (s *Server) startSSE(w http.ResponseWriter, r *http.Request, g *generation) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	sw := &sseWriter{s: s, w: w, rc: http.NewResponseController(w), g: g, timeout: s.cfg.WriteTimeout}
	for i := range len(g.prompts) * g.p.n {
		if g.chat {
			empty := ""
			_ = sw.event(sw.chatChunk(i, chatDelta{Role: "assistant", Content: &empty}, nil, nil))
		} else if g.p.echo {
			_ = sw.event(sw.completionChunk(i, g.prompts[i/g.p.n].echo, nil, nil))
		}
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

func (sw *sseWriter) chatChunk(index int, d chatDelta, lp *chatLogprobs, finish *string) chatChunk {
	return chatChunk{ID: sw.g.id, Object: "chat.completion.chunk", Created: sw.g.created, Model: sw.g.model,
		Choices: []chatChunkChoice{{Index: index, Delta: d, Logprobs: lp, FinishReason: finish}}}
}

func (sw *sseWriter) completionChunk(index int, text string, lp *completionLogprobs, finish *string) completionResponse {
	return completionResponse{ID: sw.g.id, Object: "text_completion", Created: sw.g.created, Model: sw.g.model,
		Choices: []completionChoice{{Text: text, Index: index, Logprobs: lp, FinishReason: finish}}}
}

// chunk sends text (possibly empty) of one choice with the logprobs of the
// tokens it completes, and the finish reason on the choice's last chunk.
func (sw *sseWriter) chunk(index int, t string, lps []tokenLogprob, finish *string) error {
	if sw.g.chat {
		var d chatDelta
		if t != "" {
			d.Content = &t
		}
		return sw.event(sw.chatChunk(index, d, sw.s.chatLogprobs(sw.g, lps), finish))
	}
	return sw.event(sw.completionChunk(index, t, sw.s.completionLogprobs(sw.g, lps), finish))
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

// submit hands every choice to the engine as its own request, with its own
// pages and handoff; each passes the engine's admission. It is all or
// nothing: when one is refused the others are cancelled and drained, and
// the refusal is the answer.
//
// Seeds: choice j of a prompt uses seed+j (vLLM's rule for n > 1), so a
// seeded request replays and its choices differ; unseeded choices draw
// their own random seeds.
func (s *Server) submit(r *http.Request, g *generation) ([]engine.Stream, error) {
	var streams []engine.Stream
	for i, gp := range g.prompts {
		for j := range g.p.n {
			sp := g.p.sampling
			if g.p.seedGiven {
				sp.Seed = g.p.seed + uint64(j)
			} else {
				sp.Seed = randomSeed()
			}
			req := &engine.Request{
				ID:        g.id,
				Tenant:    g.tenant,
				Prompt:    gp.tokens,
				MaxTokens: g.p.maxTokens,
				IgnoreEOS: g.p.ignoreEOS,
				Sampling:  sp,
				Weight:    s.cfg.Keys.Weight(g.tenant),
				// The tenant comes from the API key; the scope only
				// narrows prefix-cache sharing within it.
				CacheScope: g.p.cacheScope,
			}
			if len(g.prompts)*g.p.n > 1 {
				req.ID = fmt.Sprintf("%s-%d", g.id, i*g.p.n+j)
			}
			// The client's context reaches Submit so that a client
			// leaving while its request waits in the engine's queue
			// leaves the queue at once and never reserves. Once admitted,
			// a disconnect is reported by run through Stream.Cancel and
			// the handoff ends by the normal path (I10); one during the
			// Reserve call is aborted by the engine, and decode refuses
			// the Reserve the Abort overtook (I6).
			st, err := s.cfg.Engine.Submit(r.Context(), req)
			if err != nil {
				s.drain(g, streams)
				return nil, err
			}
			streams = append(streams, st)
		}
	}
	return streams, nil
}

// drain cancels streams and reads each to its terminal event (bounded by
// cancelGrace), so a refused request leaves nothing behind in the engine.
func (s *Server) drain(g *generation, streams []engine.Stream) {
	deadline := time.After(cancelGrace)
	for _, st := range streams {
		st.Cancel()
	}
	for _, st := range streams {
		for done := false; !done; {
			select {
			case ev, ok := <-st.Events():
				done = !ok || ev.Done || ev.Err != nil
			case <-deadline:
				s.log.Error("the engine did not end a cancelled request", "id", g.id, "grace", cancelGrace)
				return
			}
		}
	}
}

// acquireMore takes k more concurrency slots (tenant and server) for the
// extra choices of a request: each choice is an engine request, so n > 1
// must not let one tenant hold more of the engine than its limit allows.
// It is all or nothing and refuses at once, like acquire. A request of
// more choices than a limit allows can never be admitted: that is a 400
// naming param, not a 429 its client would retry for ever.
func (s *Server) acquireMore(tenant string, k int, param string) (func(), *apiError) {
	if lim := s.cfg.TenantConcurrency; lim > 0 && k+1 > lim {
		return nil, badParam(param, "this request makes %d choices (prompts x n), each a concurrent request, and your API key's tenant may run %d at once; send fewer", k+1, lim)
	}
	if lim := cap(s.slots); k+1 > lim {
		return nil, badParam(param, "this request makes %d choices (prompts x n), each a concurrent request, and the server runs at most %d at once; send fewer", k+1, lim)
	}
	var releases []func()
	release := func() {
		for _, r := range releases {
			r()
		}
	}
	for range k {
		r, e := s.acquire(tenant)
		if e != nil {
			release()
			return nil, e
		}
		releases = append(releases, r)
	}
	return release, nil
}

// sse0 returns the stream's writer, starting it on first use.
func sse0(sw **sseWriter, start func() *sseWriter) func() *sseWriter {
	return func() *sseWriter {
		if *sw == nil {
			*sw = start()
		}
		return *sw
	}
}

// toolMarkers start a call in a model's own format (Hermes/Qwen, Llama
// 3.1 with its python tag, Llama 3.1 bare JSON).
const hermesOpen = "<tool_call>"

// streamAuto says how many more bytes of an auto choice's text may go out
// as content now: none once the text may be a call (it starts with "{" or
// "<|python_tag|>", or holds "<tool_call>"); up to a possible start of
// "<tool_call>" otherwise.
func streamAuto(c *choice) int {
	if c.held {
		return 0
	}
	text := c.text.String()
	if c.sent == 0 {
		lead := strings.TrimLeft(text, " \t\r\n")
		if lead == "" || strings.HasPrefix("<|python_tag|>", lead) || strings.HasPrefix(hermesOpen, lead) {
			return 0 // undecided
		}
		if strings.HasPrefix(lead, "{") || strings.HasPrefix(lead, "<|python_tag|>") {
			c.held = true
			return 0
		}
	}
	rest := text[c.sent:]
	if i := strings.Index(rest, hermesOpen); i >= 0 {
		c.held = true
		return i
	}
	hold := 0
	for n := min(len(hermesOpen)-1, len(rest)); n > 0; n-- {
		if strings.HasSuffix(rest, hermesOpen[:n]) {
			hold = n
			break
		}
	}
	return len(rest) - hold
}

// scanRequired reads the start of a required call's text, the object
// {"name": ..., "arguments": ...} the grammar constrains it to: the name
// once its string is complete ("" before), where the arguments value
// starts in text (-1: not yet) and where it ends (-1: not yet). Its bytes
// text[start:end] are the call's arguments exactly as toolCalls reads
// them from the finished text (the value's raw JSON), so a stream sends
// them fragment by fragment as they are generated.
func scanRequired(text string) (name string, start, end int) {
	start, end = -1, -1
	i := skipWS(text, 0)
	if i >= len(text) || text[i] != '{' {
		return "", -1, -1
	}
	i++
	for {
		i = skipWS(text, i)
		if i >= len(text) || text[i] != '"' {
			return name, start, end
		}
		k, ok := jsonEnd(text, i)
		if !ok {
			return name, start, end
		}
		key := text[i:k]
		i = skipWS(text, k)
		if i >= len(text) || text[i] != ':' {
			return name, start, end
		}
		i = skipWS(text, i+1)
		if i >= len(text) {
			return name, start, end
		}
		v, ok := jsonEnd(text, i)
		switch key {
		case `"arguments"`:
			start = i
			if !ok {
				return name, start, end
			}
			end = v
		case `"name"`:
			if !ok {
				return name, start, end
			}
			var n string
			if json.Unmarshal([]byte(text[i:v]), &n) == nil {
				name = n
			}
		}
		if !ok {
			return name, start, end
		}
		i = skipWS(text, v)
		if i >= len(text) || text[i] != ',' {
			return name, start, end
		}
		i++
	}
}

func skipWS(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// jsonEnd is the end of the JSON value that starts at s[i], and whether
// it is complete within s. A number or literal is complete only when a
// byte after it shows it ended.
func jsonEnd(s string, i int) (int, bool) {
	depth, inStr := 0, false
	for j := i; j < len(s); j++ {
		c := s[j]
		if inStr {
			switch c {
			case '\\':
				j++
			case '"':
				inStr = false
				if depth == 0 {
					return j + 1, true
				}
			}
			continue
		}
		switch c {
		case '"':
			inStr = true
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return j + 1, true
			}
			if depth < 0 {
				return j, true // the end of a literal inside its parent
			}
		case ',', ' ', '\t', '\n', '\r', ':':
			if depth == 0 {
				return j, true
			}
		}
	}
	return len(s), false
}

// readTools reads a finished choice's held text as tool calls (or plain
// content). A choice that ended by the grammar with calls finishes
// "tool_calls", as OpenAI's do.
func (s *Server) readTools(g *generation, c *choice) {
	calls, content, ok := g.p.tools.toolCalls(c.text.String())
	if !ok {
		return
	}
	c.calls, c.content = calls, content
	if c.finish == "stop" {
		c.finish = "tool_calls"
	}
}

// sendTools streams a finished tool-calling choice: its content, if any,
// then each call as OpenAI's clients assemble it: a first chunk with the
// index, id, type and name (arguments ""), then the arguments.
func (s *Server) sendTools(sw func() *sseWriter, c *choice, out *outcome, gone func()) {
	if out.clientGone || out.err != nil {
		return
	}
	var deltas []chatDelta
	text := c.text.String()
	switch {
	case c.callID != "":
		// A named or required call, streamed as it came.
	case len(c.calls) == 0 && len(text) > c.sent:
		rest := text[c.sent:]
		deltas = append(deltas, chatDelta{Content: &rest})
	case len(c.calls) > 0:
		// Content before the first call that was not streamed yet.
		if c.content != nil && c.sent < len(*c.content) {
			if i := strings.Index(text, *c.content); i >= 0 && i+len(*c.content) > c.sent {
				rest := text[max(c.sent, i) : i+len(*c.content)]
				deltas = append(deltas, chatDelta{Content: &rest})
			}
		}
		for i, tc := range c.calls {
			head := tc
			head.Index = &i
			head.Function.Arguments = ""
			args := toolCallJSON{Index: &i}
			args.Function.Arguments = tc.Function.Arguments
			deltas = append(deltas, chatDelta{ToolCalls: []toolCallJSON{head}}, chatDelta{ToolCalls: []toolCallJSON{args}})
		}
	}
	for _, d := range deltas {
		w := sw()
		if err := w.event(w.chatChunk(c.index, d, nil, nil)); err != nil {
			gone()
			return
		}
	}
}
