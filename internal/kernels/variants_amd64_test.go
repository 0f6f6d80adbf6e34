package kernels

// forVariants runs f once per kernel variant a path has on this CPU: on
// AVX2 with AVX-VNNI, with the VNNI tiles and with the plain AVX2 ones
// (what an AVX2-only CPU such as Zen 3 runs).
func forVariants(p Path, f func(variant string)) {
	if p != AVX2 || !hasAVXVNNI {
		f("")
		return
	}
	defer setAVX2VNNI(true)
	setAVX2VNNI(false)
	f("/no-avxvnni")
	setAVX2VNNI(true)
	f("/avxvnni")
}
