// Package node builds the roles of a sluice deployment from configuration:
// it loads the model (a GGUF file or the built-in default), runs the local
// preflight check for every role (I2) and sizes each role's KV pool from
// that same report, so the pool a role runs with is the pool that was
// checked. The commands (sluice serve, router, prefill, decode) and the
// end-to-end tests share it.
package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strings"

	"sluice/internal/engine"
	"sluice/internal/gguf"
	"sluice/internal/kv"
	"sluice/internal/model"
	"sluice/internal/preflight"
	"sluice/internal/router"
	"sluice/internal/synth"
	"sluice/internal/tokenizer"
)

// Model is a loaded model and everything derived from it.
type Model struct {
	// Name is the id clients see in /v1/models.
	Name string
	// BuiltIn is true for the built-in synthetic default model.
	BuiltIn bool
	Path    string
	Runtime *engine.ModelRuntime
	Tok     *tokenizer.Tokenizer
	Shape   preflight.Model
	// Placement is where the weights live (LoadModel's mem); zero for the
	// built-in model, which is not a file.
	Placement gguf.Placement
	file      *gguf.File
}

// BuiltInName names the built-in default model wherever it is shown.
const BuiltInName = "sluice-default-synthetic"

// LoadModel opens a GGUF model with its weights placed as mem says
// (gguf.File.Place); an empty path loads the built-in default model
// (deterministic synthetic weights, no download).
func LoadModel(path string, mem gguf.Memory) (*Model, error) {
	m := &Model{Path: path}
	var f *gguf.File
	var err error
	if path == "" {
		data, derr := synth.Default()
		if derr != nil {
			return nil, fmt.Errorf("built-in default model: %w", derr)
		}
		f, err = gguf.Parse(data)
		m.Name, m.BuiltIn = BuiltInName, true
	} else {
		if _, serr := os.Stat(path); serr != nil {
			return nil, missingModel(path, serr)
		}
		f, err = gguf.Open(path)
		m.Name = modelName(path)
		if err == nil {
			if m.Placement, err = f.Place(mem); err != nil {
				f.Close()
			}
		}
	}
	if err != nil {
		var ge *gguf.Error
		if errors.As(err, &ge) && strings.Contains(ge.Msg, path) {
			return nil, err // it names the file already ("model X: gguf: X: ..." said it twice)
		}
		return nil, fmt.Errorf("model %s: %w", m.describe(), err)
	}
	rt, tok, err := engine.LoadRuntime(m.Name, f)
	if err != nil {
		f.Close()
		var me *model.Error
		if errors.As(err, &me) {
			// The refusal's stable code (docs/models.md), as gguf's and
			// the tokenizer's errors end with theirs.
			return nil, fmt.Errorf("model %s: %w [%s]", m.describe(), err, me.Code)
		}
		return nil, fmt.Errorf("model %s: %w", m.describe(), err)
	}
	m.file, m.Runtime, m.Tok = f, rt, tok
	c := rt.Model().Config()
	m.Shape = preflight.Model{Name: m.describe(), WeightBytes: c.TensorBytes, Layers: c.Layers,
		KVHeads: c.KVHeads, HeadDim: c.HeadDim, TrainContext: c.Context}
	return m, nil
}

func (m *Model) describe() string {
	if m.BuiltIn || m.Path == "" {
		return BuiltInName + " (built-in, synthetic random weights)"
	}
	return m.Path
}

// Fingerprint is the model's fingerprint (I13): every connection and
// reservation between roles carries it, hashed on first use (metadata
// whole, a fixed sample of every tensor: 13-26 ms warm, about 0.3 s cold
// for a 1 GB file, gguf.File.Fingerprint).
func (m *Model) Fingerprint() model.Fingerprint { return m.Runtime.Fingerprint() }

// Describe is how logs name the model.
func (m *Model) Describe() string { return m.describe() }

// Close releases the model file's mapping; nothing may use the model after.
func (m *Model) Close() error {
	if m.file == nil {
		return nil
	}
	return m.file.Close()
}

func modelName(path string) string {
	base := path
	for i := len(path) - 1; i >= 0; i-- {
		if path[i] == '/' {
			base = path[i+1:]
			break
		}
	}
	if len(base) > 5 && base[len(base)-5:] == ".gguf" {
		base = base[:len(base)-5]
	}
	return base
}

// Pools is the pool configuration shared by every role of one process.
type Pools struct {
	// Context is the configured context; 0 means auto.
	Context int
	// KVMemory (bytes) or PoolTokens sizes each role's pool.
	KVMemory   int64
	PoolTokens int
	PageSize   int
	// Verify says when sealed pages are re-hashed (--kv-verify).
	Verify kv.Verify
	// KVType is --kv-type: preflight.KVF16 (also when empty), KVF32 or KVQ8_0.
	KVType string
	// GrammarMaskBytes is --grammar-mask-cache: each role's bound on the
	// token masks its compiled grammars cache (0: the default).
	GrammarMaskBytes int64
	// Auto, when set, says KVMemory was sized by --kv-memory auto
	// (AutoPools); preflight's report and refusals say so.
	Auto *preflight.Auto
}

// AutoPools sizes KVMemory for --kv-memory auto (preflight.SizeAuto): a
// share of room (the memory the process may still take; -1 unknown)
// after the weights, split equally over pools, capped at maxConcurrency
// sequences of the target context (p.Context, else the model's training
// context).
func (m *Model) AutoPools(p Pools, pools, maxConcurrency int, room int64) Pools {
	var weights int64
	if !m.BuiltIn && m.Placement.Memory == gguf.MemoryMap {
		weights = m.Placement.Bytes
	}
	shape := m.Shape
	shape.KVType = p.KVType
	ctx := p.Context
	if ctx == 0 {
		ctx = shape.TrainContext
	}
	a := preflight.SizeAuto(preflight.AutoInput{Room: room, Weights: weights, Pools: pools, BytesPerToken: shape.KVBytesPerToken(),
		PageSize: p.PageSize, Context: ctx, MaxConcurrency: maxConcurrency})
	p.KVMemory, p.PoolTokens, p.Auto = a.PerPool, 0, &a
	return p
}

// Preflight checks the given roles (I2). The servers refuse to start when
// the report is not OK.
func (m *Model) Preflight(p Pools, roles ...string) preflight.Report {
	in := preflight.Input{Model: m.Shape, Context: p.Context}
	in.Model.KVType = p.KVType
	for _, r := range roles {
		in.Pools = append(in.Pools, preflight.Pool{Role: r, KVMemory: p.KVMemory, PoolTokens: p.PoolTokens, PageSize: p.PageSize, Auto: p.Auto})
	}
	return preflight.Local(in)
}

// RoleConfig is the engine configuration of one role, sized from its
// preflight verdict (the pool it runs with is the pool that was checked).
func (m *Model) RoleConfig(rep preflight.Report, role string, threads, maxConcurrency int) (engine.Config, error) {
	for _, rr := range rep.Roles {
		if rr.Role == role {
			typ, err := kv.ParseType(rr.KVType)
			if err != nil {
				return engine.Config{}, err
			}
			return engine.Config{Model: m.Runtime, Context: rep.EffectiveContext, PoolPages: rr.Pages,
				PageSize: rr.PageSize, KVType: typ, Threads: threads, MaxConcurrency: maxConcurrency}, nil
		}
	}
	return engine.Config{}, fmt.Errorf("preflight report has no role %q", role)
}

// Tokenizer adapts the model's tokenizer to the router.
func (m *Model) Tokenizer() router.Tokenizer { return tokAdapter{m.Tok} }

// ChatTemplate is the model's chat template, or the documented fallback
// when the model has none.
func (m *Model) ChatTemplate() (*router.ChatTemplate, error) {
	return router.NewChatTemplate(m.Tok.ChatTemplate(), m.specialText(m.Tok.BOS()), m.specialText(m.Tok.EOS()))
}

// ChatTemplateFrom is source as the chat template (--chat-template), with
// the model's BOS and EOS texts.
func (m *Model) ChatTemplateFrom(source string) (*router.ChatTemplate, error) {
	return router.NewChatTemplate(source, m.specialText(m.Tok.BOS()), m.specialText(m.Tok.EOS()))
}

// BOSText is the BOS token's text ("" when the model has none).
func (m *Model) BOSText() string { return m.specialText(m.Tok.BOS()) }

func (m *Model) specialText(id int32) string {
	if id < 0 || int(id) >= m.Tok.Size() {
		return ""
	}
	return m.Tok.Token(id)
}

type tokAdapter struct{ t *tokenizer.Tokenizer }

func (a tokAdapter) Encode(text string, addSpecial, parseSpecial bool) ([]int32, error) {
	return a.t.Encode(text, addSpecial, parseSpecial), nil
}
func (a tokAdapter) NewDecoder() router.Decoder { return a.t.NewStreamDecoder() }
func (a tokAdapter) IsEOG(id int32) bool        { return a.t.IsEOG(id) }

// TokenID finds a token by its text (a thinking model's <think>).
func (a tokAdapter) TokenID(text string) (int32, bool) { return a.t.ID(text) }

// TokenText is one token's bytes, special tokens as their text (logprobs).
func (a tokAdapter) TokenText(id int32) string { return a.t.TokenText(id) }

// repoLike is a path shaped as a Hugging Face repository id (ORG/REPO),
// what a vLLM user types as --model.
var repoLike = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$`)

// missingModel is the error for a --model path that cannot be read: what
// was wrong, and how to get a model, rather than a bare stat error.
func missingModel(path string, err error) error {
	if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("model file %s: %w", path, err)
	}
	hint := "to run a model from Hugging Face, give --model hf://ORG/REPO[:QUANT] (e.g. hf://Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M; downloaded once into the Hugging Face cache and verified), or omit --model to serve the built-in model"
	if repoLike.MatchString(path) && !strings.HasSuffix(strings.ToLower(path), ".gguf") {
		hint = fmt.Sprintf("if %s is a Hugging Face repository, give --model hf://%s (sluice runs GGUF files: for a model published as safetensors, use its ...-GGUF repository, e.g. hf://%s-GGUF:Q4_K_M)", path, path, path)
	}
	return fmt.Errorf("model file %s does not exist; %s [model_not_found]", path, hint)
}
