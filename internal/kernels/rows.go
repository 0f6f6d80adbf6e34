package kernels

// DotRows and AxpyRows are attention's inner loops: one query against many
// key rows, and many value rows summed into one output, where the rows sit
// at a fixed stride inside a KV page (one KV head's slice of each
// position). Each element is exactly what Dot / Axpy give for that row, in
// row order, so callers may switch between the two forms without changing
// a bit (batch invariance). One call per block instead of one per row
// saves the per-call dispatch; a kernel that keeps q in registers across
// rows can replace the loop bodies without changing results.
//
// (Added by the model engineer for internal/model's attention.)

// DotRows sets out[j] = Dot(q, k[j*stride:j*stride+len(q)]) for j < len(out).
func DotRows(out, q, k []float32, stride int) {
	n := len(q)
	if len(out) == 0 {
		return
	}
	if stride < n || len(k) < (len(out)-1)*stride+n {
		panic("kernels.DotRows: k too short for the rows")
	}
	if n == 0 {
		clear(out)
		return
	}
	if CurrentPath() != Generic {
		dotRowsAsm(out, q, k, stride)
		return
	}
	for j := range out {
		out[j] = dotF32Generic(q, k[j*stride:j*stride+n])
	}
}

// AxpyRows computes y += w[j] * x[j*stride:j*stride+len(y)] for j = 0, 1,
// ..., len(w)-1 in that order, each step exactly Axpy.
func AxpyRows(y, w, x []float32, stride int) {
	n := len(y)
	if len(w) == 0 {
		return
	}
	if stride < n || len(x) < (len(w)-1)*stride+n {
		panic("kernels.AxpyRows: x too short for the rows")
	}
	if axpyRowsAsm(y, w, x, stride) {
		return
	}
	if CurrentPath() != Generic && n >= 16 {
		for j, a := range w {
			axpyAsm(y, a, x[j*stride:j*stride+n])
		}
		return
	}
	for j, a := range w {
		xr := x[j*stride : j*stride+n]
		for i := range y {
			y[i] += float32(a * xr[i])
		}
	}
}
