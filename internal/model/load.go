package model

import (
	"math"
	"sluice/internal/kernels"

	"sluice/internal/quant"
)

// source is what building a model needs from a file: metadata by key and
// tensors by name. The GGUF adapter implements it; tests build models from
// plain slices through the same path, so shape and type checks are shared.
type source interface {
	str(key string) (string, bool)
	uint(key string) (uint64, bool)
	float(key string) (float64, bool)
	boolean(key string) (bool, bool)
	// tensor returns a tensor's type, dims (dims[0] = row length) and bytes.
	tensor(name string) (t quant.Type, dims []uint64, data []byte, ok bool)
}

func ropeScale(base float32, dims int) float32 {
	return float32(math.Pow(float64(base), -2/float64(dims)))
}

func matrixOf(s source, name string, rows, cols int) (kernels.Matrix, error) {
	t, dims, data, ok := s.tensor(name)
	if !ok {
		return kernels.Matrix{}, errf(CodeMissingTensor, "tensor %s is missing", name)
	}
	if len(dims) != 2 || dims[0] != uint64(cols) || dims[1] != uint64(rows) {
		return kernels.Matrix{}, errf(CodeBadShape, "tensor %s has shape %v, want [%d %d]", name, dims, cols, rows)
	}
	if !kernels.Supported(t) {
		return kernels.Matrix{}, errf(CodeUnsupportedType, "tensor %s has type %s, which the matmul kernels do not support", name, t)
	}
	rb, err := t.RowBytes(cols)
	if err != nil {
		return kernels.Matrix{}, errf(CodeBadShape, "tensor %s: %v", name, err)
	}
	if len(data) != rb*rows {
		return kernels.Matrix{}, errf(CodeBadShape, "tensor %s holds %d bytes, its shape and type need %d", name, len(data), rb*rows)
	}
	return kernels.Matrix{Type: t, Rows: rows, Cols: cols, Data: data}, nil
}

func vectorOf(s source, name string, n int) ([]float32, error) {
	t, dims, data, ok := s.tensor(name)
	if !ok {
		return nil, errf(CodeMissingTensor, "tensor %s is missing", name)
	}
	if len(dims) != 1 || dims[0] != uint64(n) {
		return nil, errf(CodeBadShape, "tensor %s has shape %v, want [%d]", name, dims, n)
	}
	if !t.Supported() {
		return nil, errf(CodeUnsupportedType, "tensor %s has type %s, which cannot be decoded", name, t)
	}
	v := make([]float32, n)
	if err := quant.Dequantize(t, data, v); err != nil {
		return nil, errf(CodeBadShape, "tensor %s: %v", name, err)
	}
	return v, nil
}
