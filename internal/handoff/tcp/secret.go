package tcp

import "crypto/rand"

// NewSecret returns 32 random bytes: the secret of a single-process
// deployment (sluice serve), whose roles share it in memory only.
func NewSecret() []byte {
	b := make([]byte, 32)
	rand.Read(b)
	return b
}
