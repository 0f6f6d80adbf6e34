package shm

import (
	"path/filepath"
	"strings"
	"testing"

	"sluice/internal/kv"
)

// A one-sided writer of F32 (or Q8_0) rows never maps an F16 pool's file
// (nor any other pair): the file's header records the pool's KV type and Open refuses
// a geometry that differs in it, before any byte is placed.
func TestWriterOfAnotherKVTypeRefused(t *testing.T) {
	for _, c := range []struct{ pool, writer kv.Type }{{kv.F16, kv.F32}, {kv.F32, kv.F16}, {kv.F16, kv.Q8_0}, {kv.Q8_0, kv.F16}, {kv.Q8_0, kv.F32}} {
		path := filepath.Join(t.TempDir(), "kv.shm")
		g := kv.Geometry{Layers: 2, KVDim: 32, PageSize: 4, Type: c.pool}
		p, err := kv.New(kv.Config{Geometry: g, Pages: 4, SharedFile: path})
		if err != nil {
			t.Fatal(err)
		}
		wg := g
		wg.Type = c.writer
		if w, err := Open(path, wg, notices{}); err == nil || !strings.Contains(err.Error(), "geometry") {
			if w != nil {
				w.Close()
			}
			t.Fatalf("pool of %v pages: a writer of %v pages opened its file (%v)", c.pool, c.writer, err)
		}
		w, err := Open(path, g, notices{})
		if err != nil {
			t.Fatalf("the pool's own type: %v", err)
		}
		w.Close()
		p.Close()
	}
}
