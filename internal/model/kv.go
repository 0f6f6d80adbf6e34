package model

// KV is the only way the forward pass touches keys and values: a paged,
// owner-checking view of one sequence's KV cache. The KV pool (internal/kv)
// implements it; the model never sees a page id or a raw pool buffer.
//
// Logical layout: a sequence's positions are split into blocks of
// PageSize() consecutive positions; block b holds positions
// [b*PageSize(), (b+1)*PageSize()). Each position holds, per layer, one key
// row and one value row of KVDim = n_kv_heads*head_dim float32s.
//
// Every call checks that the page behind the block still belongs to this
// sequence's owner at the generation the page table recorded (I3); a failed
// check returns an error and no data. The model must propagate the error
// and stop the step: it never substitutes zeros.
type KV interface {
	// PageSize is the number of token positions per block.
	PageSize() int

	// Put stores the key and value rows (each KVDim float32s) of the token at
	// logical position pos in layer. The view copies them; k and v may be
	// reused by the caller after Put returns. Writes within one block must
	// come in position order per layer; a position past the reservation is an
	// error.
	Put(layer, pos int, k, v []float32) error

	// Block returns the key and value rows of the positions of block blk that
	// have been written in layer: k and v hold n*KVDim float32s, position
	// blk*PageSize()+i at row i. Only written slots are returned (I4): n may
	// be less than PageSize() for the last block. The slices alias the pool
	// and are valid only until the sequence's next Put or release; the caller
	// must not modify them.
	Block(layer, blk int) (k, v []float32, n int, err error)
}

// KV16 is a KV whose pages may hold binary16 rows (kv.F16 pools, as
// llama.cpp's default F16 KV cache). When F16 reports true, Put rounds each
// float32 to nearest even (ggml_fp32_to_fp16) and the forward pass reads
// through Block16, which is Block's contract with the rows as binary16 bit
// patterns; Block is then refused. A KV that is not a KV16, or whose F16
// is false, is read through Block.
type KV16 interface {
	KV
	F16() bool
	Block16(layer, blk int) (k, v []uint16, n int, err error)
}

// isF16 reports whether attention reads kv through Block16.
func isF16(kv KV) bool {
	k16, ok := kv.(KV16)
	return ok && k16.F16()
}

// KVQ8 is a KV whose pages may hold Q8_0 rows (kv.Q8_0 pools, as
// llama.cpp's -ctk q8_0 -ctv q8_0 cache). When Q8 reports true, Put
// quantizes each row as ggml's CPU backend writes a q8_0 cache and the
// forward pass reads through BlockQ8, which is Block's contract with each
// row as KVDim/32 blocks of 34 bytes (a binary16 scale, 32 int8s); Block
// is then refused.
type KVQ8 interface {
	KV
	Q8() bool
	BlockQ8(layer, blk int) (k, v []byte, n int, err error)
}

// isQ8 reports whether attention reads kv through BlockQ8.
func isQ8(kv KV) bool {
	q8, ok := kv.(KVQ8)
	return ok && q8.Q8()
}
