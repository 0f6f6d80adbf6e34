package model

import (
	"encoding/hex"

	"sluice/internal/gguf"
)

// Fingerprint names the model a role loaded (I13): its weights, tokenizer
// and hyperparameters, as a hash of its GGUF file: every metadata byte and
// a documented sample of every tensor's data (gguf.File.Fingerprint). Roles compare fingerprints at every connection
// and every reservation, so KV computed by one model is never attended by
// another and a router never tokenizes for a model its workers do not run.
//
// The zero Fingerprint is a model with no file (the toy runtimes of
// tests); it agrees only with another zero Fingerprint.
type Fingerprint struct {
	// Name is for messages only (the served model name); two files with
	// the same bytes under different names are the same model.
	Name string
	// Sum is gguf.File.Fingerprint of the model file.
	Sum [16]byte
}

// FingerprintOf fingerprints a loaded GGUF file served under name.
func FingerprintOf(name string, f *gguf.File) Fingerprint {
	return Fingerprint{Name: name, Sum: f.Fingerprint()}
}

// Same reports whether two roles run the same model: the sums agree (the
// names may not).
func (f Fingerprint) Same(g Fingerprint) bool { return f.Sum == g.Sum }

// String is how messages and logs show a fingerprint: the name and the
// whole sum in hex (an operator compares it with another role's log line).
func (f Fingerprint) String() string {
	name := f.Name
	if name == "" {
		name = "(unnamed)"
	}
	return name + " [" + hex.EncodeToString(f.Sum[:]) + "]"
}
