package kernels

// Fused multi-query attention kernels (mqa_amd64.s). For F16 rows the
// AVX2 forms need hd % 8 == 0 (VCVTPH2PS widens 8 at a time); mqa.go
// sends other head dims down the Go loops.

//go:noescape
func mqaDotF32AVX2(out *float32, os int, q *float32, m, hd int, k *float32, ks, p int)

//go:noescape
func mqaDotF16AVX2(out *float32, os int, q *float32, m, hd int, k *uint16, ks, p int)

//go:noescape
func mqaDotF32AVX512(out *float32, os int, q *float32, m, hd int, k *float32, ks, p int)

//go:noescape
func mqaDotF16AVX512(out *float32, os int, q *float32, m, hd int, k *uint16, ks, p int)

//go:noescape
func mqaAxpyF32AVX2(y *float32, w *float32, ws int, m, hd int, v *float32, vs, p int)

//go:noescape
func mqaAxpyF16AVX2(y *float32, w *float32, ws int, m, hd int, v *uint16, vs, p int)

//go:noescape
func mqaAxpyF32AVX512(y *float32, w *float32, ws int, m, hd int, v *float32, vs, p int)

//go:noescape
func mqaAxpyF16AVX512(y *float32, w *float32, ws int, m, hd int, v *uint16, vs, p int)

//go:noescape
func scaleSoftmaxAVX2(x *float32, n int, a float32, c *float32, st *tileStat) (done bool)

//go:noescape
func mqaDot8F32AVX2(out *float32, os int, q *float32, m, hd int, k *float32, ks, p int)

//go:noescape
func mqaDot8F16AVX2(out *float32, os int, q *float32, m, hd int, k *uint16, ks, p int)

//go:noescape
func mqaDotP16F32AVX2(out *float32, os int, q *float32, m, hd int, k *float32, ks, p int)

//go:noescape
func mqaDotP16F16AVX2(out *float32, os int, q *float32, m, hd int, k *uint16, ks, p int)

// mqaDotP4 kernels (mqap4_amd64.s): fewer than four query rows, four
// positions at a time; p % 4 == 0.

//go:noescape
func mqaDotP4F32AVX512(out *float32, os int, q *float32, m, hd int, k *float32, ks, p int)

//go:noescape
func mqaDotP4F16AVX512(out *float32, os int, q *float32, m, hd int, k *uint16, ks, p int)
