//go:build !amd64

package kernels

func mqaDotF32AVX2(out *float32, os int, q *float32, m, hd int, k *float32, ks, p int) {
	panic("unreachable")
}
func mqaDotF16AVX2(out *float32, os int, q *float32, m, hd int, k *uint16, ks, p int) {
	panic("unreachable")
}
func mqaDotF32AVX512(out *float32, os int, q *float32, m, hd int, k *float32, ks, p int) {
	panic("unreachable")
}
func mqaDotF16AVX512(out *float32, os int, q *float32, m, hd int, k *uint16, ks, p int) {
	panic("unreachable")
}
func mqaAxpyF32AVX2(y *float32, w *float32, ws int, m, hd int, v *float32, vs, p int) {
	panic("unreachable")
}
func mqaAxpyF16AVX2(y *float32, w *float32, ws int, m, hd int, v *uint16, vs, p int) {
	panic("unreachable")
}
func mqaAxpyF32AVX512(y *float32, w *float32, ws int, m, hd int, v *float32, vs, p int) {
	panic("unreachable")
}
func mqaAxpyF16AVX512(y *float32, w *float32, ws int, m, hd int, v *uint16, vs, p int) {
	panic("unreachable")
}
func scaleSoftmaxAVX2(x *float32, n int, a float32, c *float32, st *tileStat) (done bool) {
	panic("unreachable")
}
func mqaDot8F32AVX2(out *float32, os int, q *float32, m, hd int, k *float32, ks, p int) {
	panic("unreachable")
}
func mqaDot8F16AVX2(out *float32, os int, q *float32, m, hd int, k *uint16, ks, p int) {
	panic("unreachable")
}
func mqaDotP16F32AVX2(out *float32, os int, q *float32, m, hd int, k *float32, ks, p int) {
	panic("unreachable")
}
func mqaDotP16F16AVX2(out *float32, os int, q *float32, m, hd int, k *uint16, ks, p int) {
	panic("unreachable")
}
func mqaDotP4F32AVX512(out *float32, os int, q *float32, m, hd int, k *float32, ks, p int) {
	panic("unreachable")
}
func mqaDotP4F16AVX512(out *float32, os int, q *float32, m, hd int, k *uint16, ks, p int) {
	panic("unreachable")
}
