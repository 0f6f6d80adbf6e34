package quant

import "math"

// The K-quant quantizers follow ggml's reference quantizers (what
// llama-quantize writes without an importance matrix): per sub-block a
// weighted least-squares search for the scale (and min), then the
// sub-block scales quantized against the super-block's f16 d (and dmin),
// then the elements re-quantized against the scales decode will use.

// groupMaxEps is ggml's GROUP_MAX_EPS: below it a group counts as zero.
const groupMaxEps = 1e-15

// fitAffine chooses scale and min for x ~ scale*L + min with L in
// [0, nmax] and min <= 0, minimising the w-weighted squared error. It
// starts from the min/max grid and tries nstep+1 alternative grids
// (iscale = (nmax + rmin + rdelta*k) / range) with the least-squares
// scale and min for each, keeping the best. It returns scale and -min.
func fitAffine(x, w []float32, nmax int, L []uint8, rmin, rdelta float32, nstep int) (float32, float32) {
	lo, hi := x[0], x[0]
	var sumW, sumX float32
	for i, v := range x {
		lo, hi = min(lo, v), max(hi, v)
		sumW += w[i]
		sumX += float32(w[i] * v)
	}
	lo = min(lo, 0)
	if hi == lo {
		for i := range L {
			L[i] = 0
		}
		return 0, -lo
	}
	iscale := float32(nmax) / (hi - lo)
	scale := 1 / iscale
	var best float32
	for i, v := range x {
		l := min(nmax, max(0, nearestInt(float32(iscale*(v-lo)))))
		L[i] = uint8(l)
		d := float32(scale*float32(l)) + lo - v
		best += float32(w[i] * float32(d*d))
	}
	var aux [32]uint8
	for k := 0; k <= nstep; k++ {
		is := (rmin + float32(rdelta*float32(k)) + float32(nmax)) / (hi - lo)
		var sl, sl2, sxl float32
		for i, v := range x {
			l := min(nmax, max(0, nearestInt(float32(is*(v-lo)))))
			aux[i] = uint8(l)
			fl := float32(l)
			sl += float32(w[i] * fl)
			sl2 += float32(float32(w[i]*fl) * fl)
			sxl += float32(float32(w[i]*fl) * v)
		}
		det := float32(sumW*sl2) - float32(sl*sl)
		if det <= 0 {
			continue
		}
		sc := (float32(sumW*sxl) - float32(sumX*sl)) / det
		mn := (float32(sl2*sumX) - float32(sl*sxl)) / det
		if mn > 0 {
			mn = 0
			sc = sxl / sl2
		}
		var e float32
		for i, v := range x {
			d := float32(sc*float32(aux[i])) + mn - v
			e += float32(w[i] * float32(d*d))
		}
		if e < best {
			copy(L, aux[:len(x)])
			best, scale, lo = e, sc, mn
		}
	}
	return scale, -lo
}

// fitSymmetric chooses a signed scale for x ~ scale*l, l in [-nmax,
// nmax-1], weighting element i by x[i]^2 (ggml's make_qx_quants with
// rmse_type 1): the grid through the largest-magnitude element (mapped to
// -nmax), then 18 nearby grids, keeping the one with the best
// least-squares fit.
func fitSymmetric(x []float32, nmax int) float32 {
	var amax, mx float32
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax, mx = a, v
		}
	}
	if amax < groupMaxEps {
		return 0
	}
	fit := func(iscale float32) (sumlx, suml2 float32) {
		for _, v := range x {
			l := float32(max(-nmax, min(nmax-1, nearestInt(float32(iscale*v)))))
			w := float32(v * v)
			sumlx += float32(float32(w*v) * l)
			suml2 += float32(float32(w*l) * l)
		}
		return
	}
	sumlx, suml2 := fit(-float32(nmax) / mx)
	var scale float32
	if suml2 != 0 {
		scale = sumlx / suml2
	}
	best := scale * sumlx
	for is := -9; is <= 9; is++ {
		if is == 0 {
			continue
		}
		lx, l2 := fit(-(float32(nmax) + float32(0.1*float32(is))) / mx)
		if l2 > 0 && float32(lx*lx) > float32(best*l2) {
			scale = lx / l2
			best = scale * lx
		}
	}
	return scale
}

func quantBlockQ4_K(x []float32, b []byte) { quantBlockKAffine(x, b, 15, -1, 0.1, 20) }
func quantBlockQ5_K(x []float32, b []byte) { quantBlockKAffine(x, b, 31, -0.5, 0.1, 15) }

// quantBlockKAffine writes a Q4_K (nmax 15) or Q5_K (nmax 31) block.
// Elements are weighted by rms(sub-block) + |x|, as ggml does, so large
// values are reproduced more closely.
func quantBlockKAffine(x []float32, b []byte, nmax int, rmin, rdelta float32, nstep int) {
	var scales, mins [8]float32
	var L [QK_K]uint8
	var w [32]float32
	var maxScale, maxMin float32
	for s := 0; s < 8; s++ {
		sub := x[s*32 : (s+1)*32]
		var ss float32
		for _, v := range sub {
			ss += float32(v * v)
		}
		av := float32(math.Sqrt(float64(ss / 32)))
		for l, v := range sub {
			w[l] = av + abs32(v)
		}
		scales[s], mins[s] = fitAffine(sub, w[:], nmax, L[s*32:(s+1)*32], rmin, rdelta, nstep)
		maxScale = max(maxScale, scales[s])
		maxMin = max(maxMin, mins[s])
	}
	for i := range b {
		b[i] = 0
	}
	var invScale, invMin float32
	if maxScale > 0 {
		invScale = 63 / maxScale
	}
	if maxMin > 0 {
		invMin = 63 / maxMin
	}
	var ls, lm [8]uint8
	for s := 0; s < 8; s++ {
		ls[s] = uint8(min(63, nearestInt(float32(invScale*scales[s]))))
		lm[s] = uint8(min(63, nearestInt(float32(invMin*mins[s]))))
	}
	sc := b[4:16]
	for j := 0; j < 8; j++ {
		if j < 4 {
			sc[j] = ls[j]
			sc[j+4] = lm[j]
		} else {
			sc[j+4] = ls[j]&0xf | lm[j]<<4
			sc[j-4] |= ls[j] >> 4 << 6
			sc[j] |= lm[j] >> 4 << 6
		}
	}
	putF16(b, 0, maxScale/63)
	putF16(b, 2, maxMin/63)
	// Re-quantize against exactly what decode will use.
	d, dmin := f16at(b, 0), f16at(b, 2)
	for s := 0; s < 8; s++ {
		dl := d * float32(ls[s])
		if dl == 0 {
			continue // ggml keeps the fit's codes; they decode to -dmin*m either way
		}
		ml := dmin * float32(lm[s])
		for l := 0; l < 32; l++ {
			L[s*32+l] = uint8(min(nmax, max(0, nearestInt((x[s*32+l]+ml)/dl))))
		}
	}
	q := b[16:144]
	var qh []byte
	if nmax == 31 {
		qh = b[16:48]
		q = b[48:176]
	}
	// 64-element chunks share 32 bytes: first half low nibbles, second
	// half high; Q5_K's fifth bit of sub-block s is bit s of qh[l].
	for s := 0; s < 8; s++ {
		for l := 0; l < 32; l++ {
			v := L[s*32+l]
			idx := (s/2)*32 + l
			q[idx] |= (v & 15) << (4 * (s % 2))
			if qh != nil && v >= 16 {
				qh[l] |= 1 << s
			}
		}
	}
}

// quantBlockQ6_K writes a Q6_K block: 16 sub-blocks of 16 with a signed
// fitted scale each, scales as int8 against d = maxScale/-128.
func quantBlockQ6_K(x []float32, b []byte) {
	for i := range b {
		b[i] = 0
	}
	var scales [16]float32
	var maxScale, maxAbs float32
	for s := 0; s < 16; s++ {
		scales[s] = fitSymmetric(x[s*16:(s+1)*16], 32)
		if a := abs32(scales[s]); a > maxAbs {
			maxAbs, maxScale = a, scales[s]
		}
	}
	if maxAbs < groupMaxEps {
		return
	}
	ql, qh, sc := b[0:128], b[128:192], b[192:208]
	iscale := -128 / maxScale
	putF16(b, 208, 1/iscale)
	d := f16at(b, 208)
	var L [QK_K]int
	for s := 0; s < 16; s++ {
		q := min(127, nearestInt(float32(iscale*scales[s])))
		sc[s] = byte(int8(q))
		dl := d * float32(q)
		for l := 0; l < 16; l++ {
			v := 0
			if dl != 0 {
				v = max(-32, min(31, nearestInt(x[s*16+l]/dl)))
			}
			L[s*16+l] = v + 32
		}
	}
	for n := 0; n < QK_K; n += 128 {
		for l := 0; l < 32; l++ {
			q1, q2, q3, q4 := L[n+l], L[n+l+32], L[n+l+64], L[n+l+96]
			ql[n/2+l] = byte(q1&0xf | (q3&0xf)<<4)
			ql[n/2+l+32] = byte(q2&0xf | (q4&0xf)<<4)
			qh[n/4+l] = byte(q1>>4 | (q2>>4)<<2 | (q3>>4)<<4 | (q4>>4)<<6)
		}
	}
}
