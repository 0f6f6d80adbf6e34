package model

// TEMPORARY plain-Go matmul and worker pool, used until internal/kernels
// lands; then this file goes and the names below become kernels'.

import (
	"encoding/binary"
	"sync"

	"sluice/internal/quant"
)

// Matrix is a row-major weight matrix in its file encoding: Rows rows of
// Cols elements of Type, each row RowBytes(Cols) bytes of Data.
type Matrix struct {
	Type       quant.Type
	Rows, Cols int
	Data       []byte
}

// Parallel splits work over a fixed number of goroutines.
type Parallel struct{ threads int }

func NewParallel(threads int) *Parallel { return &Parallel{max(1, threads)} }

func (p *Parallel) Threads() int { return p.threads }

// For calls fn on disjoint ranges covering [0, n).
func (p *Parallel) For(n int, fn func(lo, hi int)) {
	t := min(p.threads, n)
	if t <= 1 {
		if n > 0 {
			fn(0, n)
		}
		return
	}
	var wg sync.WaitGroup
	for i := 0; i < t; i++ {
		lo, hi := i*n/t, (i+1)*n/t
		wg.Add(1)
		go func() { defer wg.Done(); fn(lo, hi) }()
	}
	wg.Wait()
}

// matMul: out[t*Rows+r] = row r . token t. Each element is one sequential
// dot product whatever nTok or the split, so the result is batch-invariant.
func matMul(par *Parallel, out []float32, w *Matrix, x []float32, nTok int) {
	rb, _ := w.Type.RowBytes(w.Cols)
	switch w.Type {
	case quant.Q8_0:
		nb := w.Cols / 32
		xq := make([]byte, nTok*nb*34)
		for t := 0; t < nTok; t++ {
			quant.QuantizeRowQ8_0(x[t*w.Cols:(t+1)*w.Cols], xq[t*nb*34:(t+1)*nb*34])
		}
		par.For(w.Rows, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				row := w.Data[r*rb : (r+1)*rb]
				for t := 0; t < nTok; t++ {
					a := xq[t*nb*34:]
					var sum float32
					for b := 0; b < nb; b++ {
						wb, ab := row[b*34:], a[b*34:]
						var is int32
						for j := 0; j < 32; j++ {
							is += int32(int8(wb[2+j])) * int32(int8(ab[2+j]))
						}
						sum += float32(is) * (quant.FP16ToFP32(binary.LittleEndian.Uint16(wb)) * quant.FP16ToFP32(binary.LittleEndian.Uint16(ab)))
					}
					out[t*w.Rows+r] = sum
				}
			}
		})
	default:
		xs := x
		if w.Type == quant.F16 {
			xs = make([]float32, len(x[:nTok*w.Cols]))
			for i, v := range x[:nTok*w.Cols] {
				xs[i] = quant.FP16ToFP32(quant.FP32ToFP16(v))
			}
		}
		par.For(w.Rows, func(lo, hi int) {
			wr := make([]float32, w.Cols)
			for r := lo; r < hi; r++ {
				if err := quant.Dequantize(w.Type, w.Data[r*rb:(r+1)*rb], wr); err != nil {
					panic(err) // Load checked type and size
				}
				for t := 0; t < nTok; t++ {
					xt := xs[t*w.Cols : (t+1)*w.Cols]
					var sum float32
					for j, v := range wr {
						sum += v * xt[j]
					}
					out[t*w.Rows+r] = sum
				}
			}
		})
	}
}

// dot is a sequential float32 dot product: the same reduction order for
// every caller, so attention scores do not depend on batch or chunking.
func dot(a, b []float32) float32 {
	var s float32
	b = b[:len(a)]
	for i, v := range a {
		s += v * b[i]
	}
	return s
}

// axpy: y += a*x.
func axpy(a float32, x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += a * v
	}
}
