// Package sample turns logits into the next token: logit bias, repetition,
// frequency and presence penalties, temperature, min-p, top-k, top-p, with a
// seeded generator so a request replays exactly, and the log-probabilities a
// client may ask for.
package sample

import (
	"fmt"

	"sluice/internal/grammar"
)

// Bounds of the settings. The API refuses anything outside them with a 400
// and the transport codec refuses to decode it, so a peer cannot make a
// worker allocate or loop on an absurd value.
const (
	// MaxTemperature bounds Temperature here; the OpenAI API allows [0, 2].
	MaxTemperature = 100
	// MaxPenalty bounds |PresencePenalty| and |FrequencyPenalty| (OpenAI's [-2, 2]).
	MaxPenalty = 2
	// MaxRepetitionPenalty bounds RepetitionPenalty (vLLM only asks > 0).
	MaxRepetitionPenalty = 10
	// MaxBias bounds |bias| of a logit_bias entry (OpenAI's [-100, 100]).
	MaxBias = 100
	// MaxLogitBias bounds the number of logit_bias entries (OpenAI's 300).
	MaxLogitBias = 300
	// MaxTopLogprobs bounds TopLogprobs (OpenAI's top_logprobs 0..20).
	MaxTopLogprobs = 20
	// MinPositive is the smallest positive float32 that is not subnormal
	// (2^-126). A setting whose "off" value is 0 (top_p, the repetition
	// penalty) must be 0 or at least this: a smaller one rounds to 0 on
	// its way to float32 and silently turns the setting off, or (as a
	// divisor) makes logits infinite.
	MinPositive = 0x1p-126
	// LogprobFloor replaces -Inf log-probabilities (JSON cannot carry
	// -Inf); OpenAI and vLLM use the same floor.
	LogprobFloor = -9999
)

// Bias adds Bias to the raw logit of token ID before anything else.
type Bias struct {
	ID   int32
	Bias float32
}

// Params are one request's sampling settings. The zero value is greedy with
// every processor off.
type Params struct {
	// Temperature 0 means greedy argmax (ties go to the lowest id) of the
	// processed logits (bias and penalties applied).
	Temperature float32
	// TopK keeps the K most likely tokens; 0 means no limit.
	TopK int
	// TopP keeps the smallest set of tokens whose probability sums to at
	// least TopP; 0 or 1 means no limit.
	TopP float32
	// Seed fixes the random choices of a non-greedy request.
	Seed uint64
	// MinP keeps only tokens whose tempered probability is at least MinP
	// times the most likely token's (vLLM, llama.cpp); 0 means off.
	MinP float32
	// PresencePenalty is subtracted once from the logit of every token
	// generated so far; FrequencyPenalty once per occurrence (OpenAI's
	// definitions, over the generated tokens only, as vLLM). 0 means off.
	PresencePenalty  float32
	FrequencyPenalty float32
	// RepetitionPenalty divides the positive logits and multiplies the
	// negative ones of every token seen in the prompt or the output (the
	// CTRL / Hugging Face / vLLM definition). 0 or 1 means off.
	RepetitionPenalty float32
	// LogitBias is added to the raw logits, sorted by ID, ids unique.
	LogitBias []Bias
	// Logprobs asks for each sampled token's log-probability, with
	// TopLogprobs (0..MaxTopLogprobs) most likely alternatives.
	Logprobs    bool
	TopLogprobs int
	// Format constrains the output to a grammar (response_format); the
	// zero value leaves it free. Each worker compiles it from this text
	// itself (I14): a peer sends the schema, never a grammar state.
	Format Format
}

// Format is a request's output constraint.
type Format struct {
	Kind FormatKind
	// Schema is the JSON Schema text of FormatJSONSchema, at most
	// grammar.MaxSchemaBytes; empty for the other kinds.
	Schema string
	// Think applies the constraint to a thinking model's answer only:
	// free while it reasons between the tokens ThinkOpen (<think>) and
	// ThinkClose (</think>), then the grammar, as grammar.Think follows
	// it. Each worker derives where the reasoning stands from the prompt
	// and the tokens (I14); only the two ids cross the wire.
	Think                 bool
	ThinkOpen, ThinkClose int32
}

// FormatKind names a constraint.
type FormatKind uint8

const (
	// FormatText is free text (no constraint).
	FormatText FormatKind = iota
	// FormatJSONObject is any JSON object.
	FormatJSONObject
	// FormatJSONSchema is a JSON value valid against Format.Schema.
	FormatJSONSchema
	formatKinds
)

// Constrained reports whether f restricts the output.
func (f Format) Constrained() bool { return f.Kind != FormatText }

// Error is a rejected setting or an impossible draw, with a stable code.
type Error struct {
	// Code is machine-readable: "invalid_temperature", "invalid_top_k",
	// "invalid_top_p", "invalid_min_p", "invalid_penalty",
	// "invalid_logit_bias", "invalid_logprobs", "invalid_format",
	// "no_candidates", "grammar_refused"; and the output format's faults
	// at run time: "grammar_ambiguous", "grammar_dead_end".
	Code string
	// Msg is a sentence the user can act on.
	Msg string
}

func (e *Error) Error() string { return "sample: " + e.Code + ": " + e.Msg }

// within reports lo <= v <= hi; NaN is never within.
func within(v float32, lo, hi float64) bool { return float64(v) >= lo && float64(v) <= hi }

// Validate reports the first setting outside its domain for a vocabulary
// of vocab ids (vocab <= 0 skips the id checks). NaN compares false against
// every bound, so each check is written to reject it too.
func (p Params) Validate(vocab int) error {
	if !within(p.Temperature, 0, MaxTemperature) {
		return &Error{"invalid_temperature", fmt.Sprintf("temperature %v is outside [0, %d]", p.Temperature, MaxTemperature)}
	}
	if p.TopK < 0 || (vocab > 0 && p.TopK > vocab) {
		return &Error{"invalid_top_k", fmt.Sprintf("top_k %d is outside [0, %d]; use 0 for no limit", p.TopK, vocab)}
	}
	if !within(p.TopP, 0, 1) {
		return &Error{"invalid_top_p", fmt.Sprintf("top_p %v is outside [0, 1]", p.TopP)}
	}
	if !within(p.MinP, 0, 1) {
		return &Error{"invalid_min_p", fmt.Sprintf("min_p %v is outside [0, 1]", p.MinP)}
	}
	if !within(p.PresencePenalty, -MaxPenalty, MaxPenalty) || !within(p.FrequencyPenalty, -MaxPenalty, MaxPenalty) {
		return &Error{"invalid_penalty", fmt.Sprintf("presence and frequency penalties (%v, %v) must be within [-%d, %d]", p.PresencePenalty, p.FrequencyPenalty, MaxPenalty, MaxPenalty)}
	}
	if !within(p.RepetitionPenalty, 0, MaxRepetitionPenalty) || (p.RepetitionPenalty != 0 && p.RepetitionPenalty < MinPositive) {
		return &Error{"invalid_penalty", fmt.Sprintf("repetition penalty %v is outside (0, %d]", p.RepetitionPenalty, MaxRepetitionPenalty)}
	}
	if len(p.LogitBias) > MaxLogitBias {
		return &Error{"invalid_logit_bias", fmt.Sprintf("logit bias has %d entries; at most %d are allowed", len(p.LogitBias), MaxLogitBias)}
	}
	for i, b := range p.LogitBias {
		if b.ID < 0 || (vocab > 0 && int(b.ID) >= vocab) || (i > 0 && b.ID <= p.LogitBias[i-1].ID) {
			return &Error{"invalid_logit_bias", fmt.Sprintf("logit bias entry %d (token %d) is outside the vocabulary of %d or not in increasing id order", i, b.ID, vocab)}
		}
		if !within(b.Bias, -MaxBias, MaxBias) {
			return &Error{"invalid_logit_bias", fmt.Sprintf("logit bias %v of token %d is outside [-%d, %d]", b.Bias, b.ID, MaxBias, MaxBias)}
		}
	}
	if f := p.Format; f.Kind >= formatKinds || (f.Kind == FormatJSONSchema) != (f.Schema != "") || len(f.Schema) > grammar.MaxSchemaBytes {
		return &Error{"invalid_format", fmt.Sprintf("output format kind %d with a schema of %d bytes is not a valid constraint (at most %d bytes)", f.Kind, len(f.Schema), grammar.MaxSchemaBytes)}
	}
	if f := p.Format; f.Think && (!f.Constrained() || f.ThinkOpen < 0 || f.ThinkClose < 0 || f.ThinkOpen == f.ThinkClose ||
		(vocab > 0 && (int(f.ThinkOpen) >= vocab || int(f.ThinkClose) >= vocab))) {
		return &Error{"invalid_format", fmt.Sprintf("an output format after thinking needs a constraint and two distinct reasoning markers in the vocabulary of %d, got %d and %d", vocab, f.ThinkOpen, f.ThinkClose)}
	}
	if p.TopLogprobs < 0 || p.TopLogprobs > MaxTopLogprobs || (!p.Logprobs && p.TopLogprobs != 0) {
		return &Error{"invalid_logprobs", fmt.Sprintf("top logprobs %d must be within [0, %d], and only with logprobs", p.TopLogprobs, MaxTopLogprobs)}
	}
	return nil
}

// Greedy reports whether p always picks the argmax.
func (p Params) Greedy() bool { return p.Temperature == 0 || p.TopK == 1 }

// repetition reports whether the repetition penalty is on.
func (p Params) repetition() bool { return p.RepetitionPenalty != 0 && p.RepetitionPenalty != 1 }

// UsesPrompt reports whether the sampler needs the prompt's token ids:
// the repetition penalty counts them (SetPrompt), and a format after
// thinking reads where the prompt left the reasoning (grammar.NewThink),
// so a decode worker is sent them.
func (p Params) UsesPrompt() bool { return p.repetition() || p.Format.Think }

// processes reports whether the raw logits are changed before the draw.
func (p Params) processes() bool {
	return len(p.LogitBias) > 0 || p.repetition() || p.PresencePenalty != 0 || p.FrequencyPenalty != 0
}
