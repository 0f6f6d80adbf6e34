package kernels

import "testing"

// Both assembly readers, whichever one this CPU's ReadXOR picks.
func TestReadXORAsmReadersReadEveryWord(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2")
	}
	checkReadsEveryWord(t, "readXOR4AVX2", func(b []byte) uint64 { return readXOR4AVX2(&b[0], len(b)) }, 256)
	if !hasAVX512 {
		t.Log("no AVX-512: readXOR4AVX512 not checked")
		return
	}
	checkReadsEveryWord(t, "readXOR4AVX512", func(b []byte) uint64 { return readXOR4AVX512(&b[0], len(b)) }, 256)
}
