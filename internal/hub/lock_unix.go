//go:build unix

package hub

import (
	"os"
	"path/filepath"
	"syscall"
)

// lock takes an exclusive flock on path (created), the lock file
// huggingface_hub's filelock takes for the same blob, so two downloaders
// of one file (sluice or Python) do not write one .incomplete at once.
func lock(path string) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}
