//go:build unix

package gguf

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// mapFile maps the file read-only: weights are paged in on use and shared
// between processes serving the same model. The mapping is advised for
// huge pages (adviseHuge) before anything is read through it.
func mapFile(f *os.File, size int) ([]byte, error) {
	b, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	if err == nil {
		adviseHuge(b)
	}
	return b, err
}

func unmapFile(b []byte) error { return syscall.Munmap(b) }

// adviseRandom tells the kernel that b (a mapping) is about to be read at
// scattered places, and returns the function that restores the default.
func adviseRandom(b []byte) func() {
	// x/sys/unix, not syscall: syscall has no Madvise on darwin or the BSDs.
	_ = unix.Madvise(b, unix.MADV_RANDOM)
	return func() { _ = unix.Madvise(b, unix.MADV_NORMAL) }
}
