package tcp

import (
	"crypto/rand"
	"fmt"
	"os"
)

// SecretFileEnv names the environment variable that points at the secret
// file when no --secret-file flag is given.
const SecretFileEnv = "SLUICE_SECRET_FILE"

// NewSecret returns 32 random bytes: the secret of a single-process
// deployment (sluice serve), whose roles share it in memory only.
func NewSecret() []byte {
	b := make([]byte, 32)
	rand.Read(b)
	return b
}

// SecretFrom loads the secret from path or, when path is empty, from the
// file named by $SLUICE_SECRET_FILE. The secret itself never appears on a
// command line or in the environment (I12): both are readable by other
// local users.
func SecretFrom(path string) ([]byte, error) {
	if path == "" {
		path = os.Getenv(SecretFileEnv)
	}
	if path == "" {
		return nil, fmt.Errorf("no shared secret: pass --secret-file or set %s to a file (chmod 600) holding at least %d bytes", SecretFileEnv, MinSecret)
	}
	return LoadSecret(path)
}
