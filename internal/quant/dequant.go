package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"
)

func f16at(b []byte, off int) float32 { return FP16ToFP32(binary.LittleEndian.Uint16(b[off:])) }

var (
	fp16Once sync.Once
	fp16Tab  *[1 << 16]float32
)

// fp16Table is every half's float32 value (256 KiB, built on first use),
// as ggml's table, since F16 tensors are decoded element by element.
func fp16Table() *[1 << 16]float32 {
	fp16Once.Do(func() {
		t := new([1 << 16]float32)
		for i := range t {
			t[i] = FP16ToFP32(uint16(i))
		}
		fp16Tab = t
	})
	return fp16Tab
}

// Dequantize decodes len(dst) elements of type t from src, which must hold
// exactly that many elements' blocks.
func Dequantize(t Type, src []byte, dst []float32) error {
	if err := checkLens("dequantize", t, len(src), len(dst)); err != nil {
		return err
	}
	if !t.Supported() {
		return &Error{Code: ErrUnsupportedType, Msg: fmt.Sprintf("dequantize: type %s is not supported", t)}
	}
	bs, bb := t.BlockSize(), t.BlockBytes()
	nb := len(dst) / bs
	switch t {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
		return nil
	case F16:
		tab := fp16Table()
		for i := range dst {
			dst[i] = tab[binary.LittleEndian.Uint16(src[2*i:])]
		}
		return nil
	case BF16:
		for i := range dst {
			dst[i] = BF16ToFP32(binary.LittleEndian.Uint16(src[2*i:]))
		}
		return nil
	}
	var fn func(b []byte, y []float32)
	switch t {
	case Q4_0:
		fn = dequantQ4_0
	case Q4_1:
		fn = dequantQ4_1
	case Q5_0:
		fn = dequantQ5_0
	case Q5_1:
		fn = dequantQ5_1
	case Q8_0:
		fn = dequantQ8_0
	case Q8_1:
		fn = dequantQ8_1
	case Q2_K:
		fn = dequantQ2_K
	case Q3_K:
		fn = dequantQ3_K
	case Q4_K:
		fn = dequantQ4_K
	case Q5_K:
		fn = dequantQ5_K
	case Q6_K:
		fn = dequantQ6_K
	case Q8_K:
		fn = dequantQ8_K
	default:
		return &Error{Code: ErrUnsupportedType, Msg: fmt.Sprintf("dequantize: type %s is not supported", t)}
	}
	for i := 0; i < nb; i++ {
		fn(src[i*bb:(i+1)*bb], dst[i*bs:(i+1)*bs])
	}
	return nil
}

func dequantQ4_0(b []byte, y []float32) {
	d := f16at(b, 0)
	qs := b[2:18]
	for j := 0; j < 16; j++ {
		y[j] = float32(int(qs[j]&0xf)-8) * d
		y[j+16] = float32(int(qs[j]>>4)-8) * d
	}
}

func dequantQ4_1(b []byte, y []float32) {
	d, m := f16at(b, 0), f16at(b, 2)
	qs := b[4:20]
	for j := 0; j < 16; j++ {
		y[j] = float32(qs[j]&0xf)*d + m
		y[j+16] = float32(qs[j]>>4)*d + m
	}
}

func dequantQ5_0(b []byte, y []float32) {
	d := f16at(b, 0)
	qh := binary.LittleEndian.Uint32(b[2:])
	qs := b[6:22]
	for j := 0; j < 16; j++ {
		h0 := int((qh >> j) & 1 << 4)
		h1 := int((qh >> (j + 16)) & 1 << 4)
		y[j] = float32(int(qs[j]&0xf)|h0-16) * d
		y[j+16] = float32(int(qs[j]>>4)|h1-16) * d
	}
}

func dequantQ5_1(b []byte, y []float32) {
	d, m := f16at(b, 0), f16at(b, 2)
	qh := binary.LittleEndian.Uint32(b[4:])
	qs := b[8:24]
	for j := 0; j < 16; j++ {
		h0 := int((qh >> j) & 1 << 4)
		h1 := int((qh >> (j + 16)) & 1 << 4)
		y[j] = float32(int(qs[j]&0xf)|h0)*d + m
		y[j+16] = float32(int(qs[j]>>4)|h1)*d + m
	}
}

func dequantQ8_0(b []byte, y []float32) {
	d := f16at(b, 0)
	for j := 0; j < 32; j++ {
		y[j] = float32(int8(b[2+j])) * d
	}
}

func dequantQ8_1(b []byte, y []float32) {
	d := f16at(b, 0)
	for j := 0; j < 32; j++ {
		y[j] = float32(int8(b[4+j])) * d
	}
}

func dequantQ8_K(b []byte, y []float32) {
	d := math.Float32frombits(binary.LittleEndian.Uint32(b))
	for j := 0; j < QK_K; j++ {
		y[j] = float32(int8(b[4+j])) * d
	}
}

func dequantQ2_K(b []byte, y []float32) {
	scales := b[0:16]
	q := b[16:80]
	d, dmin := f16at(b, 80), f16at(b, 82)
	is := 0
	for n := 0; n < QK_K; n += 128 {
		shift := uint(0)
		for j := 0; j < 4; j++ {
			for half := 0; half < 2; half++ {
				sc := scales[is]
				is++
				dl := d * float32(sc&0xf)
				ml := dmin * float32(sc>>4)
				for l := 0; l < 16; l++ {
					y[0] = dl*float32(q[l+16*half]>>shift&3) - ml
					y = y[1:]
				}
			}
			shift += 2
		}
		q = q[32:]
	}
}

func dequantQ3_K(b []byte, y []float32) {
	hm := b[0:32]
	q := b[32:96]
	sc := b[96:108]
	d := f16at(b, 108)
	scales := unpackQ3Scales(sc)
	is := 0
	m := byte(1)
	for n := 0; n < QK_K; n += 128 {
		shift := uint(0)
		for j := 0; j < 4; j++ {
			for half := 0; half < 2; half++ {
				dl := d * float32(scales[is]-32)
				is++
				for l := 0; l < 16; l++ {
					v := int(q[l+16*half] >> shift & 3)
					if hm[l+16*half]&m == 0 {
						v -= 4
					}
					y[0] = dl * float32(v)
					y = y[1:]
				}
			}
			shift += 2
			m <<= 1
		}
		q = q[32:]
	}
}

// unpackQ3Scales expands Q3_K's 12 bytes into 16 6-bit scales: the low
// 4 bits of scale i come from byte i%8 (low nibble for i<8, high for
// i>=8), the top 2 bits from byte 8+i%4 at bit offset 2*(i/4).
func unpackQ3Scales(sc []byte) [16]int {
	var out [16]int
	for i := 0; i < 16; i++ {
		lo := int(sc[i%8])
		if i >= 8 {
			lo >>= 4
		}
		lo &= 0xf
		hi := int(sc[8+i%4]>>(2*(i/4))) & 3
		out[i] = lo | hi<<4
	}
	return out
}

// scaleMinK4 unpacks the j-th (0..7) 6-bit scale and min of Q4_K/Q5_K:
// j<4 live in the low 6 bits of bytes j and j+4; j>=4 take 4 bits from
// byte j+4 and their top 2 bits from the spare high bits of bytes j-4, j.
func scaleMinK4(j int, q []byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xf | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}

func dequantQ4_K(b []byte, y []float32) {
	d, dmin := f16at(b, 0), f16at(b, 2)
	scales := b[4:16]
	q := b[16:144]
	is := 0
	for j := 0; j < QK_K; j += 64 {
		sc, m := scaleMinK4(is, scales)
		d1, m1 := d*float32(sc), dmin*float32(m)
		sc, m = scaleMinK4(is+1, scales)
		d2, m2 := d*float32(sc), dmin*float32(m)
		for l := 0; l < 32; l++ {
			y[l] = d1*float32(q[l]&0xf) - m1
			y[l+32] = d2*float32(q[l]>>4) - m2
		}
		y = y[64:]
		q = q[32:]
		is += 2
	}
}

func dequantQ5_K(b []byte, y []float32) {
	d, dmin := f16at(b, 0), f16at(b, 2)
	scales := b[4:16]
	qh := b[16:48]
	ql := b[48:176]
	is := 0
	u1, u2 := byte(1), byte(2)
	for j := 0; j < QK_K; j += 64 {
		sc, m := scaleMinK4(is, scales)
		d1, m1 := d*float32(sc), dmin*float32(m)
		sc, m = scaleMinK4(is+1, scales)
		d2, m2 := d*float32(sc), dmin*float32(m)
		for l := 0; l < 32; l++ {
			v1 := int(ql[l] & 0xf)
			if qh[l]&u1 != 0 {
				v1 += 16
			}
			v2 := int(ql[l] >> 4)
			if qh[l]&u2 != 0 {
				v2 += 16
			}
			y[l] = d1*float32(v1) - m1
			y[l+32] = d2*float32(v2) - m2
		}
		y = y[64:]
		ql = ql[32:]
		is += 2
		u1 <<= 2
		u2 <<= 2
	}
}

func dequantQ6_K(b []byte, y []float32) {
	ql := b[0:128]
	qh := b[128:192]
	sc := b[192:208]
	d := f16at(b, 208)
	for n := 0; n < QK_K; n += 128 {
		for l := 0; l < 32; l++ {
			is := l / 16
			q1 := int(ql[l]&0xf|(qh[l]>>0&3)<<4) - 32
			q2 := int(ql[l+32]&0xf|(qh[l]>>2&3)<<4) - 32
			q3 := int(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
			q4 := int(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
			y[l] = d * float32(int8(sc[is])) * float32(q1)
			y[l+32] = d * float32(int8(sc[is+2])) * float32(q2)
			y[l+64] = d * float32(int8(sc[is+4])) * float32(q3)
			y[l+96] = d * float32(int8(sc[is+6])) * float32(q4)
		}
		y = y[128:]
		ql = ql[64:]
		qh = qh[32:]
		sc = sc[8:]
	}
}
