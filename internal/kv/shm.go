package kv

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// A shared pool file is a header page, then the pages, then one
// generation word per page:
//
//	offset 0:    "SLUICEKV", u32 version 3, u32 KV type (Type), u64
//	             incarnation, u64 layers, KV dim, page size, pages (little
//	             endian)
//	offset 4096: page 0, page 1, ... (SharedOffset)
//	then:        u64 generation word of page 0, page 1, ... (SharedGenOffset)
//
// The incarnation is 64 random bits chosen when the pool is created; every
// Reservation of a shared pool names it, so a writer can tell whether the
// memory it maps belongs to the pool that reserved the pages.
//
// A page's generation word is the writer's fence in the shared memory
// itself (I6): it holds the page's generation while the page is Reserved,
// waiting for the one transfer write of its owner, and 0 otherwise. The
// pool stores it (atomically, native byte order: the file never leaves the
// host) when it allocates the page, and clears it on every other state
// change: the page's write arriving, a seal, a quarantine (an abort or a
// failure of the handoff, whoever asked for it), a release, a scrub. A
// one-sided writer loads the word immediately before each page copy and
// copies only when it equals the generation it was given (shm.Writer), so
// a writer that outlived its handoff never places a byte in a page since
// given to someone else, even when nobody told it of the abort.

// SharedHeaderBytes is the size of a shared pool file's header; page p
// starts at SharedHeaderBytes + p*PageBytes (a multiple of the page size
// of every platform we map on, so pages stay aligned).
const SharedHeaderBytes = 4096

const (
	sharedMagic = "SLUICEKV"
	// Version 3 records the KV type: a writer of F32 rows never places
	// them in F16 pages (their geometries differ, so Open refuses).
	sharedVersion = 3
)

// SharedGenOffset is the byte offset of the generation words in a shared
// pool file of pages pages of geometry g (8-byte aligned: a page's size is
// a multiple of 8).
func SharedGenOffset(g Geometry, pages int) int64 {
	return SharedHeaderBytes + int64(pages)*int64(g.PageBytes())
}

// SharedFileBytes is the size of a shared pool file, or -1 when it does
// not fit in an int64. The page count may come from a file's header, which
// any process mapping the file can write: the product must not wrap around
// to a real file's size (the generation words would then be a slice far
// longer than the memory under it).
func SharedFileBytes(g Geometry, pages int) int64 {
	pb := int64(g.PageBytes())
	if pages < 0 || pb <= 0 || int64(pages) > (math.MaxInt64-SharedHeaderBytes)/(pb+8) {
		return -1
	}
	return SharedGenOffset(g, pages) + 8*int64(pages)
}

// SharedGens is the generation words of a mapped shared pool file, as a
// one-sided writer reads them (and the pool writes them).
type SharedGens []atomic.Uint64

// SharedGensOf returns the generation words of a mapping of a whole shared
// pool file whose header is h.
func SharedGensOf(mem []byte, h SharedHeader) (SharedGens, error) {
	off, end := SharedGenOffset(h.Geometry, h.Pages), SharedFileBytes(h.Geometry, h.Pages)
	if h.Pages <= 0 || int64(len(mem)) != end || off%8 != 0 {
		return nil, &Error{Code: CodeBadConfig, Msg: fmt.Sprintf("shared KV pool file of %d bytes, its header says %d", len(mem), end)}
	}
	words := mem[off:end]
	return unsafe.Slice((*atomic.Uint64)(unsafe.Pointer(unsafe.SliceData(words))), h.Pages), nil
}

// Open reports whether page may take a one-sided write for generation gen
// now: the pool holds it Reserved at exactly that generation.
func (s SharedGens) Open(page uint32, gen uint64) bool {
	return int64(page) < int64(len(s)) && gen != 0 && s[page].Load() == gen
}

// SharedHeader is what a shared pool file says about itself.
type SharedHeader struct {
	Incarnation uint64
	Geometry    Geometry
	Pages       int
}

// ParseSharedHeader reads the header at the start of a shared pool file.
func ParseSharedHeader(b []byte) (SharedHeader, error) {
	if len(b) < 56 || string(b[:8]) != sharedMagic {
		return SharedHeader{}, &Error{Code: CodeBadConfig, Msg: "not a sluice shared KV pool file (bad magic)"}
	}
	le := binary.LittleEndian
	if v := le.Uint32(b[8:]); v != sharedVersion {
		return SharedHeader{}, &Error{Code: CodeBadConfig, Msg: fmt.Sprintf("shared KV pool file version %d, this build reads %d", v, sharedVersion)}
	}
	typ := le.Uint32(b[12:])
	if typ >= uint32(numTypes) {
		return SharedHeader{}, &Error{Code: CodeBadConfig, Msg: fmt.Sprintf("shared KV pool file of unknown KV type %d", typ)}
	}
	h := SharedHeader{Incarnation: le.Uint64(b[16:]),
		Geometry: Geometry{Layers: int(le.Uint64(b[24:])), KVDim: int(le.Uint64(b[32:])), PageSize: int(le.Uint64(b[40:])), Type: Type(typ)},
		Pages:    int(le.Uint64(b[48:]))}
	if h.Incarnation == 0 {
		return SharedHeader{}, &Error{Code: CodeBadConfig, Msg: "shared KV pool file has no incarnation (not fully created)"}
	}
	return h, nil
}

func putSharedHeader(b []byte, h SharedHeader) {
	le := binary.LittleEndian
	copy(b, sharedMagic)
	le.PutUint32(b[8:], sharedVersion)
	le.PutUint32(b[12:], uint32(h.Geometry.Type))
	le.PutUint64(b[24:], uint64(h.Geometry.Layers))
	le.PutUint64(b[32:], uint64(h.Geometry.KVDim))
	le.PutUint64(b[40:], uint64(h.Geometry.PageSize))
	le.PutUint64(b[48:], uint64(h.Pages))
	// The incarnation last: a reader never sees a header that names an
	// incarnation before the rest of it is there.
	le.PutUint64(b[16:], h.Incarnation)
}

func newIncarnation() uint64 {
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			panic("kv: no randomness for a pool incarnation: " + err.Error())
		}
		if v := binary.LittleEndian.Uint64(b[:]); v != 0 {
			return v
		}
	}
}

// mapShared creates path as a NEW file and maps it MAP_SHARED as the pool
// memory, so a peer process that maps the same file writes pages
// one-sidedly (the shm transport). Whatever was at path is unlinked first
// and the file is created with O_EXCL: a writer still mapping a previous
// incarnation's file (a crashed decode worker's) holds the old inode, and
// its posted writes land there, never in this pool (I6 across restarts:
// the old incarnation's quarantine state died with it). Fresh file memory
// is zero (I7). reuse is the Unsafe.ReuseSharedFile test hook.
func mapShared(path string, g Geometry, pages int, reuse bool) ([]byte, SharedGens, uint64, func() error, error) {
	size64 := SharedFileBytes(g, pages)
	if size64 <= 0 || size64 > math.MaxInt {
		return nil, nil, 0, nil, badConfig("a shared KV file of %d pages of %d bytes overflows the address space", pages, g.PageBytes())
	}
	size := int(size64)
	flags := os.O_RDWR | os.O_CREATE | os.O_EXCL
	if reuse {
		flags = os.O_RDWR | os.O_CREATE
	} else if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, 0, nil, &Error{Code: CodeBadConfig, Msg: fmt.Sprintf("cannot remove the previous shared KV file %s: %v", path, err)}
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		return nil, nil, 0, nil, &Error{Code: CodeBadConfig, Msg: fmt.Sprintf("cannot create the shared KV file %s: %v", path, err)}
	}
	// The descriptor stays open with an exclusive flock for the pool's
	// life, before the file has a size: RemoveStaleShared removes only a
	// sized file whose lock it can take, so never a live pool's (the lock
	// dies with its process, kill -9 included).
	held := false
	defer func() {
		if !held {
			f.Close()
		}
	}()
	if !reuse {
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			return nil, nil, 0, nil, &Error{Code: CodeBadConfig, Msg: fmt.Sprintf("cannot lock the shared KV file %s: %v", path, err)}
		}
	}
	if err := f.Truncate(0); err == nil {
		err = f.Truncate(int64(size))
	}
	if err != nil {
		return nil, nil, 0, nil, &Error{Code: CodeBadConfig, Msg: fmt.Sprintf("cannot size the shared KV file %s to %d bytes: %v", path, size, err)}
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, 0, nil, &Error{Code: CodeBadConfig, Msg: fmt.Sprintf("cannot map the shared KV file %s: %v", path, err)}
	}
	inc := newIncarnation()
	h := SharedHeader{Incarnation: inc, Geometry: g, Pages: pages}
	gens, err := SharedGensOf(mem, h)
	if err != nil {
		syscall.Munmap(mem)
		return nil, nil, 0, nil, err
	}
	for i := range gens {
		gens[i].Store(0) // a reused file (test hook) may hold old words
	}
	putSharedHeader(mem, h)
	held = true
	unmap := func() error {
		err := syscall.Munmap(mem)
		f.Close() // and the lock
		return err
	}
	return mem[SharedHeaderBytes:SharedGenOffset(g, pages)], gens, inc, unmap, nil
}

// RemoveStaleShared removes the shared pool files in dir whose names
// start with prefix and whose pools are gone: files a process left behind
// when it ended without removing its pool's (kill -9, a crash). A file is
// stale only when its exclusive lock can be taken (mapShared holds it for
// the pool's life, so never another live process's, whatever its pid
// namespace) and it has a size (a file of 0 bytes may be one whose creator
// has not locked it yet). It returns the paths removed; an error names a
// file it could not remove, after trying the others.
func RemoveStaleShared(dir, prefix string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var removed []string
	var first error
	for _, e := range ents {
		if !e.Type().IsRegular() || len(e.Name()) <= len(prefix) || e.Name()[:len(prefix)] != prefix {
			continue
		}
		path := dir + string(os.PathSeparator) + e.Name()
		gone, err := removeIfStale(path)
		if gone {
			removed = append(removed, path)
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return removed, first
}

func removeIfStale(path string) (bool, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return false, nil // gone meanwhile, or not ours to open
	}
	defer f.Close()
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return false, nil // a live pool holds it
	}
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return false, nil
	}
	// Remove the file this lock is on, not one created at the path since.
	if at, err := os.Lstat(path); err != nil || !os.SameFile(st, at) {
		return false, nil
	}
	if err := os.Remove(path); err != nil {
		return false, fmt.Errorf("cannot remove the stale shared KV file %s: %w", path, err)
	}
	return true, nil
}
