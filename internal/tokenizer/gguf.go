package tokenizer

import (
	"sluice/internal/gguf"
)

// Metadata is the part of a GGUF file's metadata a tokenizer reads;
// *gguf.File implements it. Each getter reports false when the key is absent
// or holds another type.
type Metadata interface {
	String(key string) (string, bool)
	Uint(key string) (uint64, bool)
	Bool(key string) (bool, bool)
	Strings(key string) ([]string, bool)
	Float32s(key string) ([]float32, bool)
	Int32s(key string) ([]int32, bool)
}

var _ Metadata = (*gguf.File)(nil)

// FromGGUF builds the tokenizer stored in a GGUF file (a full model or a
// vocab-only file).
func FromGGUF(f *gguf.File) (*Tokenizer, error) { return FromMetadata(f) }

// Load opens a GGUF file, reads its tokenizer and closes it.
func Load(path string) (*Tokenizer, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return FromGGUF(f)
}

// ReadVocab reads tokenizer.ggml.* (and tokenizer.chat_template) into a
// Vocab, applying llama.cpp's defaults where a key is absent.
func ReadVocab(m Metadata) (Vocab, error) {
	const p = "tokenizer.ggml."
	model, ok := m.String(p + "model")
	if !ok {
		return Vocab{}, errorf(CodeMissingKey, "the file has no tokenizer (string key %smodel is missing)", p)
	}
	v := DefaultVocab(model)
	if model != ModelSPM && model != ModelBPE {
		return v, errorf(CodeUnknownModel, "unsupported tokenizer model %q (%smodel); supported: %q (SentencePiece-style) and %q (byte-level BPE)", model, p, ModelSPM, ModelBPE)
	}
	v.Pre, _ = m.String(p + "pre")
	v.applyPreDefaults()
	if v.Tokens, ok = m.Strings(p + "tokens"); !ok || len(v.Tokens) == 0 {
		return v, errorf(CodeMissingKey, "the file has no token list (string array %stokens)", p)
	}
	n := uint64(len(v.Tokens))
	v.Scores, _ = m.Float32s(p + "scores")
	v.Types, _ = m.Int32s(p + "token_type")
	if model == ModelBPE {
		if v.Merges, ok = m.Strings(p + "merges"); !ok {
			return v, errorf(CodeMissingKey, "a byte-level BPE tokenizer needs merges (string array %smerges)", p)
		}
	}
	// An id outside the vocabulary keeps the default, as llama.cpp does
	// (it warns "bad special token").
	id := func(key string, dst *int32) {
		if x, ok := m.Uint(p + key); ok && x < n {
			*dst = int32(x)
		}
	}
	id("bos_token_id", &v.BOS)
	id("eos_token_id", &v.EOS)
	id("eot_token_id", &v.EOT)
	id("eom_token_id", &v.EOM)
	id("unknown_token_id", &v.UNK)
	id("padding_token_id", &v.PAD)
	for _, key := range []string{"fim_pad_token_id", "fim_rep_token_id", "fim_sep_token_id"} {
		if x, ok := m.Uint(p + key); ok && x < n {
			v.EOG = append(v.EOG, int32(x))
		}
	}
	if b, ok := m.Bool(p + "add_bos_token"); ok {
		v.AddBOS = b
	}
	if b, ok := m.Bool(p + "add_eos_token"); ok {
		v.AddEOS = b
	}
	if b, ok := m.Bool(p + "add_space_prefix"); ok {
		v.AddSpacePrefix = b
	}
	v.ChatTemplate, _ = m.String("tokenizer.chat_template")
	return v, nil
}

// FromMetadata builds a tokenizer from GGUF-style metadata.
func FromMetadata(m Metadata) (*Tokenizer, error) {
	v, err := ReadVocab(m)
	if err != nil {
		return nil, err
	}
	return New(v)
}
