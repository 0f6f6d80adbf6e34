package kernels

// spinPause is one PAUSE instruction (pause_amd64.s), called in the pool's
// polling loops.
func spinPause()
