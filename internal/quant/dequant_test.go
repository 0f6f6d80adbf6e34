package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// The tests below build blocks from the byte layouts written out in ggml's
// ggml-common.h (element -> byte/bit position), with integer codes and
// scales exactly representable in f16, and compare Dequantize against the
// value formula element by element. Positions are computed per element
// here, rather than by the loop structure the decoder uses.

// Scales that are exact in f16.
const (
	tD    = 0.375
	tDmin = 0.0625
	tM    = -1.5
)

func h16(f float32) uint16 {
	h := FP32ToFP16(f)
	if FP16ToFP32(h) != f {
		panic("test scale not exact in f16")
	}
	return h
}

func setNibble(b []byte, i int, high bool, v int) {
	if high {
		b[i] = b[i]&0x0f | byte(v)<<4
	} else {
		b[i] = b[i]&0xf0 | byte(v)
	}
}

func setBit(b []byte, byteIdx, bit int, on bool) {
	if on {
		b[byteIdx] |= 1 << bit
	}
}

func checkBlock(t *testing.T, typ Type, blk []byte, want []float32) {
	t.Helper()
	got := make([]float32, len(want))
	if err := Dequantize(typ, blk, got); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s element %d = %v, want %v", typ, i, got[i], want[i])
		}
	}
}

func TestDequantQ4_0(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	blk := make([]byte, 18)
	binary.LittleEndian.PutUint16(blk, h16(tD))
	want := make([]float32, 32)
	for e := 0; e < 32; e++ {
		q := r.IntN(16)
		setNibble(blk[2:], e%16, e >= 16, q)
		want[e] = float32(q-8) * tD
	}
	checkBlock(t, Q4_0, blk, want)
}

func TestDequantQ4_1(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 3))
	blk := make([]byte, 20)
	binary.LittleEndian.PutUint16(blk, h16(tD))
	binary.LittleEndian.PutUint16(blk[2:], h16(tM))
	want := make([]float32, 32)
	for e := 0; e < 32; e++ {
		q := r.IntN(16)
		setNibble(blk[4:], e%16, e >= 16, q)
		want[e] = float32(q)*tD + tM
	}
	checkBlock(t, Q4_1, blk, want)
}

func TestDequantQ5(t *testing.T) {
	for _, typ := range []Type{Q5_0, Q5_1} {
		r := rand.New(rand.NewPCG(1, 4))
		blk := make([]byte, typ.BlockBytes())
		binary.LittleEndian.PutUint16(blk, h16(tD))
		hdr := 2
		if typ == Q5_1 {
			binary.LittleEndian.PutUint16(blk[2:], h16(tM))
			hdr = 4
		}
		var qh uint32
		want := make([]float32, 32)
		for e := 0; e < 32; e++ {
			q := r.IntN(32)
			setNibble(blk[hdr+4:], e%16, e >= 16, q&15)
			qh |= uint32(q>>4) << e
			if typ == Q5_0 {
				want[e] = float32(q-16) * tD
			} else {
				want[e] = float32(q)*tD + tM
			}
		}
		binary.LittleEndian.PutUint32(blk[hdr:], qh)
		checkBlock(t, typ, blk, want)
	}
}

func TestDequantQ8(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 5))
	blk := make([]byte, 34)
	binary.LittleEndian.PutUint16(blk, h16(tD))
	want := make([]float32, 32)
	for e := 0; e < 32; e++ {
		q := r.IntN(256) - 128
		blk[2+e] = byte(int8(q))
		want[e] = float32(q) * tD
	}
	checkBlock(t, Q8_0, blk, want)

	blk1 := make([]byte, 36)
	copy(blk1, blk[:2])
	copy(blk1[4:], blk[2:])
	checkBlock(t, Q8_1, blk1, want)

	k := make([]byte, 292)
	binary.LittleEndian.PutUint32(k, math.Float32bits(0.0123))
	wantK := make([]float32, 256)
	for e := 0; e < 256; e++ {
		q := r.IntN(255) - 127
		k[4+e] = byte(int8(q))
		wantK[e] = float32(q) * 0.0123
	}
	checkBlock(t, Q8_K, k, wantK)
}

// packK4Scales writes 8 (scale, min) 6-bit pairs into Q4_K/Q5_K's 12 bytes
// as ggml-common.h describes them: pairs 0-3 in the low 6 bits of bytes
// 0-3 (scales) and 4-7 (mins); pairs 4-7 keep their low 4 bits in bytes
// 8-11 (scale low nibble, min high nibble) and their top 2 bits in the
// spare top bits of bytes 0-3 (scales) and 4-7 (mins).
func packK4Scales(sc, mn [8]int) []byte {
	b := make([]byte, 12)
	for j := 0; j < 4; j++ {
		b[j] = byte(sc[j]) | byte(sc[j+4]>>4)<<6
		b[j+4] = byte(mn[j]) | byte(mn[j+4]>>4)<<6
		b[j+8] = byte(sc[j+4]&15) | byte(mn[j+4]&15)<<4
	}
	return b
}

func TestDequantQ4_K(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 6))
	blk := make([]byte, 144)
	binary.LittleEndian.PutUint16(blk, h16(tD))
	binary.LittleEndian.PutUint16(blk[2:], h16(tDmin))
	var sc, mn [8]int
	for s := range sc {
		sc[s], mn[s] = r.IntN(64), r.IntN(64)
	}
	sc[5], mn[6] = 63, 63 // exercise the top bits
	copy(blk[4:], packK4Scales(sc, mn))
	want := make([]float32, 256)
	for e := 0; e < 256; e++ {
		q := r.IntN(16)
		// 64-element chunks share 32 bytes: first 32 elements low nibbles.
		c, i := e/64, e%64
		setNibble(blk[16:], 32*c+i%32, i >= 32, q)
		s := e / 32
		want[e] = tD*float32(sc[s])*float32(q) - tDmin*float32(mn[s])
	}
	checkBlock(t, Q4_K, blk, want)
}

func TestDequantQ5_K(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 7))
	blk := make([]byte, 176)
	binary.LittleEndian.PutUint16(blk, h16(tD))
	binary.LittleEndian.PutUint16(blk[2:], h16(tDmin))
	var sc, mn [8]int
	for s := range sc {
		sc[s], mn[s] = r.IntN(64), r.IntN(64)
	}
	copy(blk[4:], packK4Scales(sc, mn))
	want := make([]float32, 256)
	for e := 0; e < 256; e++ {
		q := r.IntN(32)
		c, i := e/64, e%64
		setNibble(blk[48:], 32*c+i%32, i >= 32, q&15)
		// The fifth bit of element e is bit (e/32) of qh[e%32].
		setBit(blk[16:48], e%32, e/32, q >= 16)
		s := e / 32
		want[e] = tD*float32(sc[s])*float32(q) - tDmin*float32(mn[s])
	}
	checkBlock(t, Q5_K, blk, want)
}

func TestDequantQ6_K(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 8))
	blk := make([]byte, 210)
	binary.LittleEndian.PutUint16(blk[208:], h16(tD))
	var sc [16]int
	for s := range sc {
		sc[s] = r.IntN(256) - 128
		blk[192+s] = byte(int8(sc[s]))
	}
	want := make([]float32, 256)
	for e := 0; e < 256; e++ {
		q := r.IntN(64)
		// Per 128-element half n: quarter k of 32 elements; quarters 0,1
		// use low nibbles of ql[64n + 32*(k%2) + l], quarters 2,3 the high
		// nibbles; the top 2 bits sit at bits 2k of qh[32n + l].
		n, k, l := e/128, (e%128)/32, e%32
		setNibble(blk, 64*n+32*(k%2)+l, k >= 2, q&15)
		blk[128+32*n+l] |= byte(q>>4) << (2 * k)
		want[e] = tD * float32(sc[e/16]) * float32(q-32)
	}
	checkBlock(t, Q6_K, blk, want)
}

func TestDequantQ2_K(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 9))
	blk := make([]byte, 84)
	binary.LittleEndian.PutUint16(blk[80:], h16(tD))
	binary.LittleEndian.PutUint16(blk[82:], h16(tDmin))
	for s := 0; s < 16; s++ {
		blk[s] = byte(r.IntN(256)) // low nibble scale, high nibble min
	}
	want := make([]float32, 256)
	for e := 0; e < 256; e++ {
		q := r.IntN(4)
		// 128-element halves use 32 bytes; 32-element group j takes bits
		// 2j..2j+1 of those bytes, element l of the group byte l.
		n, j, l := e/128, (e%128)/32, e%32
		blk[16+32*n+l] |= byte(q) << (2 * j)
		s := blk[e/16]
		want[e] = tD*float32(s&15)*float32(q) - tDmin*float32(s>>4)
	}
	checkBlock(t, Q2_K, blk, want)
}

func TestDequantQ3_K(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 10))
	blk := make([]byte, 110)
	binary.LittleEndian.PutUint16(blk[108:], h16(tD))
	var sc [16]int
	for s := range sc {
		sc[s] = r.IntN(64)
	}
	// Pack as ggml's decoder reads them through three uint32 words with
	// kmask1 = 0x03030303 / kmask2 = 0x0f0f0f0f: scale i's low nibble is
	// in byte i (i < 8) or the high nibble of byte i-8, its top 2 bits in
	// byte 8 + i%4 at shift 2*(i/4).
	for i := 0; i < 16; i++ {
		if i < 8 {
			blk[96+i] |= byte(sc[i] & 15)
		} else {
			blk[96+i-8] |= byte(sc[i]&15) << 4
		}
		blk[96+8+i%4] |= byte(sc[i]>>4) << (2 * (i / 4))
	}
	want := make([]float32, 256)
	for e := 0; e < 256; e++ {
		q := r.IntN(8) - 4 // 3-bit signed: low 2 bits + "high bit clear means -4"
		low := q & 3
		hi := q >= 0
		n, j, l := e/128, (e%128)/32, e%32
		blk[32+32*n+l] |= byte(low) << (2 * j)
		setBit(blk[0:32], e%32, e/32, hi)
		want[e] = tD * float32(sc[e/16]-32) * float32(q)
	}
	// Cross-check the scale packing against ggml's word-wise unpacking.
	aux := [3]uint32{binary.LittleEndian.Uint32(blk[96:]), binary.LittleEndian.Uint32(blk[100:]), binary.LittleEndian.Uint32(blk[104:])}
	const k1, k2 = 0x03030303, 0x0f0f0f0f
	words := [4]uint32{
		aux[0]&k2 | (aux[2]>>0&k1)<<4,
		aux[1]&k2 | (aux[2]>>2&k1)<<4,
		aux[0]>>4&k2 | (aux[2]>>4&k1)<<4,
		aux[1]>>4&k2 | (aux[2]>>6&k1)<<4,
	}
	for i := 0; i < 16; i++ {
		if got := int(words[i/4] >> (8 * (i % 4)) & 0xff); got != sc[i] {
			t.Fatalf("test packing of scale %d: ggml would read %d, want %d", i, got, sc[i])
		}
	}
	checkBlock(t, Q3_K, blk, want)
}

func TestDequantFloats(t *testing.T) {
	vals := []float32{0, 1, -2.5, 65504, float32(math.Ldexp(1, -24))}
	f32 := make([]byte, 4*len(vals))
	f16 := make([]byte, 2*len(vals))
	bf := make([]byte, 2*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(f32[4*i:], math.Float32bits(v))
		binary.LittleEndian.PutUint16(f16[2*i:], FP32ToFP16(v))
		binary.LittleEndian.PutUint16(bf[2*i:], uint16(math.Float32bits(v)>>16))
	}
	checkBlock(t, F32, f32, vals)
	checkBlock(t, F16, f16, vals)
	bfWant := make([]float32, len(vals))
	for i, v := range vals {
		bfWant[i] = math.Float32frombits(math.Float32bits(v) &^ 0xffff)
	}
	checkBlock(t, BF16, bf, bfWant)
}

func TestDequantErrors(t *testing.T) {
	if err := Dequantize(Q8_0, make([]byte, 33), make([]float32, 32)); err == nil {
		t.Error("short Q8_0 block accepted")
	}
	if err := Dequantize(Q4_K, make([]byte, 144), make([]float32, 100)); err == nil {
		t.Error("partial Q4_K block accepted")
	}
	err := Dequantize(IQ2_XXS, make([]byte, 66), make([]float32, 256))
	if e, ok := err.(*Error); !ok || e.Code != ErrUnsupportedType {
		t.Errorf("IQ2_XXS: got %v, want ErrUnsupportedType", err)
	}
	if err := Dequantize(Type(4), nil, nil); err == nil {
		t.Error("retired type id 4 accepted")
	}
}

func TestRowBytes(t *testing.T) {
	cases := []struct {
		t    Type
		n    int
		want int
	}{
		{F32, 10, 40}, {F16, 10, 20}, {BF16, 3, 6}, {Q8_0, 64, 68}, {Q4_0, 32, 18},
		{Q4_K, 512, 288}, {Q6_K, 256, 210}, {Q5_K, 256, 176}, {Q8_K, 256, 292},
	}
	for _, c := range cases {
		got, err := c.t.RowBytes(c.n)
		if err != nil || got != c.want {
			t.Errorf("%s.RowBytes(%d) = %d, %v; want %d", c.t, c.n, got, err, c.want)
		}
	}
	if _, err := Q4_K.RowBytes(100); err == nil {
		t.Error("Q4_K row of 100 accepted")
	}
	if _, err := Type(99).RowBytes(32); err == nil {
		t.Error("unknown type accepted")
	}
	if ty, ok := ParseType("Q4_k"); !ok || ty != Q4_K {
		t.Error("ParseType(Q4_k)")
	}
}
