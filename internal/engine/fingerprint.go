package engine

import "sluice/internal/model"

// Fingerprinted is a Runtime that knows its model's fingerprint (I13).
// ModelRuntime is one; a Runtime that is not (the toy runtimes of tests)
// has the zero Fingerprint, which agrees only with another zero one.
// Optional, so a fake Runtime need not implement it.
type Fingerprinted interface {
	Fingerprint() model.Fingerprint
}

// FingerprintOf is r's model fingerprint, zero when r does not know one.
func FingerprintOf(r Runtime) model.Fingerprint {
	if f, ok := r.(Fingerprinted); ok {
		return f.Fingerprint()
	}
	return model.Fingerprint{}
}
