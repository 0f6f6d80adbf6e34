package model

import "sluice/internal/kernels"

// Attention over Q8_0 pages (kv.Q8_0, llama.cpp's -ctk q8_0 -ctv q8_0).
// A unit dequantizes each page piece of one KV head's K (then V) rows
// into its slot's scratch, exactly (kernels.DequantQ8Rows), and runs the
// F32 kernels on it: the scores and sums are the canonical F32 ones over
// the dequantized rows, so Q8_0 pages keep every invariance of F32 pages
// (path, threads, batch, chunks, page size) with no order of their own.
// llama.cpp's CPU flash attention instead quantizes the query to Q8_0 for
// an integer dot against K; keeping the query in float32 is the more
// exact of the two, and the difference is part of the drift
// docs/models.md reports.

// q8Row is the bytes of a Q8_0 row of kd elements (kd a multiple of 32).
func q8Row(kd int) int { return kd / 32 * 34 }

// q8Piece dequantizes positions [off, off+cnt) of span s's K (or V) rows,
// the Q8_0 blocks that hold columns [col, col+hd) (one KV head; a head
// narrower than a block takes the block it shares), into slot w's scratch.
// It returns an F32 span over them and the head's column offset and row
// stride in it, for pageDot/pageAxpy.
func (r *Runner) q8Piece(w int, s *span, v bool, col, off, cnt, hd, kd int) (*span, int, int) {
	rb := q8Row(kd)
	b0, b1 := col/32, (col+hd+31)/32
	cols := (b1 - b0) * 32
	buf := grow(r.deq[w], cnt*cols)
	r.deq[w] = buf
	src := s.k8
	if v {
		src = s.v8
	}
	kernels.DequantQ8Rows(buf, src[off*rb+b0*34:], cnt, cols, rb)
	r.q8s[w] = span{k: buf, v: buf}
	return &r.q8s[w], col - b0*32, cols
}
