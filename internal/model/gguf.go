package model

import (
	"sluice/internal/gguf"
	"sluice/internal/quant"
)

// Load builds a model from a parsed GGUF file. Weight matrices alias the
// file's mapping, so f must stay open while the model is in use. Errors
// name the tensor or key at fault and carry a Code.
func Load(f *gguf.File) (*Model, error) {
	s := ggufSource{f}
	c, err := configFrom(s)
	if err != nil {
		return nil, err
	}
	return build(c, s)
}

type ggufSource struct{ f *gguf.File }

func (s ggufSource) tensorNames() []string {
	names := make([]string, len(s.f.Tensors))
	for i, t := range s.f.Tensors {
		names[i] = t.Name
	}
	return names
}

func (s ggufSource) str(k string) (string, bool)    { return s.f.String(k) }
func (s ggufSource) uint(k string) (uint64, bool)   { return s.f.Uint(k) }
func (s ggufSource) float(k string) (float64, bool) { return s.f.Float(k) }
func (s ggufSource) boolean(k string) (bool, bool)  { return s.f.Bool(k) }
func (s ggufSource) tensor(name string) (quant.Type, []uint64, []byte, bool) {
	t, ok := s.f.Tensor(name)
	if !ok {
		return 0, nil, nil, false
	}
	return t.Type, t.Dims, s.f.TensorData(t), true
}
