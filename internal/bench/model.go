package bench

import (
	"time"

	"sluice/internal/gguf"
	"sluice/internal/model"
)

// loadedModel is a model file opened for measuring: the kernel benchmark
// runs its forward pass; the serving benchmarks read only its vocabulary
// and context (the servers they start load it themselves).
type loadedModel struct {
	file  *gguf.File
	model *model.Model
	// placed is where the weights live (gguf.File.Place).
	placed gguf.Placement
}

func (l *loadedModel) Close() error { return l.file.Close() }

// openModel opens the GGUF file at path with its weights placed by mem.
func openModel(path string, mem gguf.Memory) (*loadedModel, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	lm := &loadedModel{file: f}
	if lm.placed, err = f.Place(mem); err == nil {
		lm.model, err = model.Load(f)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return lm, nil
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
