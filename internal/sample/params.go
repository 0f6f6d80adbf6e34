// Package sample turns logits into the next token: greedy, temperature,
// top-k, top-p, with a seeded generator so a request replays exactly.
package sample

import "fmt"

// Params are one request's sampling settings. The zero value is greedy.
type Params struct {
	// Temperature 0 means greedy argmax (ties go to the lowest id).
	Temperature float32
	// TopK keeps the K most likely tokens; 0 means no limit.
	TopK int
	// TopP keeps the smallest set of tokens whose probability sums to at
	// least TopP; 0 or 1 means no limit.
	TopP float32
	// Seed fixes the random choices of a non-greedy request.
	Seed uint64
}

// Error is a rejected setting or an impossible draw, with a stable code.
type Error struct {
	// Code is machine-readable: "invalid_temperature", "invalid_top_k",
	// "invalid_top_p", "no_candidates".
	Code string
	// Msg is a sentence the user can act on.
	Msg string
}

func (e *Error) Error() string { return "sample: " + e.Code + ": " + e.Msg }

// Validate reports the first setting outside its domain. NaN compares false
// against every bound, so each check is written to reject it too.
func (p Params) Validate() error {
	if !(p.Temperature >= 0 && p.Temperature <= 100) {
		return &Error{"invalid_temperature", fmt.Sprintf("temperature %v is outside [0, 100]", p.Temperature)}
	}
	if p.TopK < 0 {
		return &Error{"invalid_top_k", fmt.Sprintf("top_k %d is negative; use 0 for no limit", p.TopK)}
	}
	if !(p.TopP >= 0 && p.TopP <= 1) {
		return &Error{"invalid_top_p", fmt.Sprintf("top_p %v is outside [0, 1]", p.TopP)}
	}
	return nil
}

// Greedy reports whether p always picks the argmax.
func (p Params) Greedy() bool { return p.Temperature == 0 || p.TopK == 1 }
