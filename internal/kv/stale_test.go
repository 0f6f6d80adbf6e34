package kv

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// RemoveStaleShared removes a pool file no live pool holds (its process
// killed before it removed it) and nothing else: not a live pool's file
// (it holds the file's lock), not an empty file (maybe one whose creator
// has not locked it yet), not a file of another name. A pool's file
// becomes stale once the pool is closed.
func TestRemoveStaleShared(t *testing.T) {
	dir := t.TempDir()
	const prefix = "sluice-decode-pool-"
	live := filepath.Join(dir, prefix+"live")
	p := newPool(t, 2, func(c *Config) { c.SharedFile = live })
	stale := filepath.Join(dir, prefix+"stale")
	empty := filepath.Join(dir, prefix+"empty")
	other := filepath.Join(dir, "other-pool")
	for path, size := range map[string]int{stale: SharedHeaderBytes, empty: 0, other: SharedHeaderBytes} {
		if err := os.WriteFile(path, make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := RemoveStaleShared(dir, prefix)
	if err != nil || !slices.Equal(removed, []string{stale}) {
		t.Fatalf("removed %q (%v), want only %s", removed, err, stale)
	}
	for _, path := range []string{live, empty, other} {
		if _, err := os.Stat(path); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
	p.Close()
	if removed, err = RemoveStaleShared(dir, prefix); err != nil || !slices.Equal(removed, []string{live}) {
		t.Fatalf("after the pool closed: removed %q (%v), want %s", removed, err, live)
	}
}
