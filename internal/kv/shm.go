package kv

import (
	"fmt"
	"os"
	"syscall"
)

// mapShared maps path MAP_SHARED as the pool memory, so a peer process that
// maps the same file writes pages one-sidedly (the shm transport). The file
// is truncated to zero first: whatever a previous process left in it is
// gone before any page is handed out (I7).
func mapShared(path string, size int) ([]byte, func() error, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, &Error{Code: CodeBadConfig, Msg: fmt.Sprintf("cannot open the shared KV file %s: %v", path, err)}
	}
	defer f.Close() // the mapping outlives the descriptor
	if err := f.Truncate(0); err == nil {
		err = f.Truncate(int64(size))
	}
	if err != nil {
		return nil, nil, &Error{Code: CodeBadConfig, Msg: fmt.Sprintf("cannot size the shared KV file %s to %d bytes: %v", path, size, err)}
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, &Error{Code: CodeBadConfig, Msg: fmt.Sprintf("cannot map the shared KV file %s: %v", path, err)}
	}
	return mem, func() error { return syscall.Munmap(mem) }, nil
}
