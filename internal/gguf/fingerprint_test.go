package gguf

import (
	"os"
	"testing"

	"github.com/zeebo/xxh3"
)

// The chunked definition, checked against a direct reading of it (one
// chunk: XXH3-128 of length||XXH3-128(data)), and sensitivity to one byte
// anywhere: header, metadata or tensor data.
func TestFingerprintDefinition(t *testing.T) {
	data := make([]byte, 3*fingerprintChunk/2+17)
	for i := range data {
		data[i] = byte(i * 7)
	}
	h0 := xxh3.Hash128(data[:fingerprintChunk]).Bytes()
	h1 := xxh3.Hash128(data[fingerprintChunk:]).Bytes()
	buf := []byte{byte(len(data)), byte(len(data) >> 8), byte(len(data) >> 16), byte(len(data) >> 24), 0, 0, 0, 0}
	buf = append(append(buf, h0[:]...), h1[:]...)
	if got, want := fingerprint(data), xxh3.Hash128(buf).Bytes(); got != want {
		t.Fatalf("fingerprint %x, the definition gives %x", got, want)
	}
	base := fingerprint(data)
	for _, at := range []int{0, 1000, fingerprintChunk - 1, fingerprintChunk, len(data) - 1} {
		data[at] ^= 1
		if fingerprint(data) == base {
			t.Fatalf("flipping byte %d left the fingerprint unchanged", at)
		}
		data[at] ^= 1
	}
	if fingerprint(data[:len(data)-1]) == base {
		t.Fatal("a truncated file has the same fingerprint")
	}
}

// BenchmarkFingerprint measures the start-up cost of fingerprinting a real
// model file: SLUICE_FINGERPRINT_FILE names one (e.g. a ~1 GB q8_0 file from
// `sluice synth --layers 22 --embd 2048 --heads 32 --kv-heads 4 --ff 5632
// --type q8_0`); without it a 256 MiB buffer stands in.
func BenchmarkFingerprint(b *testing.B) {
	var data []byte
	if path := os.Getenv("SLUICE_FINGERPRINT_FILE"); path != "" {
		f, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		data = f.data
	} else {
		data = make([]byte, 256<<20)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		fingerprint(data)
	}
}
