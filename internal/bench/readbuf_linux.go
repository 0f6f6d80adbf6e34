package bench

import "golang.org/x/sys/unix"

// hugeAlloc maps n bytes of anonymous memory with transparent huge pages
// advised (MADV_HUGEPAGE; the kernel's default is often "madvise" only),
// so that the read-bandwidth reference streams with as few TLB misses as
// the machine allows: the weights' file mapping gets huge pages where the
// page cache has them, and a reference on 4 KiB pages read 5-10% slower
// (Sapphire Rapids VM, one thread). ok is false when the mapping fails.
func hugeAlloc(n int) (buf []byte, free func(), ok bool) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return nil, nil, false
	}
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE) // advice only: 4 KiB pages still work
	return b, func() { _ = unix.Munmap(b) }, true
}
