package gguf

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"
)

// The tensor-data sample of Fingerprint: a tensor of at most
// fingerprintWindows windows is hashed whole; a larger one through
// fingerprintWindows windows of fingerprintWindow bytes, the first at its
// first byte, the last ending at its last byte, the others evenly between.
const (
	fingerprintWindow  = 16 << 10
	fingerprintWindows = 8
)

// Fingerprint is a 128-bit hash of the model the file holds (I13): every
// byte before the tensor data (header, all metadata: hyperparameters, the
// tokenizer's vocabulary, merges, scores and special ids, the chat
// template; every tensor's name, type, shape and offset) and a fixed
// sample of each tensor's data. Definition:
//
//	meta   = XXH3-128 of the file's bytes [0, DataOffset)
//	t_i    = XXH3-128 of tensor i's sample (file order): all of its data
//	         when it is at most 8 x 16 KiB (norms, biases), else the
//	         concatenation of 8 windows of 16 KiB at offsets
//	         floor(k*(n-16Ki)/7) for k = 0..7 (the first and the last 16 KiB
//	         included)
//	result = XXH3-128 of "sluice/fingerprint/v1", the file length (u64
//	         little endian), meta, t_0, t_1, ... (16 bytes each, the
//	         library's big-endian Bytes form)
//
// Why a sample is enough: I13 is there to catch roles started on
// different models (another checkpoint of the same architecture during a
// rolling update, another quantization, another tokenizer, a wrong file).
// Quantization, architecture, shapes and tokenizer live in the metadata,
// hashed whole. Two checkpoints that share all of that (another training
// run, a fine-tune, a merged adapter) differ in essentially every block of
// every weight they do not share, so each 16 KiB window already differs,
// and every matrix is sampled at 8 places. What a sample cannot see is an
// edit confined to bytes between windows: a file tampered with on
// purpose, which is for the operator's checksum of the download, not for
// I13. The cost is what makes the choice: the sample reads a fixed amount
// per tensor whatever the file's size. On a 1.03 GB q8_0 file of
// TinyLlama's shape (201 tensors, about 20 MB sampled) it takes 13-26 ms
// from the page cache and 270-365 ms cold (evicted with fadvise; loading
// the model takes 270-400 ms cold, 1 ms warm), against 100-370 ms warm and
// 1.1-5.3 s cold for hashing every byte (measured on this shared 2-core
// machine; BenchmarkFingerprint); a 70 GB model would add minutes to every
// start.
func (f *File) Fingerprint() [16]byte {
	if f.mmapped {
		// Windows are far apart: the kernel's readahead around each fault
		// would read 8x more from a cold disk than the sample needs.
		defer adviseRandom(f.data)()
	}
	data := f.data
	buf := binary.LittleEndian.AppendUint64([]byte("sluice/fingerprint/v1"), uint64(len(data)))
	meta := xxh3.Hash128(data[:f.DataOffset]).Bytes()
	buf = append(buf, meta[:]...)
	h := xxh3.New()
	for _, t := range f.Tensors {
		h.Reset()
		for _, w := range fingerprintSample(f.TensorData(t)) {
			h.Write(w)
		}
		s := h.Sum128().Bytes()
		buf = append(buf, s[:]...)
	}
	return xxh3.Hash128(buf).Bytes()
}

// fingerprintSample is the part of one tensor's data Fingerprint hashes.
func fingerprintSample(d []byte) [][]byte {
	if len(d) <= fingerprintWindows*fingerprintWindow {
		return [][]byte{d}
	}
	span := len(d) - fingerprintWindow
	out := make([][]byte, fingerprintWindows)
	for k := range out {
		off := int(int64(span) * int64(k) / (fingerprintWindows - 1))
		out[k] = d[off : off+fingerprintWindow]
	}
	return out
}
