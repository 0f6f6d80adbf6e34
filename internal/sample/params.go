// Package sample turns logits into the next token: greedy, temperature,
// top-k, top-p, with a seeded generator so a request replays exactly.
package sample

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
