package gguf

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"syscall"
	"unsafe"
)

// hugeMapped faults every page of the mapping b in (pages the page cache
// does not hold yet come in as 2 MiB folios where the file system has
// them: the mapping is advised for huge pages) and returns how many of
// its bytes are mapped by 2 MiB pages, from /proc/self/smaps; -1 when
// that cannot be read.
func hugeMapped(b []byte) int64 {
	var s byte
	for i := 0; i < len(b); i += 4096 {
		s += b[i]
	}
	sink = s
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return -1
	}
	return smapsHuge(smaps, uintptr(unsafe.Pointer(&b[0])))
}

var sink byte

// smapsHuge returns the FilePmdMapped bytes of the mapping that starts at
// addr in an smaps listing, or -1 when there is none.
func smapsHuge(smaps []byte, addr uintptr) int64 {
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	in := false
	for sc.Scan() {
		line := sc.Bytes()
		if i := bytes.IndexByte(line, '-'); i > 0 && !bytes.Contains(line[:i], []byte(":")) {
			start, err := strconv.ParseUint(string(line[:i]), 16, 64)
			in = err == nil && uintptr(start) == addr
			continue
		}
		if !in || !bytes.HasPrefix(line, []byte("FilePmdMapped:")) {
			continue
		}
		f := bytes.Fields(line[len("FilePmdMapped:"):])
		if len(f) != 2 || string(f[1]) != "kB" {
			return -1
		}
		kb, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil || kb < 0 {
			return -1
		}
		return kb << 10
	}
	return -1
}

// anonHugeAdvised reports whether the kernel gives anonymous memory huge
// pages when advised (transparent_hugepage "always" or "madvise").
func anonHugeAdvised() bool {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	return err == nil && !bytes.Contains(b, []byte("[never]"))
}

// copyToAnon copies b into a private anonymous mapping advised for huge
// pages (advice before the first write, so the faults take 2 MiB pages),
// then makes the copy read-only like the file mapping.
func copyToAnon(b []byte) ([]byte, error) {
	c, err := syscall.Mmap(-1, 0, len(b), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil, err
	}
	adviseHuge(c)
	copy(c, b)
	if err := syscall.Mprotect(c, syscall.PROT_READ); err != nil {
		syscall.Munmap(c)
		return nil, err
	}
	return c, nil
}

// MemoryRoom is what the process may still take: MemAvailable from
// /proc/meminfo, lowered to memory.max - memory.current of the cgroup v2
// at /sys/fs/cgroup (a container's own, in its cgroup namespace); -1
// when MemAvailable cannot be read. --weights auto and --kv-memory auto
// both size themselves from it.
func MemoryRoom() int64 {
	return roomFrom("/proc/meminfo", "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current")
}

func roomFrom(meminfo, cgMax, cgCurrent string) int64 {
	b, err := os.ReadFile(meminfo)
	if err != nil {
		return -1
	}
	room := int64(-1)
	for _, line := range bytes.Split(b, []byte("\n")) {
		f := bytes.Fields(line)
		if len(f) == 3 && string(f[0]) == "MemAvailable:" && string(f[2]) == "kB" {
			if kb, err := strconv.ParseInt(string(f[1]), 10, 64); err == nil && kb >= 0 && kb < 1<<53 {
				room = kb << 10
			}
		}
	}
	if room < 0 {
		return -1
	}
	limit, err1 := readInt(cgMax)
	used, err2 := readInt(cgCurrent)
	if err1 == nil && err2 == nil { // "max" (no limit) fails to parse
		room = min(room, max(0, limit-used))
	}
	return room
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
}
