package kernels

// forVariants runs f once per kernel variant a path has on this CPU: on
// AVX2, the plain AVX2 tiles (what an AVX2-only CPU such as Zen 3 runs) in
// both their forms (sign mask, VPSIGNB), then with AVX-VNNI the VNNI
// tiles; on AVX-512, the Q8_0 4x4 tile and the 16-row kernel, each for
// every row length.
func forVariants(p Path, f func(variant string)) {
	if p == AVX512 {
		old := q8R16Blocks
		defer func() { q8R16Blocks = old }()
		q8R16Blocks = 0
		f("/q8-4x4")
		q8R16Blocks = 1 << 30
		f("/q8-16rows")
		return
	}
	if p != AVX2 {
		f("")
		return
	}
	oldVNNI, oldSign := avx2VNNI, avx2Sign
	defer func() { setAVX2VNNI(oldVNNI); avx2Sign = oldSign }()
	setAVX2VNNI(false)
	avx2Sign = false
	f("/no-avxvnni/mask")
	avx2Sign = true
	oldR8 := q8R8Blocks
	defer func() { q8R8Blocks = oldR8 }()
	q8R8Blocks = 0
	f("/no-avxvnni/vpsignb")
	q8R8Blocks = 1 << 30
	f("/no-avxvnni/vpsignb-8rows")
	q8R8Blocks = oldR8
	if hasAVXVNNI {
		setAVX2VNNI(true)
		f("/avxvnni")
	}
}
