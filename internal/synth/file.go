package synth

import (
	"bufio"
	"os"
	"path/filepath"
)

// WriteFile writes the model to path atomically (a temporary file in the
// same directory, renamed into place), so a benchmark or a concurrent
// reader never sees a half-written model.
func WriteFile(path string, spec Spec) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".synth-*.gguf")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	bw := bufio.NewWriterSize(tmp, 1<<20)
	err = Write(bw, spec)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
