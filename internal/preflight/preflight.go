// Package preflight checks, before a role starts serving, that the two
// numbers the incident let drift apart agree: the context a role advertises
// and the number of tokens its KV pool can actually hold (I2).
//
// Local mode (this file) computes the figures from a model's shape and the
// pool flags. The servers run exactly this code at start-up, and size their
// pools from Report.Roles[i].Pages so the pool they build is the pool that was
// checked.
package preflight

import (
	"fmt"
	"strings"
)

// KV types (--kv-type): the element a pool stores each K and V value as
// (kv.Type). F16 is the default, as in llama.cpp.
const (
	KVF16  = "f16"
	KVF32  = "f32"
	KVQ8_0 = "q8_0"
)

// ValidKVType reports whether t is a --kv-type value (empty: the default).
func ValidKVType(t string) bool {
	return t == "" || t == KVF16 || t == KVF32 || t == KVQ8_0
}

// KVTypeBytes is the byte size of n stored K or V elements of a KV type
// (n a multiple of 32 for q8_0): 2 each for f16 (and the empty default),
// 4 for f32, 34 per 32 for q8_0 (kv.Type.RowBytes).
func KVTypeBytes(kvType string, n int64) int64 {
	switch kvType {
	case KVF32:
		return 4 * n
	case KVQ8_0:
		return n / 32 * 34
	}
	return 2 * n
}

// DefaultPageSize is the page size when none is configured.
const DefaultPageSize = 16

// Model is the part of a model's shape that decides its memory needs.
type Model struct {
	// Name identifies the model in reports (file path or built-in name).
	Name string
	// WeightBytes is the size of all weight tensors as stored.
	WeightBytes int64
	Layers      int
	KVHeads     int
	HeadDim     int
	// TrainContext is the context the model was trained with (0 = unknown);
	// with --context auto it is the starting point before pools lower it.
	TrainContext int
	// KVType is the pools' element type, KVF16 (also when empty), KVF32
	// or KVQ8_0: F16 pages hold twice the tokens of F32 pages in the same
	// bytes, Q8_0 pages 1.88x those of F16.
	KVType string
}

// KVBytesPerToken is layers x KV heads x head dim x 2 (K and V) x element size.
func (m Model) KVBytesPerToken() int64 {
	// Per layer: the K (and V) row of KV heads x head dim elements.
	return int64(m.Layers) * 2 * KVTypeBytes(m.KVType, int64(m.KVHeads)*int64(m.HeadDim))
}

func (m Model) kvType() string {
	if m.KVType == "" {
		return KVF16
	}
	return m.KVType
}

// Role names.
const (
	RolePrefill   = "prefill"
	RoleDecode    = "decode"
	RoleColocated = "colocated"
)

// Pool is one role's KV pool configuration. Exactly one of KVMemory and
// PoolTokens is set.
type Pool struct {
	Role string
	// KVMemory is the pool's byte budget; the pool holds the whole pages that
	// fit in it.
	KVMemory int64
	// PoolTokens asks for a pool of at least this many token slots (rounded
	// up to whole pages).
	PoolTokens int
	// PageSize is token slots per page (0 = DefaultPageSize).
	PageSize int
	// Auto, when set, says KVMemory came from --kv-memory auto (the
	// report says so, and a refusal says what to give instead).
	Auto *Auto
}

// Input is everything local preflight needs.
type Input struct {
	Model Model
	// Context is the configured context; 0 means auto: the largest context
	// that every pool holds, capped by the model's training context.
	Context int
	Pools   []Pool
}

// RoleReport is the verdict for one role.
type RoleReport struct {
	Role            string `json:"role"`
	WeightBytes     int64  `json:"weight_bytes"`
	KVBytesPerToken int64  `json:"kv_bytes_per_token"`
	// KVType is the element type the pool stores (f16, f32 or q8_0).
	KVType   string `json:"kv_type"`
	PageSize int    `json:"page_size"`
	// Pages is how many pages the role's pool must be built with.
	Pages      int   `json:"pages"`
	PoolBytes  int64 `json:"pool_bytes"`
	PoolTokens int   `json:"pool_capacity_tokens"`
	// ConfiguredContext is 0 for auto.
	ConfiguredContext int `json:"configured_context"`
	EffectiveContext  int `json:"effective_context"`
	// MaxConcurrency is how many sequences of the full effective context
	// the pool holds at once (pool tokens / context; vLLM's "maximum
	// concurrency" figure). 0 when the check failed.
	MaxConcurrency float64 `json:"max_concurrency_at_full_context"`
	// Sizing says how the pool was sized: "--kv-memory auto: ..." or the
	// flag given.
	Sizing  string `json:"sizing"`
	OK      bool   `json:"ok"`
	Verdict string `json:"verdict"`
}

// Report is the outcome of a local preflight check.
type Report struct {
	Model string `json:"model"`
	// ConfiguredContext is 0 for auto.
	ConfiguredContext int `json:"configured_context"`
	// EffectiveContext is the context every role serves: the minimum of the
	// configured (or, with auto, training) context and every pool's capacity.
	// It is 0 when the check failed.
	EffectiveContext int          `json:"effective_context"`
	Roles            []RoleReport `json:"roles"`
	OK               bool         `json:"ok"`
	// Problems are sentences naming the role, both numbers and what to
	// change; empty when OK.
	Problems []string `json:"problems,omitempty"`
	// Notes say what auto decided.
	Notes []string `json:"notes,omitempty"`
	// Warnings are what a server logs at WARN: the context auto lowered
	// below the model's training context, with the numbers.
	Warnings []string `json:"warnings,omitempty"`
}

// Err returns nil when the report is OK, else an error carrying every
// problem sentence.
func (r Report) Err() error {
	if r.OK {
		return nil
	}
	return &Error{Problems: r.Problems}
}

// Error is a failed preflight check.
type Error struct{ Problems []string }

// Code is the stable machine-readable code of a failed check.
const Code = "context_exceeds_kv_pool"

func (e *Error) Error() string {
	return "preflight (" + Code + "): " + strings.Join(e.Problems, "; ")
}

// Local runs the local check. It never fails silently: every input problem
// (no pools, non-positive sizes) is a Problem in the report.
func Local(in Input) Report {
	rep := Report{Model: in.Model.Name, ConfiguredContext: in.Context}
	bpt := in.Model.KVBytesPerToken()
	if bpt <= 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("model %s has no KV shape (layers %d, KV heads %d, head dim %d); cannot size a KV pool", in.Model.Name, in.Model.Layers, in.Model.KVHeads, in.Model.HeadDim))
	}
	if t := in.Model.KVType; !ValidKVType(t) {
		rep.Problems = append(rep.Problems, fmt.Sprintf("--kv-type %q: use f16, f32 or q8_0", t))
	} else if t == KVQ8_0 && int64(in.Model.KVHeads)*int64(in.Model.HeadDim)%32 != 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("--kv-type q8_0 needs a KV row (KV heads x head dim = %d) that is whole blocks of 32; use f16", in.Model.KVHeads*in.Model.HeadDim))
	}
	if len(in.Pools) == 0 {
		rep.Problems = append(rep.Problems, "no role pools configured; give --kv-memory or --kv-pool-tokens")
	}
	if in.Context < 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("--context %d is negative; give a positive token count or auto", in.Context))
	}
	if len(rep.Problems) > 0 {
		return rep
	}

	// The target context: explicit, or with auto the training context (or,
	// unknown, whatever the pools hold).
	target := in.Context
	if target == 0 {
		target = in.Model.TrainContext
	}
	effective := target
	for _, p := range in.Pools {
		rr := sizePool(in.Model, p, bpt)
		rr.ConfiguredContext = in.Context
		if rr.Pages <= 0 {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s: the KV pool (%s) does not hold a single page of %d tokens (%d bytes); raise --kv-memory to at least %s or --kv-pool-tokens to at least %d",
				rr.Role, describePool(p), rr.PageSize, bpt*int64(rr.PageSize), FlagBytes(bpt*int64(rr.PageSize)), rr.PageSize))
		}
		if effective == 0 || rr.PoolTokens < effective {
			effective = rr.PoolTokens
		}
		rep.Roles = append(rep.Roles, rr)
	}

	for i := range rep.Roles {
		rr := &rep.Roles[i]
		if rr.Pages <= 0 {
			rr.Verdict = "FAIL: pool holds no page"
			continue
		}
		if in.Context > 0 && rr.PoolTokens < in.Context {
			// I2: an explicit context larger than the pool is refused, never
			// silently served (the incident advertised 1,048,576 over a pool
			// of 681,280).
			need := int64(ceilDiv(in.Context, rr.PageSize)) * int64(rr.PageSize) * bpt
			rr.Verdict = fmt.Sprintf("FAIL: pool holds %d tokens < context %d", rr.PoolTokens, in.Context)
			if a := in.Pools[i].Auto; a != nil {
				// I2 with auto sizing: the machine decided the pool, the
				// operator decided the context; they disagree, so refuse
				// rather than serve a context the pool cannot hold.
				rep.Problems = append(rep.Problems, fmt.Sprintf("%s: --context %d is larger than the KV pool's capacity of %d tokens (%d pages of %d, %d bytes a token), sized by %s; give --kv-memory of at least %s (%d bytes; or --kv-pool-tokens %d) if the machine has it, or lower --context to %d, or use --context auto",
					rr.Role, in.Context, rr.PoolTokens, rr.Pages, rr.PageSize, bpt, a, FlagBytes(need), need, in.Context, rr.PoolTokens))
				continue
			}
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s: --context %d is larger than the KV pool's capacity of %d tokens (%d pages of %d); raise --kv-memory to at least %s (%d bytes; or --kv-pool-tokens to at least %d), or lower --context to %d, or use --context auto",
				rr.Role, in.Context, rr.PoolTokens, rr.Pages, rr.PageSize, FlagBytes(need), need, in.Context, rr.PoolTokens))
			continue
		}
		rr.OK = true
		rr.Verdict = fmt.Sprintf("OK: pool holds %d tokens >= context %d", rr.PoolTokens, effective)
	}
	if len(rep.Problems) > 0 {
		for i := range rep.Roles {
			rep.Roles[i].EffectiveContext = 0
		}
		return rep
	}
	for i := range rep.Roles {
		rep.Roles[i].EffectiveContext = effective
		if effective > 0 {
			rep.Roles[i].MaxConcurrency = float64(rep.Roles[i].PoolTokens) / float64(effective)
		}
	}
	rep.EffectiveContext = effective
	rep.OK = true
	if in.Context == 0 {
		if in.Model.TrainContext > 0 && effective < in.Model.TrainContext {
			w := fmt.Sprintf("--context auto: lowered the context from the model's training context %d to %d, the smallest role pool's capacity (I2): the pool holds %d tokens of %d bytes; a pool of %d bytes would hold the training context",
				in.Model.TrainContext, effective, effective, bpt, int64(ceilDiv(in.Model.TrainContext, rep.Roles[0].PageSize))*int64(rep.Roles[0].PageSize)*bpt)
			if a := in.Pools[0].Auto; a != nil {
				w += "; the pool was sized by " + a.String() + ": give --kv-memory to choose"
			}
			rep.Warnings = append(rep.Warnings, w)
		} else if in.Model.TrainContext > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("--context auto: using the model's training context %d; every pool holds it", effective))
		} else {
			rep.Notes = append(rep.Notes, fmt.Sprintf("--context auto: the model does not state its training context; using the smallest role pool's capacity, %d tokens", effective))
		}
	}
	return rep
}

func sizePool(m Model, p Pool, bpt int64) RoleReport {
	ps := p.PageSize
	if ps <= 0 {
		ps = DefaultPageSize
	}
	rr := RoleReport{Role: p.Role, WeightBytes: m.WeightBytes, KVBytesPerToken: bpt, KVType: m.kvType(), PageSize: ps, Sizing: describePool(p)}
	pageBytes := bpt * int64(ps)
	switch {
	case p.PoolTokens > 0:
		rr.Pages = ceilDiv(p.PoolTokens, ps)
	case p.KVMemory > 0:
		rr.Pages = int(p.KVMemory / pageBytes)
	}
	rr.PoolTokens = rr.Pages * ps
	rr.PoolBytes = int64(rr.Pages) * pageBytes
	return rr
}

func describePool(p Pool) string {
	if p.Auto != nil && p.PoolTokens == 0 {
		return p.Auto.String()
	}
	if p.PoolTokens > 0 {
		return fmt.Sprintf("--kv-pool-tokens %d", p.PoolTokens)
	}
	return fmt.Sprintf("--kv-memory %d bytes", p.KVMemory)
}

// ceilDiv is ceil(a/b) for a >= 0, b > 0, without forming a+b-1 (which
// wraps for a near MaxInt, e.g. --context 9223372036854775807).
func ceilDiv(a, b int) int {
	n := a / b
	if a%b != 0 {
		n++
	}
	return n
}
