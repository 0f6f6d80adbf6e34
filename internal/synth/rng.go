package synth

// rng is splitmix64: tiny, fast and defined by integer arithmetic only,
// so a seed gives the same weights on every platform and Go version.
type rng struct{ s uint64 }

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// uniform returns a float32 uniform in [-1, 1) from the top 24 bits.
func (r *rng) uniform() float32 {
	return float32(int32(r.next()>>40)-(1<<23)) / (1 << 23)
}

// tensorRNG derives an independent stream per tensor from the model seed
// and the tensor's name (FNV-1a), so adding or reordering tensors never
// changes another tensor's weights.
func tensorRNG(seed uint64, name string) *rng {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(name); i++ {
		h ^= uint64(name[i])
		h *= 0x100000001b3
	}
	r := &rng{s: seed ^ h}
	r.next()
	return r
}
