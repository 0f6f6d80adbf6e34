package cli

import "flag"

// otherFlag is what sluice takes in place of a flag of llama-server, vLLM
// or SGLang, the servers sluice's users come from: the flag to give
// instead (when the command has it), or why none is needed.
type otherFlag struct {
	tool string // whose flag it is
	use  string // sluice's flag, without dashes; "" when there is none
	why  string // a sentence: what sluice does instead
}

// otherFlags is keyed by the flag's name without dashes. Only flags whose
// meaning is clear are listed; a flag sluice also has is never here.
var otherFlags = map[string]otherFlag{
	"ngl":                     {"llama-server", "", "sluice runs on the CPU (there are no GPU layers): drop it"},
	"n-gpu-layers":            {"llama-server", "", "sluice runs on the CPU (there are no GPU layers): drop it"},
	"gpu-layers":              {"llama-server", "", "sluice runs on the CPU (there are no GPU layers): drop it"},
	"t":                       {"llama-server", "threads", "the compute threads of each role"},
	"tb":                      {"llama-server", "threads", "the compute threads of each role"},
	"threads-batch":           {"llama-server", "threads", "the compute threads of each role"},
	"np":                      {"llama-server", "max-concurrency", "the requests that hold KV pages at once"},
	"parallel":                {"llama-server", "max-concurrency", "the requests that hold KV pages at once"},
	"max-num-seqs":            {"vLLM", "max-concurrency", "the requests that hold KV pages at once"},
	"jinja":                   {"llama-server", "", "the model's Jinja chat template is always used (--chat-template replaces it): drop it"},
	"fa":                      {"llama-server", "", "attention is always computed in tiles with an online softmax (flash attention): drop it"},
	"flash-attn":              {"llama-server", "", "attention is always computed in tiles with an online softmax (flash attention): drop it"},
	"cb":                      {"llama-server", "", "batching is always continuous: drop it"},
	"cont-batching":           {"llama-server", "", "batching is always continuous: drop it"},
	"ctk":                     {"llama-server", "kv-type", "the element type of KV pages (f16, f32, q8_0)"},
	"ctv":                     {"llama-server", "kv-type", "the element type of KV pages (f16, f32, q8_0)"},
	"cache-type-k":            {"llama-server", "kv-type", "the element type of KV pages (f16, f32, q8_0)"},
	"cache-type-v":            {"llama-server", "kv-type", "the element type of KV pages (f16, f32, q8_0)"},
	"kv-cache-dtype":          {"vLLM", "kv-type", "the element type of KV pages (f16, f32, q8_0)"},
	"alias":                   {"llama-server", "served-model-name", "the model id clients see"},
	"hf-repo":                 {"llama-server", "hf", "ORG/REPO[:QUANT]"},
	"hfr":                     {"llama-server", "hf", "ORG/REPO[:QUANT]"},
	"ssl-cert-file":           {"llama-server", "tls-cert", "the API's TLS certificate"},
	"ssl-key-file":            {"llama-server", "tls-key", "the TLS certificate's key"},
	"ssl-certfile":            {"vLLM", "tls-cert", "the API's TLS certificate"},
	"ssl-keyfile":             {"vLLM", "tls-key", "the TLS certificate's key"},
	"gpu-memory-utilization":  {"vLLM", "kv-memory", "the KV pool's size per role; auto, the default, is half the memory available after the weights"},
	"mem-fraction-static":     {"SGLang", "kv-memory", "the KV pool's size per role; auto, the default, is half the memory available after the weights"},
	"block-size":              {"vLLM", "page-size", "token slots per KV page"},
	"enable-prefix-caching":   {"vLLM", "prefix-cache", "on by default, within each tenant"},
	"tensor-parallel-size":    {"vLLM", "", "sluice runs on the CPUs of each host; scale out with more prefill and decode workers (--prefill-workers, --decode-workers, or sluice prefill and decode processes): drop it"},
	"tp":                      {"SGLang", "", "sluice runs on the CPUs of each host; scale out with more prefill and decode workers (--prefill-workers, --decode-workers, or sluice prefill and decode processes): drop it"},
	"dtype":                   {"vLLM", "", "weights are computed in the GGUF file's own types (--kv-type sets the KV pages'): drop it"},
	"trust-remote-code":       {"vLLM", "", "a GGUF file runs no code of its own: drop it"},
	"tokenizer":               {"vLLM", "", "the tokenizer comes from the GGUF file: drop it"},
	"enable-auto-tool-choice": {"vLLM", "", "tool calls are always parsed (Hermes and Llama 3.1 formats; tool_choice required and named are grammar-constrained): drop it"},
	"tool-call-parser":        {"vLLM", "", "tool calls are always parsed (Hermes and Llama 3.1 formats; tool_choice required and named are grammar-constrained): drop it"},
	"reasoning-parser":        {"vLLM", "reasoning-format", "a thinking model's reasoning goes to reasoning_content by default, auto; none leaves it in content"},
}

// otherTool is the sentence for a flag another server takes that fs
// lacks: "-ngl is llama-server's flag: ..." ("" when name is none of
// them, or maps to a sluice flag this command does not have).
func otherTool(fs *flag.FlagSet, name string) string {
	o, ok := otherFlags[name]
	if !ok {
		return ""
	}
	spelled := dashes(name)
	if o.tool == "llama-server" && len(name) <= 3 {
		spelled = "-" + name // llama-server's short flags: -ngl, -np, -fa
	}
	if o.use == "" {
		return spelled + " is " + o.tool + "'s flag: " + o.why
	}
	if fs.Lookup(o.use) == nil {
		return ""
	}
	return spelled + " is " + o.tool + "'s flag; sluice's is " + dashes(o.use) + " (" + o.why + ")"
}
