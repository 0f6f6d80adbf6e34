package router

import (
	"maps"
	"testing"

	"sluice/internal/engine"
)

// A prefill worker's waits split by how they ended: those that timed out
// at the bound, and the rest, which the push ended.
func TestPrefillAsidesSplit(t *testing.T) {
	got := PrefillAsides(engine.PrefillStats{Asides: 7, AsideTimeouts: 2})
	if want := map[string]uint64{AsideLanded: 5, AsideBound: 2}; !maps.Equal(got, want) {
		t.Fatalf("PrefillAsides = %v, want %v", got, want)
	}
}
