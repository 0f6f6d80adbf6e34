package kernels

import "encoding/binary"

// Q8_0 rows of a Q8_0 KV pool (kv.Q8_0, llama.cpp's -ctk/-ctv q8_0): each
// run of 32 elements is a binary16 scale d and 32 int8s q. Dequantizing
// is exact (q has 8 significant bits, d 11, so q*d fits a float32's 24),
// so attention over Q8_0 pages dequantizes a piece of one KV head's rows
// and runs the canonical F32 orders of MQADot and MQAAxpy on it: the
// result is bitwise the same on every path, whatever the batch or thread
// count, and the Q8_0 path adds no reduction order of its own.

// DequantQ8Rows dequantizes rows rows of cols elements (a multiple of 32),
// row j starting at src[j*stride] (bytes), into dst packed (row j at
// dst[j*cols]): element i of a row is int8(q[i]) times its block's scale
// widened as FP16ToFP32Row widens it (a NaN scale, the pool's poison,
// makes every element of its block NaN).
func DequantQ8Rows(dst []float32, src []byte, rows, cols, stride int) {
	if rows <= 0 {
		return
	}
	nb := cols / 32
	if cols%32 != 0 || len(dst) < rows*cols || len(src) < (rows-1)*stride+nb*34 {
		panic("kernels.DequantQ8Rows: bad shape")
	}
	if CurrentPath() != Generic {
		dequantQ8RowsAVX2(&dst[0], &src[0], rows, nb, stride)
		return
	}
	for j := range rows {
		r := src[j*stride:]
		o := dst[j*cols : (j+1)*cols]
		for b := range nb {
			blk := r[b*34 : b*34+34]
			d := widen16(binary.LittleEndian.Uint16(blk))
			ob := o[b*32 : b*32+32]
			for i, q := range blk[2:34] {
				ob[i] = float32(int8(q)) * d
			}
		}
	}
}
