package router

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"sluice/internal/ratelimit"
)

// admitRate charges g's tenant one request and the tokens g may use at
// most (every choice's prompt plus max_tokens) against its rate limits
// (rpm=, tpm= in the key file), and sets OpenAI's x-ratelimit-* headers on
// every answer to a limited tenant. It returns the tokens charged, to be
// settled by settleRate once the request is over, or the refusal.
func (s *Server) admitRate(w http.ResponseWriter, g *generation) (int64, *apiError) {
	var cost int64
	for _, gp := range g.prompts {
		cost += int64(max(g.p.n, 1)) * int64(len(gp.tokens)+max(g.p.maxTokens, 0))
	}
	d := s.limiter.Admit(g.tenant, s.now(), cost)
	if e := rateAnswer(w, d, cost, g); e != nil {
		return 0, e
	}
	if !d.Limited {
		return 0, nil
	}
	return cost, nil
}

// overRate refuses tenant's request before its body is decoded, rendered
// or tokenized when the tenant is over its rate limit now (no request of
// any size would pass admitRate), so a tenant past its limit costs the
// router one check per request rather than a template render and a
// tokenization; a tenant within its limit pays nothing here. The refusal
// is the same 429 admitRate gives, headers included.
func (s *Server) overRate(w http.ResponseWriter, tenant string) *apiError {
	return rateAnswer(w, s.limiter.Over(tenant, s.now()), 0, nil)
}

// rateAnswer sets OpenAI's x-ratelimit-* headers for a limited tenant and
// turns a refusal into its error: 400 when the request alone exceeds the
// tenant's whole per-minute tokens (cost is what it would use), 429 with
// Retry-After otherwise. g is the request when it is known (admitRate),
// so that a 400 can say what would fit.
func rateAnswer(w http.ResponseWriter, d ratelimit.Decision, cost int64, g *generation) *apiError {
	if !d.Limited {
		return nil
	}
	h := w.Header()
	st := d.State
	if st.HasRequests {
		h.Set("x-ratelimit-limit-requests", strconv.FormatInt(st.LimitRequests, 10))
		h.Set("x-ratelimit-remaining-requests", strconv.FormatInt(st.RemainingRequests, 10))
		h.Set("x-ratelimit-reset-requests", resetText(st.ResetRequests))
	}
	if st.HasTokens {
		h.Set("x-ratelimit-limit-tokens", strconv.FormatInt(st.LimitTokens, 10))
		h.Set("x-ratelimit-remaining-tokens", strconv.FormatInt(st.RemainingTokens, 10))
		h.Set("x-ratelimit-reset-tokens", resetText(st.ResetTokens))
	}
	switch {
	case d.TooLarge:
		if g == nil {
			return newErr(http.StatusBadRequest, CodeRateTooSmall, "max_tokens",
				"this request may use %d tokens (prompt plus max_tokens for every choice), more than your API key's whole limit of %d tokens per minute; lower max_tokens or split the request", cost, st.LimitTokens)
		}
		return tooLargeForRate(g, cost, st.LimitTokens)
	case !d.OK:
		// Whole seconds, rounded up, and the exact figure in
		// milliseconds (the header the official clients read first).
		h.Set("Retry-After", strconv.FormatInt(int64((d.RetryAfter+time.Second-1)/time.Second), 10))
		h.Set("retry-after-ms", strconv.FormatInt(int64((d.RetryAfter+time.Millisecond-1)/time.Millisecond), 10))
		return newErr(http.StatusTooManyRequests, CodeRateLimited, "",
			"your API key's tenant is over its rate limit (%s); retry after %s", limitsText(st), d.RetryAfter.Round(time.Millisecond))
	}
	return nil
}

// settleRate gives back the tokens charged and not used: a request that
// ended early, or failed, is charged what it prefilled and generated.
func (s *Server) settleRate(g *generation, charged int64, out outcome) {
	if charged == 0 {
		return
	}
	used := int64(out.prefilled) + int64(out.usage.CompletionTokens)
	s.limiter.Refund(g.tenant, s.now(), charged-used)
}

// resetText is a reset time as OpenAI writes it ("1s", "6m0s", "20ms").
func resetText(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%dms", (d+time.Millisecond-1)/time.Millisecond)
	}
	return d.Round(time.Second).String()
}

func limitsText(st ratelimit.State) string {
	switch {
	case st.HasRequests && st.HasTokens:
		return fmt.Sprintf("%d requests and %d tokens per minute", st.LimitRequests, st.LimitTokens)
	case st.HasRequests:
		return fmt.Sprintf("%d requests per minute", st.LimitRequests)
	}
	return fmt.Sprintf("%d tokens per minute", st.LimitTokens)
}

// tooLargeForRate is the refusal of a request that alone needs more tokens
// than its tenant's whole tpm: it names the largest max_tokens that fits,
// and says when max_tokens was the route's default (a chat request without
// it may generate the rest of the context): "lower max_tokens" sent a
// client that never set it looking for a value to lower.
func tooLargeForRate(g *generation, cost, limit int64) *apiError {
	n := int64(max(g.p.n, 1))
	var promptTokens int64
	for _, gp := range g.prompts {
		promptTokens += n * int64(len(gp.tokens))
	}
	choices := n * int64(len(g.prompts))
	fit := (limit - promptTokens) / max(choices, 1)
	msg := fmt.Sprintf("this request may use %d tokens (prompt plus max_tokens for every choice), more than your API key's whole limit of %d tokens per minute", cost, limit)
	if g.p.maxDefaulted {
		msg += fmt.Sprintf("; max_tokens was not given, so it defaults to %d (", g.p.maxTokens)
		if g.chat {
			msg += "the rest of the context)"
		} else {
			msg += "the completions default)"
		}
	}
	if fit >= 1 {
		msg += fmt.Sprintf(": set max_tokens to at most %d, or split the request", fit)
	} else {
		msg += fmt.Sprintf(": the prompts alone are %d tokens; shorten them or split the request", promptTokens)
	}
	return newErr(http.StatusBadRequest, CodeRateTooSmall, "max_tokens", "%s", msg)
}
