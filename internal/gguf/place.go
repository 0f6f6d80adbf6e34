package gguf

import (
	"fmt"
	"strings"
)

// Memory says where an opened file's bytes live while it is served.
type Memory int

const (
	// MemoryAuto keeps the shared read-only mapping when the page cache
	// holds the file on 2 MiB pages, and copies it into anonymous huge
	// pages when it does not (see decideMemory).
	MemoryAuto Memory = iota
	// MemoryMap keeps the mapping: pages shared with every process that
	// maps the file, on whatever page size the page cache has them.
	MemoryMap
	// MemoryCopy copies the file into anonymous memory advised for
	// transparent huge pages and drops the mapping.
	MemoryCopy
)

func (m Memory) String() string {
	switch m {
	case MemoryAuto:
		return "auto"
	case MemoryMap:
		return "mmap"
	case MemoryCopy:
		return "copy"
	}
	return fmt.Sprintf("Memory(%d)", int(m))
}

// ParseMemory maps "auto", "mmap" or "copy" to a Memory.
func ParseMemory(s string) (Memory, error) {
	for _, m := range []Memory{MemoryAuto, MemoryMap, MemoryCopy} {
		if strings.EqualFold(s, m.String()) {
			return m, nil
		}
	}
	return 0, fmt.Errorf("%q is not a weights placement: use auto, mmap or copy", s)
}

// MemoryUsage is the help text of the --weights flags.
const MemoryUsage = "where the model's weights live: auto (keep the file's shared mapping when the page cache holds it on 2 MiB pages, else copy it into anonymous huge pages when the machine, or the container's cgroup memory limit, has twice its size to spare: decode streams every weight each token, and on 4 KiB pages that costs up to a fifth of its speed), mmap (always the shared mapping: least memory when several processes serve one file), copy (always the private huge-page copy)"

// Placement is what Place did.
type Placement struct {
	Memory Memory // MemoryMap or MemoryCopy: where the bytes are now
	Bytes  int64  // the file's size
	// HugeBytes is how much of the mapping the page cache held on 2 MiB
	// pages when Place looked (-1: not known, or not looked at).
	HugeBytes int64
}

func (p Placement) String() string {
	var s string
	if p.Memory == MemoryCopy {
		s = fmt.Sprintf("copied into anonymous huge pages (%d MiB)", p.Bytes>>20)
	} else {
		s = fmt.Sprintf("the file's shared mapping (%d MiB)", p.Bytes>>20)
	}
	if p.HugeBytes >= 0 && p.Bytes > 0 {
		s += fmt.Sprintf("; the page cache held %.0f%% of it on 2 MiB pages", 100*float64(p.HugeBytes)/float64(p.Bytes))
	}
	return s
}

// autoCopyMin is the smallest file MemoryAuto copies: a smaller one is
// read from the caches more than from memory, and TLB misses on it cost
// little.
const autoCopyMin = 64 << 20

// decideMemory is MemoryAuto's choice for a mapped file of size bytes of
// which huge are on 2 MiB pages (-1: unknown), with thp telling whether
// the kernel grants anonymous huge pages on advice and room the memory
// the process may still take (MemoryRoom; -1: unknown). Measured on a
// Zen 5 (1 thread, TinyLlama-shaped Q4_K, 620 MB): decode from the
// mapping with 16% of it on 2 MiB pages 44-46 tok/s, from the same
// mapping with 94% on 2 MiB pages 54-55, from the anonymous copy 54-55.
// The copy is anonymous memory that cannot be reclaimed (the mapping's
// page cache can), so it is made only with twice its size to spare: a
// container whose memory limit holds the model once keeps the mapping
// rather than risk the OOM killer.
func decideMemory(size, huge int64, thp bool, room int64) Memory {
	if !thp || size < autoCopyMin || huge < 0 || huge >= size/10*9 || room < 0 || room/2 < size {
		return MemoryMap
	}
	return MemoryCopy
}

// Place puts the file's bytes where m says, before any tensor data is
// taken from f (slices from TensorData taken before a copy keep pointing
// at the mapping, which Place unmaps). A File from Parse, or from Open
// where mmap is not available, is left as it is.
func (f *File) Place(m Memory) (Placement, error) {
	p := Placement{Memory: MemoryMap, Bytes: int64(len(f.data)), HugeBytes: -1}
	if !f.mmapped || f.data == nil || m == MemoryMap {
		return p, nil
	}
	if m == MemoryAuto {
		// Faulting the mapping in to read its page sizes reads the file:
		// not for a file that would stay mapped even if none were huge.
		thp, room := anonHugeAdvised(), MemoryRoom()
		if decideMemory(p.Bytes, 0, thp, room) == MemoryMap {
			return p, nil
		}
		p.HugeBytes = hugeMapped(f.data)
		if decideMemory(p.Bytes, p.HugeBytes, thp, room) == MemoryMap {
			return p, nil
		}
	}
	b, err := copyToAnon(f.data)
	if err != nil {
		return p, &Error{Code: ErrIO, Offset: -1, Msg: "cannot copy the weights into anonymous memory", Err: err}
	}
	if err := unmapFile(f.data); err != nil {
		unmapFile(b)
		return p, &Error{Code: ErrIO, Offset: -1, Msg: "munmap failed", Err: err}
	}
	f.data = b
	p.Memory = MemoryCopy
	return p, nil
}
