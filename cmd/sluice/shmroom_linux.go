package main

import (
	"os"
	"syscall"
)

// shmRoom is the space free in the file system the shm transport puts the
// decode pool's file in (/dev/shm when present, else the temp dir, as
// node.BuildLocal chooses), -1 when unknown. The file is sparse: a pool
// larger than this space would fault with SIGBUS when written, not fail
// at start.
func shmRoom() int64 {
	dir := os.TempDir()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		dir = "/dev/shm"
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return -1
	}
	return int64(fs.Bavail) * int64(fs.Bsize)
}
