package kernels

// Dot returns the dot product of a and b (len(b) >= len(a)) in the
// canonical F32 order (16 lanes, fixed tree; package doc), identical on
// every path and for every caller.
func Dot(a, b []float32) float32 {
	if len(b) < len(a) {
		panic("kernels.Dot: b shorter than a")
	}
	if len(a) == 0 {
		return 0
	}
	if CurrentPath() != Generic {
		return dotF32Asm(a, b[:len(a)])
	}
	return dotF32Generic(a, b)
}

// Axpy computes y[i] += a*x[i] for i < len(y), the product rounded before
// the add (no FMA), so every path agrees bitwise.
func Axpy(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	if CurrentPath() != Generic && len(y) >= 16 {
		axpyAsm(y, a, x)
		return
	}
	for i := range y {
		y[i] += float32(a * x[i])
	}
}

// Scale computes x[i] *= a.
func Scale(x []float32, a float32) {
	if CurrentPath() != Generic && len(x) >= 16 {
		scaleAsm(x, a)
		return
	}
	for i := range x {
		x[i] *= a
	}
}
