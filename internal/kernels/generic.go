package kernels

import (
	"encoding/binary"
	"math"

	"sluice/internal/quant"
)

// The generic kernels define the canonical reduction orders (package doc);
// the assembly paths must reproduce them bit for bit. float32(...) around a
// product stops the compiler fusing it into an FMA where the order says
// multiply-then-add; fma32 is the fused step the assembly's VFMADD does.

// fma32 returns a*b+c rounded once to float32, as VFMADD231PS computes it.
// a*b is exact in float64; TwoSum recovers the float64 sum's rounding error
// so that a float64 result lying exactly on a float32 midpoint breaks the
// tie toward the exact value (avoiding double rounding). Results in the
// float32 subnormal range may still differ in the last bit; sums of products
// of activations and weights do not go there.
func fma32(a, b, c float32) float32 {
	p := float64(a) * float64(b)
	cc := float64(c)
	s := p + cc
	bv := s - p
	e := (p - (s - bv)) + (cc - bv)
	if e != 0 {
		bits := math.Float64bits(s)
		if bits&(1<<29-1) == 1<<28 {
			if (e > 0) == (s > 0) {
				bits++
			} else {
				bits--
			}
			s = math.Float64frombits(bits)
		}
	}
	return float32(s)
}

// f16Table widens every binary16 value; a table lookup beats the bit
// manipulation in the generic inner loops.
var f16Table = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = quant.FP16ToFP32(uint16(i))
	}
	return &t
}()

func fp16At(b []byte, off int) float32 { return f16Table[binary.LittleEndian.Uint16(b[off:])] }

// reduce16 is the fixed tree of the 16-lane float orders.
func reduce16(acc *[16]float32) float32 {
	for h := 8; h >= 1; h /= 2 {
		for j := 0; j < h; j++ {
			acc[j] = acc[j] + acc[j+h]
		}
	}
	return acc[0]
}

func dotF32Generic(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	var acc [16]float32
	i := 0
	for ; i+16 <= n; i += 16 {
		for j := 0; j < 16; j++ {
			acc[j] = fma32(a[i+j], b[i+j], acc[j])
		}
	}
	if i < n {
		for j := 0; j < 16; j++ {
			// Lanes past the end add 0*0, as a zero-masked load gives.
			var x, y float32
			if i+j < n {
				x, y = a[i+j], b[i+j]
			}
			acc[j] = fma32(x, y, acc[j])
		}
	}
	return reduce16(&acc)
}

// dotF16Generic: w holds n binary16 weights, x n binary16 activations.
func dotF16Generic(w, x []byte, n int) float32 {
	var acc [16]float32
	for i := 0; i < n; i += 16 {
		for j := 0; j < 16; j++ {
			var p float32
			if i+j < n {
				p = float32(fp16At(w, 2*(i+j)) * fp16At(x, 2*(i+j)))
			}
			acc[j] += p
		}
	}
	return reduce16(&acc)
}

func bf16At(b []byte, off int) float32 {
	return math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[off:])) << 16)
}

func dotBF16Generic(w, x []byte, n int) float32 {
	var acc [16]float32
	for i := 0; i < n; i += 16 {
		for j := 0; j < 16; j++ {
			var p float32
			if i+j < n {
				p = float32(bf16At(w, 2*(i+j)) * bf16At(x, 2*(i+j)))
			}
			acc[j] += p
		}
	}
	return reduce16(&acc)
}

// dotQ8_0Generic: w and x are nb Q8_0 blocks. 16 float lanes: block b's
// 8 lane sums go to lanes 8*(b&1)+l, so even and odd blocks accumulate
// apart (two blocks fill one 512-bit register in the assembly).
func dotQ8_0Generic(w, x []byte, nb int) float32 {
	var acc [16]float32
	for b := 0; b < nb; b++ {
		wb := w[b*34 : b*34+34]
		xb := x[b*34 : b*34+34]
		d := fp16At(wb, 0) * fp16At(xb, 0)
		lanes := acc[8*(b&1) : 8*(b&1)+8]
		for l := 0; l < 8; l++ {
			var s int32
			for k := 2 + 4*l; k < 6+4*l; k++ {
				s += int32(int8(wb[k])) * int32(int8(xb[k]))
			}
			lanes[l] = fma32(float32(s), d, lanes[l])
		}
	}
	return reduce16(&acc)
}

// dotQ4_0Generic: w is nb Q4_0 blocks, x nb Q8_0 blocks, in Q8_0's order.
// Element e of a Q4_0 block is the low nibble of qs[e] for e < 16, else the
// high nibble of qs[e-16], minus 8.
func dotQ4_0Generic(w, x []byte, nb int) float32 {
	var acc [16]float32
	for b := 0; b < nb; b++ {
		wb := w[b*18 : b*18+18]
		xb := x[b*34 : b*34+34]
		d := fp16At(wb, 0) * fp16At(xb, 0)
		lanes := acc[8*(b&1) : 8*(b&1)+8]
		for l := 0; l < 8; l++ {
			var s int32
			for e := 4 * l; e < 4*l+4; e++ {
				var q int32
				if e < 16 {
					q = int32(wb[2+e]&15) - 8
				} else {
					q = int32(wb[2+e-16]>>4) - 8
				}
				s += q * int32(int8(xb[2+e]))
			}
			lanes[l] = fma32(float32(s), d, lanes[l])
		}
	}
	return reduce16(&acc)
}

// q4KScaleMin unpacks the 6-bit scale and min of sub-block j (0..7) from a
// Q4_K block's 12 scale bytes.
func q4KScaleMin(s []byte, j int) (sc, m int32) {
	if j < 4 {
		return int32(s[j] & 63), int32(s[j+4] & 63)
	}
	return int32(s[j+4]&0xF | (s[j-4]>>6)<<4), int32(s[j+4]>>4 | (s[j]>>6)<<4)
}

func q8KD(x []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(x)) }

// dotQ4_KGeneric: w is nb Q4_K blocks (144 B), x nb Q8_K blocks (292 B).
// Per super-block: isum = Σ_j sc_j Σ q4*q8 and imin = Σ_j m_j Σ q8 (from
// bsums), both exact; term = (d*dx)*isum - (dmin*dx)*imin.
func dotQ4_KGeneric(w, x []byte, nb int) float32 {
	var acc float32
	for b := 0; b < nb; b++ {
		wb := w[b*144 : b*144+144]
		xb := x[b*292 : b*292+292]
		dx := q8KD(xb)
		sc := wb[4:16]
		qs := wb[16:144]
		q8 := xb[4:260]
		var isum, imin int32
		for j := 0; j < 8; j++ {
			s, m := q4KScaleMin(sc, j)
			bs := int32(int16(binary.LittleEndian.Uint16(xb[260+4*j:]))) + int32(int16(binary.LittleEndian.Uint16(xb[262+4*j:])))
			imin += m * bs
			var sub int32
			q := qs[32*(j/2) : 32*(j/2)+32]
			for i := 0; i < 32; i++ {
				v := q[i] & 15
				if j&1 == 1 {
					v = q[i] >> 4
				}
				sub += int32(v) * int32(int8(q8[32*j+i]))
			}
			isum += s * sub
		}
		dd := float32(fp16At(wb, 0) * dx)
		dm := float32(fp16At(wb, 2) * dx)
		acc += float32(float32(dd*float32(isum)) - float32(dm*float32(imin)))
	}
	return acc
}

// dotQ5_KGeneric: w is nb Q5_K blocks (176 B: d, dmin, 12 scale bytes as
// Q4_K's, qh[32], qs[128]), x nb Q8_K blocks. Q4_K's order over the 5-bit
// values: element i of sub-block j is its Q4_K nibble plus 16 times bit j
// of qh[i].
func dotQ5_KGeneric(w, x []byte, nb int) float32 {
	var acc float32
	for b := 0; b < nb; b++ {
		wb := w[b*176 : b*176+176]
		xb := x[b*292 : b*292+292]
		dx := q8KD(xb)
		qh := wb[16:48]
		qs := wb[48:176]
		q8 := xb[4:260]
		var isum, imin int32
		for j := 0; j < 8; j++ {
			s, m := q4KScaleMin(wb[4:16], j)
			bs := int32(int16(binary.LittleEndian.Uint16(xb[260+4*j:]))) + int32(int16(binary.LittleEndian.Uint16(xb[262+4*j:])))
			imin += m * bs
			var sub int32
			q := qs[32*(j/2) : 32*(j/2)+32]
			for i := 0; i < 32; i++ {
				v := q[i] & 15
				if j&1 == 1 {
					v = q[i] >> 4
				}
				v |= (qh[i] >> j & 1) << 4
				sub += int32(v) * int32(int8(q8[32*j+i]))
			}
			isum += s * sub
		}
		dd := float32(fp16At(wb, 0) * dx)
		dm := float32(fp16At(wb, 2) * dx)
		acc += float32(float32(dd*float32(isum)) - float32(dm*float32(imin)))
	}
	return acc
}

// dotQ6_KGeneric: w is nb Q6_K blocks (210 B), x nb Q8_K blocks.
// Per super-block: isum = Σ_g sc_g Σ q6*q8 over the 16 groups of 16, exact;
// term = (d*dx)*isum.
func dotQ6_KGeneric(w, x []byte, nb int) float32 {
	var acc float32
	for b := 0; b < nb; b++ {
		wb := w[b*210 : b*210+210]
		xb := x[b*292 : b*292+292]
		var q6 [256]int32
		q6KDecode(wb, &q6)
		q8 := xb[4:260]
		var isum int32
		for g := 0; g < 16; g++ {
			var sub int32
			for i := 16 * g; i < 16*g+16; i++ {
				sub += q6[i] * int32(int8(q8[i]))
			}
			isum += int32(int8(wb[192+g])) * sub
		}
		dd := float32(fp16At(wb, 208) * q8KD(xb))
		acc += float32(dd * float32(isum))
	}
	return acc
}

// q6KDecode unpacks a Q6_K block's 256 signed 6-bit values (ql low nibbles,
// qh 2-bit high parts, minus 32) in element order.
func q6KDecode(wb []byte, q *[256]int32) {
	ql, qh := wb[0:128], wb[128:192]
	for h := 0; h < 2; h++ {
		l4, h2 := ql[64*h:], qh[32*h:]
		base := 128 * h
		for l := 0; l < 32; l++ {
			q[base+l] = int32(l4[l]&15|(h2[l]&3)<<4) - 32
			q[base+l+32] = int32(l4[l+32]&15|(h2[l]>>2&3)<<4) - 32
			q[base+l+64] = int32(l4[l]>>4|(h2[l]>>4&3)<<4) - 32
			q[base+l+96] = int32(l4[l+32]>>4|(h2[l]>>6&3)<<4) - 32
		}
	}
}
