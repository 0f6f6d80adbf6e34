package audit

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"sluice/internal/preflight"
)

// Every finding carries a shell command that shows it again, with the two
// tenants' keys in $KEY_A and $KEY_B (never printed), and a fix line for the
// server type discovery detected.

// pwShell is a shell expression that prints n pseudo-words of the kind the
// auditor sends (seeded, so a command reproduces the same prompt each time).
func pwShell(n, seed int) string {
	return fmt.Sprintf(`$(awk -v n=%d -v s=%d 'BEGIN{srand(s);c="bdfgklmnprstvz";v="aeiou";for(i=0;i<n;i++){w="";for(j=0;j<3;j++)w=w substr(c,int(rand()*14)+1,1) substr(v,int(rand()*5)+1,1);printf "%%s ",w}}')`, n, seed)
}

func shellSingle(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func shellDouble(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "$", `\$`, "`", "\\`")
	return `"` + r.Replace(s) + `"`
}

const promptVar = "PROMPTxPLACEHOLDERx7f3a"

// curl is one request as a command. With promptShell set the prompt is
// that shell expression (for prompts too long to print).
func (a *auditor) curl(c call, promptShell string, extra string) string {
	keyVar := "$KEY_B"
	if c.key == a.cfg.KeyA && a.cfg.KeyA != a.cfg.KeyB {
		keyVar = "$KEY_A"
	}
	var b strings.Builder
	b.WriteString("curl -sS " + a.c.base + c.path)
	if c.key != "" {
		b.WriteString(` -H "Authorization: Bearer ` + keyVar + `"`)
	}
	hk := make([]string, 0, len(a.cfg.Headers))
	for k := range a.cfg.Headers {
		hk = append(hk, k)
	}
	sort.Strings(hk)
	for _, k := range hk {
		for _, v := range a.cfg.Headers[k] {
			b.WriteString(" -H " + shellSingle(k+": "+v))
		}
	}
	if a.cfg.CurlTLS != "" {
		b.WriteString(" " + a.cfg.CurlTLS)
	}
	b.WriteString(" -H 'Content-Type: application/json'")
	cc := c
	if promptShell != "" {
		cc.prompt = promptVar
	}
	body, _ := json.Marshal(a.c.body(cc))
	if promptShell == "" {
		b.WriteString(" -d " + shellSingle(string(body)))
	} else {
		q := shellDouble(string(body))
		b.WriteString(" -d " + strings.Replace(q, promptVar, promptShell, 1))
	}
	b.WriteString(extra)
	return b.String()
}

// long prompts are replaced by a seeded generator of as many pseudo-words.
func (a *auditor) curlPrompt(c call, seed int, extra string) string {
	if len(c.prompt) <= 400 {
		return a.curl(c, "", extra)
	}
	return a.curl(c, pwShell(len(strings.Fields(c.prompt)), seed), extra)
}

func (a *auditor) reproLeak(c call) string {
	return "# with KEY_A and KEY_B set to the two tenants' keys: first tenant A's canary prompt, then tenant B's request\n" +
		a.curl(call{key: a.cfg.KeyA, path: pathCompletions, prompt: "The secret code is CANARY-0123456789ab. Repeat the secret code: CANARY-0123456789ab", maxTokens: 16}, "", "") + "\n" +
		a.curlPrompt(c, 1, " | grep -o 'CANARY-[0-9a-f]*'")
}

func (a *auditor) reproCapacity(c call, words int) string {
	return fmt.Sprintf("# a prompt of %d pseudo-words as tenant B\n%s", words, a.curl(c, pwShell(words, 1), " -w ' HTTP %{http_code}\\n'"))
}

func (a *auditor) reproConcurrent(c call, m, words int) string {
	cc := c
	cc.key = a.cfg.KeyB
	return fmt.Sprintf("# %d prompts of %d pseudo-words at once, then each alone: compare the texts\nfor i in $(seq %d); do %s -w ' HTTP %%{http_code}\\n' & done; wait",
		m, words, m, a.curl(cc, strings.Replace(pwShell(words, 0), "-v s=0", "-v s=$i", 1), ""))
}

func (a *auditor) reproDeterminism(c call, load int) string {
	l := call{key: a.cfg.KeyA, path: pathCompletions, maxTokens: detMaxTokens}
	return fmt.Sprintf("# the same greedy request alone, then while %d tenant-A requests run; compare the texts\n%s\nfor i in $(seq %d); do %s >/dev/null & done; %s; wait",
		load, a.curl(c, "", ""), load, a.curl(l, strings.Replace(pwShell(60, 0), "-v s=0", "-v s=$i", 1), ""), a.curl(c, "", ""))
}

func (a *auditor) reproSideChannel(words int) string {
	p := call{key: a.cfg.KeyA, path: pathCompletions, maxTokens: 1}
	pb := p
	pb.key = a.cfg.KeyB
	return fmt.Sprintf("# tenant A sends a prompt; tenant B sends the same one and a fresh one: compare cached_tokens (and time)\n%s >/dev/null\n%s | grep -o '\"cached_tokens\":[0-9]*'\n%s | grep -o '\"cached_tokens\":[0-9]*'",
		a.curl(p, pwShell(words, 7), ""), a.curl(pb, pwShell(words, 7), " -w ' %{time_total}s\\n'"), a.curl(pb, pwShell(words, 8), " -w ' %{time_total}s\\n'"))
}

// fixFor is the "how to fix" line for a probe's finding on a server type.
func fixFor(probe, server string) string {
	switch probe {
	case "side-channel":
		switch server {
		case preflight.ServerLlama:
			return "start llama-server with --no-cache-prompt: its prompt cache is shared by every client (--cache-ram 0 does not turn it off)"
		case preflight.ServerVLLM:
			return "vLLM's automatic prefix cache is shared by all requests: start it with --no-enable-prefix-caching, or give each tenant its own cache_salt"
		case preflight.ServerSGLang:
			return "SGLang's radix cache is shared by all requests: start it with --disable-radix-cache"
		case preflight.ServerSluice:
			return "sluice has no prefix cache by design (I11): a cache added since must be keyed by tenant; file a bug with this evidence"
		}
		return "turn off the server's prefix/prompt cache, or key it by tenant"
	case "capacity":
		switch server {
		case preflight.ServerLlama:
			return "llama-server must refuse a prompt over n_ctx with 400 exceed_context_size_error; check -c and -np, and upgrade it"
		case preflight.ServerVLLM:
			return "set --max-model-len to what the KV cache holds (vLLM's start-up log prints it)"
		case preflight.ServerSGLang:
			return "set --context-length no larger than max_total_num_tokens (sluice preflight --endpoint prints both)"
		case preflight.ServerSluice:
			return "run sluice preflight with the roles' flags: every role must refuse a context larger than its pool (I2); file a bug with this evidence"
		}
		return "refuse every request whose prompt + max_tokens exceeds the context with a 4xx, and admit no context larger than the KV pool"
	case "canary", "concurrent-capacity":
		switch server {
		case preflight.ServerLlama:
			return "take the server out of service: a response carried another request's data. Until fixed run llama-server with -np 1 (one slot, no shared KV)"
		case preflight.ServerSluice:
			return "take the server out of service and file a bug with this evidence: sluice must fail closed (I3-I8)"
		}
		return "take the server out of service: a response carried another request's data; run one request at a time until fixed"
	case "determinism":
		switch server {
		case preflight.ServerLlama:
			return "llama-server batches slots over a unified KV: start it with -np 1 (or --no-kv-unified) so one client's load does not change another's output"
		case preflight.ServerVLLM:
			return "start vLLM with VLLM_BATCH_INVARIANT=1 (batch-invariant kernels) if tenants must not influence each other's output"
		case preflight.ServerSluice:
			return "sluice's kernels are batch-invariant: file a bug with this evidence"
		}
		return "use batch-invariant kernels, or serve tenants that must not influence each other on separate replicas"
	}
	return ""
}

// WriteText prints the report for people.
func (r *Report) WriteText(w io.Writer) {
	v := r.verdict()
	fmt.Fprintf(w, "sluice audit of %s (server %s, model %s, context %d): %d requests (%d transport retries) in %s\n", r.URL, r.Server, r.Model, r.Context, r.Requests, r.Retries, r.Duration)
	fmt.Fprintf(w, "  context from: %s\n", r.ContextSource)
	fmt.Fprintf(w, "  KV buffer: %s (%s)\n", r.KVBuffer, r.KVBufferSource)
	if len(r.Findings) == 0 {
		fmt.Fprintln(w, "\nNo findings.")
	}
	for i, f := range r.Findings {
		fmt.Fprintf(w, "\n%d. [%s] %s: %s\n   evidence: %s\n", i+1, strings.ToUpper(string(f.Severity)), f.Probe, f.Title, f.Evidence)
		if f.Reproduce != "" {
			fmt.Fprintf(w, "   reproduce:\n      %s\n", strings.ReplaceAll(f.Reproduce, "\n", "\n      "))
		}
		if f.Fix != "" {
			fmt.Fprintf(w, "   how to fix: %s\n", f.Fix)
		}
	}
	fmt.Fprintln(w, "\nProbes:")
	for _, p := range r.Probes {
		state := "complete"
		if !p.Complete {
			state = "DID NOT COMPLETE: " + p.Reason
		}
		fmt.Fprintf(w, "  %-20s %3d/%-3d requests  %s\n", p.Name, p.Sent, p.Planned, state)
	}
	if len(r.Checks) > 0 {
		fmt.Fprintln(w, "\nPassed checks:")
		for _, c := range r.Checks {
			fmt.Fprintf(w, "  - %s\n", c)
		}
	}
	if r.SideChannel != nil {
		fmt.Fprintf(w, "\nSide-channel %s\n", r.SideChannel.Summary)
	}
	if len(r.Notes) > 0 {
		fmt.Fprintln(w, "\nNotes:")
		for _, n := range r.Notes {
			fmt.Fprintf(w, "  - %s\n", n)
		}
	}
	switch v {
	case Fail:
		fmt.Fprintf(w, "\nVERDICT: FAIL (%d finding(s))\n", len(r.Findings))
	case Inconclusive:
		var why []string
		for _, p := range r.Probes {
			if !p.Complete {
				why = append(why, p.Name+": "+p.Reason)
			}
		}
		fmt.Fprintf(w, "\nVERDICT: INCONCLUSIVE (no finding, but not every probe completed: %s)\n", strings.Join(why, "; "))
	default:
		fmt.Fprintln(w, "\nVERDICT: PASS (every probe completed with its planned sample size; no finding)")
	}
}
