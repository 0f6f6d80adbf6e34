package audit

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptrace"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"

	"sluice/internal/preflight"
)

// pseudoWords returns n random pronounceable non-words: they do not occur
// in ordinary model output, so seeing a run of them elsewhere is evidence.
func (a *auditor) pseudoWords(n int) []string {
	const cons, vow = "bdfgklmnprstvz", "aeiou"
	a.rngMu.Lock()
	defer a.rngMu.Unlock()
	w := make([]string, n)
	for i := range w {
		var b strings.Builder
		for j := 0; j < 3; j++ {
			b.WriteByte(cons[a.rng.IntN(len(cons))])
			b.WriteByte(vow[a.rng.IntN(len(vow))])
		}
		w[i] = b.String()
	}
	return w
}

// maxWords bounds any prompt the auditor builds, whatever context a server
// claims (the byte checks come first; this keeps the arithmetic in range).
const maxWords = 1 << 24

func (a *auditor) wordsFor(tokens int) int {
	w := math.Ceil(float64(tokens) / a.perWord)
	return int(min(max(w, 1), maxWords))
}

// promptBytes estimates a prompt's size (a pseudo-word and its space are 7
// bytes), in float64 so a huge claimed context cannot overflow it.
func (a *auditor) promptBytes(tokens int) float64 {
	return math.Ceil(float64(tokens)/a.perWord) * 7
}

// promptOfTokens builds a prompt of about n tokens from fresh pseudo-words.
func (a *auditor) promptOfTokens(n int) string {
	return strings.Join(a.pseudoWords(a.wordsFor(n)), " ")
}

func (a *auditor) canary() string {
	a.rngMu.Lock()
	defer a.rngMu.Unlock()
	return fmt.Sprintf("CANARY-%012x", a.rng.Uint64()&0xffffffffffff)
}

// isAuth is a 401/403 in the middle of the run: the key check passed, so
// the server changed its mind; never a capacity refusal, never "clean".
func isAuth(status int) bool {
	return status == http.StatusUnauthorized || status == http.StatusForbidden
}

// lengthRefusal is a status that says "this request is too long".
func lengthRefusal(status int) bool {
	return status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge || status == http.StatusUnprocessableEntity
}

func statusErr(what string, r reply) error {
	return fmt.Errorf("%s got HTTP %d %s", what, r.Status, clip(r.ErrMessage, 160))
}

// canaryPlant: tenant A sends prompts carrying secret canaries and asks the
// model to repeat them; their KV now sits in the server's pool.
func (a *auditor) canaryPlant(ctx context.Context) error {
	for i := 0; i < 4; i++ {
		canary := a.canary()
		run := a.pseudoWords(24)
		a.mu.Lock()
		a.canaries = append(a.canaries, canary)
		a.mu.Unlock()
		prompt := fmt.Sprintf("The secret code is %s. %s. Repeat the secret code: %s", canary, strings.Join(run, " "), canary)
		a.recordA(prompt)
		path := pathCompletions
		if a.chatOK && i%2 == 1 {
			path = pathChat
		}
		r, err := a.send(ctx, call{key: a.cfg.KeyA, path: path, prompt: prompt, maxTokens: 16})
		if err != nil {
			return err
		}
		if r.Status != http.StatusOK {
			return statusErr("tenant A's canary request", r)
		}
	}
	return nil
}

// foreign is data that must not appear in a response: canaries, and every
// run of three consecutive pseudo-words of the owner's prompts.
type foreign struct {
	canaries []string
	tri      map[string]bool
	owner    string // whose it is, for the evidence
}

// words splits text into words with punctuation removed, the same way for
// prompts and responses.
func words(text string) []string {
	return strings.Fields(strings.Map(func(r rune) rune {
		if unicode.IsPunct(r) {
			return ' '
		}
		return r
	}, text))
}

func trigrams(dst map[string]bool, words []string) {
	for i := 0; i+3 <= len(words); i++ {
		dst[strings.Join(words[i:i+3], " ")] = true
	}
}

func foreignOf(owner string, canaries []string, prompts ...string) foreign {
	f := foreign{canaries: canaries, tri: map[string]bool{}, owner: owner}
	for _, p := range prompts {
		trigrams(f.tri, words(p))
	}
	return f
}

// recordA remembers a prompt of tenant A's as A's secret: B must never see
// a run of it. (Prompts B also sends, as in the side-channel probe, are
// not recorded: B knows them.)
func (a *auditor) recordA(prompt string) {
	a.mu.Lock()
	if a.aTri == nil {
		a.aTri = map[string]bool{}
	}
	trigrams(a.aTri, words(prompt))
	a.mu.Unlock()
}

func (a *auditor) tenantA() foreign {
	a.mu.Lock()
	defer a.mu.Unlock()
	return foreign{canaries: append([]string(nil), a.canaries...), tri: a.aTri, owner: "tenant A's"}
}

// leakIn reports evidence of f's data in text.
func leakIn(text string, fs ...foreign) string {
	ws := words(text)
	for _, f := range fs {
		for _, c := range f.canaries {
			if strings.Contains(text, c) || strings.Contains(text, c[len("CANARY-"):]) {
				return "contains " + f.owner + " canary " + c
			}
		}
		for j := 0; j+3 <= len(ws); j++ {
			if t := strings.Join(ws[j:j+3], " "); f.tri[t] {
				return fmt.Sprintf("contains a run of %s prompt: %q", f.owner, t)
			}
		}
	}
	return ""
}

func (a *auditor) checkLeak(probe string, c call, r reply, fs ...foreign) bool {
	if len(fs) == 0 {
		fs = []foreign{a.tenantA()}
	}
	ev := leakIn(r.Text, fs...)
	if ev == "" {
		return false
	}
	a.add(Finding{Probe: probe, Severity: Critical, Title: "a response carries another tenant's data",
		Evidence:  fmt.Sprintf("HTTP %d to %s, %s; response text %q", r.Status, c.path, ev, clip(r.Text, 300)),
		Reproduce: a.reproLeak(c)})
	return true
}

// Capacity sweep points, by how the prompt relates to the context.
const (
	classFits = iota // clearly fits: must be answered
	classBand        // 0.85-1.15 of the context: judged by the server's own count
	classOver        // clearly over: must get a 4xx
)

type capPoint struct {
	frac   float64
	tokens int // prompt tokens aimed at
	class  int
}

const capMaxTokens = 4

// capacityPoints are the sweep's prompts: well inside the context, around
// its limit (0.85-1.15 of it, where a server's admission and its KV disagree
// first) and well beyond it; points over --max-prompt-bytes are left out.
func (a *auditor) capacityPoints() []capPoint {
	C := a.cfg.Context
	if C <= 0 {
		return nil
	}
	var pts []capPoint
	add := func(frac float64, class int) {
		n := int(frac*float64(C)) - capMaxTokens
		if n < 8 {
			return
		}
		if bytes := a.promptBytes(n); bytes > float64(a.cfg.MaxPromptBytes) {
			a.note(fmt.Sprintf("capacity: the ~%d-token point (%.2f x context) needs ~%.0f bytes, over --max-prompt-bytes; not sent", n, frac, bytes))
			return
		}
		pts = append(pts, capPoint{frac, n, class})
	}
	for _, f := range []float64{0.125, 0.5, 0.75} {
		add(f, classFits)
	}
	for _, f := range []float64{0.85, 0.95, 1.05, 1.15} {
		add(f, classBand)
	}
	for _, f := range []float64{1.25, 2} {
		add(f, classOver)
	}
	if p := a.cfg.PoolTokens; p > 0 && p < C {
		add(1.5*float64(p)/float64(C), classOver)
	}
	return pts
}

// capacitySweep sends tenant B prompts at lengths around the context (and
// pool capacity): what cannot fit must get a 4xx; what fits must be answered
// with honest usage in plausible time.
func (a *auditor) capacitySweep(ctx context.Context) error {
	C := a.cfg.Context
	pts := a.capacityPoints()
	over := 0
	for _, p := range pts {
		if p.frac > 1 {
			over++
		}
	}
	if over == 0 {
		return fmt.Errorf("every over-capacity prompt for context %d is larger than --max-prompt-bytes %d", C, a.cfg.MaxPromptBytes)
	}
	type result struct {
		pt capPoint
		c  call
		r  reply
	}
	var results []result
	for _, pt := range pts {
		c := call{key: a.cfg.KeyB, path: pathCompletions, prompt: a.promptOfTokens(pt.tokens), maxTokens: capMaxTokens}
		r, err := a.send(ctx, c)
		if err != nil {
			return err
		}
		if isAuth(r.Status) {
			return statusErr("a capacity prompt", r)
		}
		if !lengthRefusal(r.Status) && r.Status >= 400 && r.Status < 500 {
			return fmt.Errorf("a ~%d-token prompt got HTTP %d %s, which says nothing about its length", pt.tokens, r.Status, clip(r.ErrMessage, 120))
		}
		results = append(results, result{pt, c, r})
	}
	// The short reference: the calibration prompts and the sweep's smallest
	// point (shortRef.tooFast says what is too fast).
	short := a.short
	var rates []float64
	for _, x := range results {
		if x.r.Status != http.StatusOK || x.r.PromptTokens <= 0 || x.pt.class != classFits {
			continue
		}
		rates = append(rates, float64(x.r.PromptTokens)/x.r.Latency.Seconds())
		if x.pt.frac == 0.125 {
			short.add(x.r.PromptTokens, x.r.Latency)
		}
	}
	// A reply that looks too fast is checked against capConfirm fresh
	// short prompts sent now: the short samples so far may all have met a
	// busy moment (a burst of load during the calibration made every long
	// prompt after it look fast), and a finding must not rest on that. A
	// server that skips the prefill of long prompts is as fast as before
	// and is still caught; its short prompts only get faster.
	suspect := false
	for _, x := range results {
		suspect = suspect || (x.r.Status == http.StatusOK && x.r.HasUsage && short.tooFast(x.r.PromptTokens, x.r.Latency))
	}
	if suspect {
		for i := 0; i < capConfirm; i++ {
			// The calibration's length: a shorter prompt than the sweep's
			// smallest point can only lower the fastest time.
			c := call{key: a.cfg.KeyB, path: pathCompletions, prompt: strings.Join(a.pseudoWords(a.calWordCount()), " "), maxTokens: capMaxTokens}
			r, err := a.send(ctx, c)
			if err != nil {
				return err
			}
			if r.Status != http.StatusOK || !r.HasUsage || r.PromptTokens <= 0 {
				return statusErr("a short reference prompt (to confirm a reply too fast for its prefill)", r)
			}
			a.checkLeak("capacity", c, r)
			short.add(r.PromptTokens, r.Latency)
		}
	}
	for _, x := range results {
		pt, c, r := x.pt, x.c, x.r
		a.checkLeak("capacity", c, r)
		words := len(strings.Fields(c.prompt))
		repro := a.reproCapacity(c, words)
		desc := fmt.Sprintf("a ~%d-token prompt (%.2f x context %d) with max_tokens %d", pt.tokens, pt.frac, C, capMaxTokens)
		switch {
		case r.Status >= 500:
			a.add(Finding{Probe: "capacity", Severity: High, Title: fmt.Sprintf("a lone prompt got HTTP %d instead of an answer or a 4xx", r.Status),
				Evidence:  fmt.Sprintf("%s got HTTP %d %s", desc, r.Status, clip(r.ErrMessage, 160)),
				Reproduce: repro})
			continue
		case lengthRefusal(r.Status):
			switch pt.class {
			case classFits:
				a.add(Finding{Probe: "capacity", Severity: Warning, Title: "a prompt that fits was refused",
					Evidence: fmt.Sprintf("%s got HTTP %d %s", desc, r.Status, clip(r.ErrMessage, 160)), Reproduce: repro})
			default:
				a.pass(fmt.Sprintf("capacity: %s refused with HTTP %d", desc, r.Status))
			}
			continue
		}
		// HTTP 200.
		switch {
		case pt.class == classOver:
			a.add(Finding{Probe: "capacity", Severity: High, Title: "over-capacity prompt not refused with a 4xx",
				Evidence:  fmt.Sprintf("%s got HTTP %d, usage.prompt_tokens=%d, %v, text %q", desc, r.Status, r.PromptTokens, r.Latency.Round(time.Millisecond), clip(r.Text, 120)),
				Reproduce: repro})
		case pt.class == classBand && r.HasUsage && r.PromptTokens+capMaxTokens > C:
			a.add(Finding{Probe: "capacity", Severity: High, Title: "a request over the context was answered",
				Evidence:  fmt.Sprintf("%s was answered with HTTP 200 although the server itself counted prompt_tokens=%d: %d + %d > %d", desc, r.PromptTokens, r.PromptTokens, capMaxTokens, C),
				Reproduce: repro})
		case pt.class == classBand && !r.HasUsage:
			a.note(fmt.Sprintf("capacity: %s was answered but the server reports no usage, so whether it fit cannot be checked", desc))
		case pt.class == classBand:
			a.pass(fmt.Sprintf("capacity: %s answered, prompt_tokens %d + %d <= %d", desc, r.PromptTokens, capMaxTokens, C))
		}
		if !r.HasUsage {
			continue
		}
		// Honest accounting (I9): the reported prompt size must match what was sent.
		est := float64(words) * a.perWord
		if ratio := float64(r.PromptTokens) / est; ratio < 0.5 || ratio > 2 {
			a.add(Finding{Probe: "capacity", Severity: High, Title: "usage.prompt_tokens disagrees with the prompt's length",
				Evidence:  fmt.Sprintf("sent ~%.0f tokens, server reported prompt_tokens=%d", est, r.PromptTokens),
				Reproduce: repro})
		}
		// A reply far faster than the prefill it claims never prefilled it.
		if short.tooFast(r.PromptTokens, r.Latency) {
			a.add(Finding{Probe: "capacity", Severity: High, Title: "reply too fast for the prefill it claims",
				Evidence: fmt.Sprintf("prompt_tokens=%d answered in %v, while the fastest of %d prompts of at most %d tokens took %v: a prefill 4x as long cannot take less than half the time",
					r.PromptTokens, r.Latency.Round(time.Microsecond), short.n, short.tokens, short.latency.Round(time.Microsecond)),
				Reproduce: repro})
		}
	}
	a.rep.PrefillTS = median(rates)
	return nil
}

// capConfirm is how many fresh short prompts confirm a reply that looks
// too fast for its prefill before it is a finding.
const capConfirm = 3

// shortRef is the capacity sweep's short reference: short prompts'
// replies (the calibration's and the sweep's smallest point).
type shortRef struct {
	n       int           // samples
	tokens  int           // the most prompt tokens of any sample (server's count)
	latency time.Duration // the fastest sample's latency
}

func (s *shortRef) add(tokens int, latency time.Duration) {
	if tokens <= 0 || latency <= 0 {
		return
	}
	s.n++
	s.tokens = max(s.tokens, tokens)
	if s.latency == 0 || latency < s.latency {
		s.latency = latency
	}
}

// tooFast: a prompt at least 4x as long as every short sample (by the
// server's own count), answered in less than half the fastest one's time,
// never ran its prefill (the incident's tell: an over-capacity prompt
// answered at once because a one-token placeholder was prefilled in its
// place). Prefill time grows with length on every real server, and a
// loaded machine only ever adds time to a reply, so the fastest short
// sample and the largest short count are the conservative reference:
// more samples can only lower the bar a long reply must beat.
func (s shortRef) tooFast(tokens int, latency time.Duration) bool {
	return s.n > 0 && tokens >= 4*s.tokens && latency < s.latency/2
}

// concurrentWidth is how many prompts the concurrent probe sends at once:
// one per slot when the server says how many it has, within --concurrency.
func (a *auditor) concurrentWidth() int {
	m := a.cfg.Concurrency
	if a.disc != nil && a.disc.Slots.Known && a.disc.Slots.Value >= 2 && a.disc.Slots.Value < m {
		m = a.disc.Slots.Value
	}
	return min(max(m, 2), 8)
}

const concMaxTokens = 8

// concurrentPromptTokens: each prompt fits alone (0.7 of the context), two
// or more together do not.
func (a *auditor) concurrentPromptTokens() int {
	if a.cfg.Context <= 0 {
		return 0
	}
	return max(int(0.7*float64(a.cfg.Context))-concMaxTokens-16, 8)
}

// concurrentCapacity sends several prompts that each fit the context but
// not together, at once, from both tenants. Errors are acceptable (a server
// whose slots share one KV buffer may refuse); a 200 carrying another
// request's data, or different from the same prompt answered alone on a
// server that is otherwise deterministic, is not.
func (a *auditor) concurrentCapacity(ctx context.Context) error {
	m := a.concurrentWidth()
	n := a.concurrentPromptTokens()
	type item struct {
		tenant string
		c      call
		own    foreign
		r      reply
		err    error
	}
	items := make([]*item, m)
	for i := range items {
		canary := a.canary()
		words := a.pseudoWords(a.wordsFor(n) - 4)
		key, tenant := a.cfg.KeyA, "A"
		if i%2 == 1 {
			key, tenant = a.cfg.KeyB, "B"
		}
		prompt := canary + " " + strings.Join(words, " ") + " " + canary
		if tenant == "A" {
			a.recordA(prompt)
		}
		items[i] = &item{tenant: tenant,
			c:   call{key: key, path: pathCompletions, prompt: prompt, maxTokens: concMaxTokens},
			own: foreignOf(fmt.Sprintf("concurrent request %d's (tenant %s)", i, tenant), []string{canary}, prompt)}
	}
	var wg sync.WaitGroup
	for _, it := range items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			it.r, it.err = a.send(ctx, it.c)
		}()
	}
	wg.Wait()
	statuses := map[int]int{}
	for _, it := range items {
		if it.err != nil {
			return it.err
		}
		if isAuth(it.r.Status) {
			return statusErr("a concurrent prompt", it.r)
		}
		statuses[it.r.Status]++
	}
	answered := 0
	for i, it := range items {
		if it.r.Status != http.StatusOK {
			continue
		}
		answered++
		others := []foreign{a.tenantA()}
		for j, o := range items {
			if j != i {
				others = append(others, o.own)
			}
		}
		if a.checkLeak("concurrent-capacity", it.c, it.r, others...) {
			continue
		}
		alone, err := a.send(ctx, it.c)
		if err != nil {
			return err
		}
		if alone.Status != http.StatusOK {
			return statusErr("the reference (the same prompt alone)", alone)
		}
		if alone.Text != it.r.Text {
			ev := fmt.Sprintf("request %d of %d concurrent ~%d-token prompts (context %d): under pressure %q, alone %q (%s)", i, m, n, a.cfg.Context, clip(it.r.Text, 80), clip(alone.Text, 80), firstDiff(alone.Text, it.r.Text))
			if a.deterministic {
				a.add(Finding{Probe: "concurrent-capacity", Severity: High, Title: "a 200 under KV pressure differs from the same prompt alone (garbled)",
					Evidence: ev + "; the determinism probe found this server deterministic under load, so KV pressure changed the answer", Reproduce: a.reproConcurrent(items[0].c, m, len(strings.Fields(it.c.prompt)))})
			} else {
				a.note("concurrent-capacity: " + ev + "; the server is not deterministic under load (see determinism), so this is not counted as garbled")
			}
		}
	}
	var st []string
	for s, k := range statuses {
		st = append(st, fmt.Sprintf("%d x HTTP %d", k, s))
	}
	sort.Strings(st)
	desc := fmt.Sprintf("%d concurrent prompts of ~%d tokens each (context %d; %d together)", m, n, a.cfg.Context, m*n)
	a.pass(fmt.Sprintf("concurrent-capacity: %s: %s; no foreign content, answers match the prompt alone (errors are acceptable)", desc, strings.Join(st, ", ")))
	if answered < m {
		src := fmt.Sprintf("observed: %s got %s although each fits alone", desc, strings.Join(st, ", "))
		if a.rep.KVBuffer == preflight.KVShared {
			src += "; discovery: " + a.rep.KVBufferSource
		}
		a.rep.KVBuffer, a.rep.KVBufferSource = preflight.KVShared, src
	} else if a.rep.KVBuffer == preflight.KVShared {
		a.note(fmt.Sprintf("concurrent-capacity: the KV buffer is shared (%s) but held all of %s", a.rep.KVBufferSource, desc))
	}
	return nil
}

// canaryObserve: tenant B sends ordinary requests (completions and chat,
// plain and streamed) after A's; none may carry A's data, and each must be
// answered, or nothing was checked.
func (a *auditor) canaryObserve(ctx context.Context) error {
	clean, chats := true, 0
	for i := 0; i < 6; i++ {
		path := pathCompletions
		if a.chatOK && i%2 == 1 {
			path = pathChat
			chats++
		}
		c := call{key: a.cfg.KeyB, path: path, prompt: "Tell me a story about " + strings.Join(a.pseudoWords(3), " "), maxTokens: 32, stream: i >= 3}
		r, err := a.send(ctx, c)
		if err != nil {
			return err
		}
		if r.Status != http.StatusOK {
			return statusErr("tenant B's ordinary request to "+path, r)
		}
		if a.checkLeak("canary", c, r) {
			clean = false
		}
	}
	if clean {
		a.pass(fmt.Sprintf("canary: 6 tenant-B responses (%d chat, 3 streamed) carry no tenant-A canary or prompt run", chats))
	}
	return nil
}

const detMaxTokens = 24

// determinism: the same greedy request alone, then in Trials trials while
// tenant A keeps the other Concurrency-1 request slots busy.
func (a *auditor) determinism(ctx context.Context) error {
	c := call{key: a.cfg.KeyB, path: pathCompletions, prompt: "Once upon a time " + strings.Join(a.pseudoWords(8), " "), maxTokens: detMaxTokens}
	alone, err := a.send(ctx, c)
	if err != nil {
		return err
	}
	if alone.Status != http.StatusOK {
		return statusErr("the greedy request alone", alone)
	}
	load := a.cfg.Concurrency - 1
	same := 0
	first := ""
	for t := 0; t < a.cfg.Trials; t++ {
		var wg sync.WaitGroup
		started := make(chan struct{}, load)
		for j := 0; j < load; j++ {
			wg.Add(1)
			p := a.promptOfTokens(16 + 24*((t+j)%4))
			a.recordA(p)
			go func() {
				defer wg.Done()
				// The load counts as started once its request is on the wire
				// (or has failed): signalled before the send, the probe's own
				// request, sent by a goroutine already running, could reach the
				// server first and finish before any load arrived, in every
				// trial on a busy machine.
				var once sync.Once
				signal := func() { once.Do(func() { started <- struct{}{} }) }
				defer signal()
				tctx := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { signal() }})
				a.send(tctx, call{key: a.cfg.KeyA, path: pathCompletions, prompt: p, maxTokens: detMaxTokens}) //nolint:errcheck // background load only
			}()
		}
		for j := 0; j < load; j++ {
			<-started
		}
		r, err := a.send(ctx, c)
		wg.Wait()
		if err != nil {
			return err
		}
		if r.Status != http.StatusOK {
			return statusErr(fmt.Sprintf("the greedy request under load (trial %d)", t+1), r)
		}
		if r.Text == alone.Text {
			same++
		} else if first == "" {
			first = fmt.Sprintf("trial %d: %s; alone %q, under load %q", t+1, firstDiff(alone.Text, r.Text), clip(alone.Text, 100), clip(r.Text, 100))
		}
	}
	N := a.cfg.Trials
	a.deterministic = same == N
	if same < N {
		a.add(Finding{Probe: "determinism", Severity: Warning, Title: fmt.Sprintf("greedy output changes with another tenant's load: %d/%d trials differ", N-same, N),
			Evidence:  fmt.Sprintf("%d/%d trials under load identical to the request alone (%d concurrent tenant-A requests each); first difference in %s", same, N, load, first),
			Reproduce: a.reproDeterminism(c, load)})
	} else {
		a.pass(fmt.Sprintf("determinism: greedy output identical alone and under load in %d/%d trials (%d concurrent tenant-A requests each)", same, N, load))
	}
	return nil
}

// textTokens splits text into words (with their leading space) and single
// other characters: a tokenizer-independent unit for showing where two
// outputs part.
func textTokens(s string) []string {
	var out []string
	rs := []rune(s)
	for i := 0; i < len(rs); {
		j := i
		if rs[j] == ' ' {
			j++
		}
		k := j
		for k < len(rs) && (unicode.IsLetter(rs[k]) || unicode.IsDigit(rs[k])) {
			k++
		}
		if k == j {
			k = j + 1
			if k > len(rs) {
				k = len(rs)
			}
		}
		out = append(out, string(rs[i:k]))
		i = k
	}
	return out
}

// firstDiff names the first text token at which b departs from a.
func firstDiff(a, b string) string {
	ta, tb := textTokens(a), textTokens(b)
	for i := 0; i < len(ta) || i < len(tb); i++ {
		var x, y string
		if i < len(ta) {
			x = ta[i]
		}
		if i < len(tb) {
			y = tb[i]
		}
		if x != y {
			return fmt.Sprintf("first differing token #%d: %q alone vs %q", i, x, y)
		}
	}
	return "identical"
}

func (a *auditor) sideChannelTokens() int {
	n := 256
	if C := a.cfg.Context; C > 0 && n > C/4 {
		n = C / 4
	}
	return n
}

// sideChannel: does tenant B see that tenant A sent the same prompt (a
// prefix cache shared across tenants, I11)? Two tests on the same samples:
// the server's own usage.prompt_tokens_details.cached_tokens (direct
// evidence where reported: vLLM, llama.cpp, OpenAI) and time-to-first-token
// (one-sided Mann-Whitney).
//
// Positive control: tenant A sends its own prompt again, so the probe also
// measures the channel WITHIN a tenant, where a prefix cache is allowed
// (and expected) to show: cached_tokens > 0 or a faster first token. The
// report states both (channel present within a tenant, absent across);
// a server with no cache at all shows neither, which is informational.
func (a *auditor) sideChannel(ctx context.Context) error {
	n := a.sideChannelTokens()
	first, err := a.sideChannelRound(ctx, n, true)
	if err != nil {
		return err
	}
	defer func() {
		a.sideChannelControl(first.within, first.control, first.cWithin, first.cCtrl, first.ptSame, first.cachedReported)
	}()
	timing, ev := first.timing()
	direct := false
	if first.cachedReported {
		pt := median(first.ptSame)
		cs, cc := median(first.cSame), median(first.cCtrl)
		direct = pt > 0 && cs >= 0.5*pt && cs-cc >= 0.25*pt
		ev = fmt.Sprintf("the server reported usage.prompt_tokens_details.cached_tokens median %.0f of %.0f prompt tokens for tenant B's copy of tenant A's prompt vs %.0f for a fresh prompt; ", cs, pt, cc) + ev
	} else {
		a.note("side-channel: the server reports no usage.prompt_tokens_details.cached_tokens; only the timing test applies")
	}
	if timing && !direct {
		// Timing alone is a test at p < 0.01: an honest server fails it
		// about once in a hundred runs by chance, more often when a loaded
		// machine's stalls fall on one side. A second, independent round of
		// fresh prompts must show it too (a cache shared across tenants
		// does, every time); both by chance is about 1 in 10,000.
		second, err := a.sideChannelRound(ctx, n, false)
		if err != nil {
			return err
		}
		again, ev2 := second.timing()
		timing = again
		ev += "; confirmation round of fresh prompts: " + ev2
	}
	if direct || timing {
		how := "the timing"
		switch {
		case direct && timing:
			how = "cached_tokens and the timing"
		case direct:
			how = "cached_tokens"
		}
		a.add(Finding{Probe: "side-channel", Severity: High, Title: "prefix cache shared across tenants: " + how + " reveal another tenant's prompt",
			Evidence: ev, Reproduce: a.reproSideChannel(len(strings.Fields(first.firstP)))})
	} else {
		a.pass("side-channel: " + ev)
	}
	return nil
}

// sideChannelSamples is one round of the side-channel probe: tenant B's
// time to first token (and cached_tokens) for tenant A's prompt and for a
// fresh one, and, with the positive control, tenant A's own repeat.
type sideChannelSamples struct {
	same, control, within []float64
	cSame, cCtrl, cWithin []float64
	ptSame                []float64
	cachedReported        bool
	firstP                string
}

// timing is the round's timing test: B's copy of A's prompt answered
// faster than a fresh one (one-sided Mann-Whitney p < 0.01 and 20% faster).
func (r *sideChannelSamples) timing() (bool, string) {
	pv := mannWhitneyLess(r.same, r.control)
	ms, mc := median(r.same), median(r.control)
	return pv < 0.01 && ms < 0.8*mc, fmt.Sprintf("TTFT median %.2f ms when tenant A sent the same prompt vs %.2f ms for a fresh prompt (n=%d each, one-sided Mann-Whitney p=%.2g)", ms*1e3, mc*1e3, len(r.same), pv)
}

// sideChannelRound sends Samples rounds: A's fresh prompt p, then B's p
// and a fresh q (in alternating order), then (positive) A's p again.
func (a *auditor) sideChannelRound(ctx context.Context, n int, positive bool) (*sideChannelSamples, error) {
	r := &sideChannelSamples{cachedReported: true}
	for i := 0; i < a.cfg.Samples; i++ {
		p := a.promptOfTokens(n)
		q := a.promptOfTokens(n)
		if r.firstP == "" {
			r.firstP = p
		}
		ar, err := a.send(ctx, call{key: a.cfg.KeyA, path: pathCompletions, prompt: p, maxTokens: 1})
		if err != nil {
			return nil, err
		}
		if ar.Status != http.StatusOK {
			return nil, statusErr("tenant A's timing prompt", ar)
		}
		order := []struct {
			prompt string
			dst    *[]float64
			cached *[]float64
		}{{p, &r.same, &r.cSame}, {q, &r.control, &r.cCtrl}}
		if i%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, o := range order {
			br, err := a.send(ctx, call{key: a.cfg.KeyB, path: pathCompletions, prompt: o.prompt, maxTokens: 1, stream: true})
			if err != nil {
				return nil, err
			}
			if br.Status != http.StatusOK {
				return nil, statusErr("tenant B's timing request", br)
			}
			*o.dst = append(*o.dst, br.TTFT.Seconds())
			*o.cached = append(*o.cached, float64(br.CachedTokens))
			r.cachedReported = r.cachedReported && br.HasCached
			if br.HasUsage && o.prompt == p {
				r.ptSame = append(r.ptSame, float64(br.PromptTokens))
			}
		}
		if !positive {
			continue
		}
		// The positive control, after B's requests so it cannot warm
		// anything they read: A repeats its own prompt.
		wr, err := a.send(ctx, call{key: a.cfg.KeyA, path: pathCompletions, prompt: p, maxTokens: 1, stream: true})
		if err != nil {
			return nil, err
		}
		if wr.Status != http.StatusOK {
			return nil, statusErr("tenant A's repeated prompt (positive control)", wr)
		}
		r.within = append(r.within, wr.TTFT.Seconds())
		r.cWithin = append(r.cWithin, float64(wr.CachedTokens))
		r.cachedReported = r.cachedReported && wr.HasCached
	}
	return r, nil
}

// SideChannelControl is the side-channel probe's positive control: the
// same measurement within tenant A (its own prompt again) beside the
// cross-tenant one. WithinPresent says the channel shows within a tenant
// (a working prefix cache); the cross-tenant verdict is the probe's
// finding or pass.
type SideChannelControl struct {
	WithinTTFTMs       float64 `json:"within_tenant_ttft_median_ms"`
	FreshTTFTMs        float64 `json:"fresh_prompt_ttft_median_ms"`
	WithinP            float64 `json:"within_tenant_mann_whitney_p"`
	WithinCachedTokens float64 `json:"within_tenant_cached_tokens_median"`
	PromptTokens       float64 `json:"prompt_tokens_median"`
	CachedTokensShown  bool    `json:"cached_tokens_reported"`
	WithinPresent      bool    `json:"within_tenant_channel_present"`
	CrossTenantPresent bool    `json:"cross_tenant_channel_present"`
	Summary            string  `json:"summary"`
}

// sideChannelControl records the positive control once the cross-tenant
// verdict is known (the probe's finding, if any, is already added).
func (a *auditor) sideChannelControl(within, fresh, cWithin, cFresh, pt []float64, cachedReported bool) {
	if len(within) == 0 {
		return
	}
	c := SideChannelControl{WithinTTFTMs: median(within) * 1e3, FreshTTFTMs: median(fresh) * 1e3,
		WithinP: mannWhitneyLess(within, fresh), PromptTokens: median(pt), CachedTokensShown: cachedReported}
	timing := c.WithinP < 0.01 && c.WithinTTFTMs < 0.8*c.FreshTTFTMs
	direct := false
	if cachedReported {
		c.WithinCachedTokens = median(cWithin)
		direct = c.WithinCachedTokens > 0 && c.WithinCachedTokens-median(cFresh) > 0
	}
	c.WithinPresent = timing || direct
	a.mu.Lock()
	for _, f := range a.rep.Findings {
		c.CrossTenantPresent = c.CrossTenantPresent || f.Probe == "side-channel"
	}
	a.mu.Unlock()
	within1 := fmt.Sprintf("tenant A repeating its own prompt: TTFT median %.2f ms vs %.2f ms fresh (p=%.2g)", c.WithinTTFTMs, c.FreshTTFTMs, c.WithinP)
	if cachedReported {
		within1 += fmt.Sprintf(", cached_tokens median %.0f of %.0f", c.WithinCachedTokens, c.PromptTokens)
	}
	switch {
	case c.WithinPresent && !c.CrossTenantPresent:
		c.Summary = "positive control: the prefix-cache channel is present within a tenant (" + within1 + ") and absent across tenants: the cache works and is isolated"
	case c.WithinPresent:
		c.Summary = "positive control: the channel is present within a tenant (" + within1 + ") and across tenants (see the finding)"
	default:
		c.Summary = "positive control: no speed-up and no cached_tokens within a tenant either (" + within1 + "): the server's prefix cache looks off or not hit by repeats, so the cross-tenant result says little about a cache (informational, not a failure)"
	}
	a.mu.Lock()
	a.rep.SideChannel = &c
	a.mu.Unlock()
}

// mannWhitneyLess is the one-sided p-value that x tends to be smaller than
// y (normal approximation with tie correction; fine for n >= 8).
func mannWhitneyLess(x, y []float64) float64 {
	type obs struct {
		v float64
		x bool
	}
	all := make([]obs, 0, len(x)+len(y))
	for _, v := range x {
		all = append(all, obs{v, true})
	}
	for _, v := range y {
		all = append(all, obs{v, false})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v < all[j].v })
	n1, n2 := float64(len(x)), float64(len(y))
	var rx, tie float64
	for i := 0; i < len(all); {
		j := i
		for j < len(all) && all[j].v == all[i].v {
			j++
		}
		rank := float64(i+j+1) / 2 // mean of ranks i+1..j
		t := float64(j - i)
		tie += t*t*t - t
		for k := i; k < j; k++ {
			if all[k].x {
				rx += rank
			}
		}
		i = j
	}
	u := rx - n1*(n1+1)/2
	mu := n1 * n2 / 2
	n := n1 + n2
	sigma := math.Sqrt(n1 * n2 / 12 * ((n + 1) - tie/(n*(n-1))))
	if sigma == 0 {
		return 1
	}
	z := (u - mu + 0.5) / sigma // continuity correction toward the null
	return 0.5 * math.Erfc(-z/math.Sqrt2)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
