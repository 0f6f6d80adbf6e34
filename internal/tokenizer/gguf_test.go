package tokenizer

import (
	"errors"
	"testing"
)

// fakeMeta is an in-memory Metadata.
type fakeMeta map[string]any

func (m fakeMeta) String(k string) (string, bool)      { v, ok := m[k].(string); return v, ok }
func (m fakeMeta) Uint(k string) (uint64, bool)        { v, ok := m[k].(uint64); return v, ok }
func (m fakeMeta) Bool(k string) (bool, bool)          { v, ok := m[k].(bool); return v, ok }
func (m fakeMeta) Strings(k string) ([]string, bool)   { v, ok := m[k].([]string); return v, ok }
func (m fakeMeta) Float32s(k string) ([]float32, bool) { v, ok := m[k].([]float32); return v, ok }
func (m fakeMeta) Int32s(k string) ([]int32, bool)     { v, ok := m[k].([]int32); return v, ok }

// TestReadVocabDefaults: llama.cpp's llama_vocab::load defaults (SPM adds
// BOS and a space prefix; BPE adds BOS only for Llama-3-style
// pre-tokenizers) and the keys that override them.
func TestReadVocabDefaults(t *testing.T) {
	spmTokens := []string{"<unk>", "<s>", "</s>", "a"}
	bpeTokens := byteLevelTokens()
	cases := []struct {
		name                  string
		m                     fakeMeta
		addBOS, addEOS, space bool
		bos, eos              int32
	}{
		{"spm defaults", fakeMeta{"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": spmTokens}, true, false, true, 1, 2},
		{"spm keys", fakeMeta{"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": spmTokens,
			"tokenizer.ggml.add_bos_token": false, "tokenizer.ggml.add_eos_token": true, "tokenizer.ggml.add_space_prefix": false,
			"tokenizer.ggml.bos_token_id": uint64(3), "tokenizer.ggml.eos_token_id": uint64(0)}, false, true, false, 3, 0},
		// An id outside the vocabulary keeps the default (llama.cpp warns).
		{"spm bad id", fakeMeta{"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": spmTokens,
			"tokenizer.ggml.bos_token_id": uint64(99)}, true, false, true, 1, 2},
		{"gpt-2", fakeMeta{"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2", "tokenizer.ggml.tokens": bpeTokens,
			"tokenizer.ggml.merges": []string{}, "tokenizer.ggml.eos_token_id": uint64(10)}, false, false, false, -1, 10},
		{"llama-bpe", fakeMeta{"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "llama-bpe", "tokenizer.ggml.tokens": bpeTokens,
			"tokenizer.ggml.merges": []string{}, "tokenizer.ggml.bos_token_id": uint64(7)}, true, false, false, 7, -1},
		{"llama-bpe key off", fakeMeta{"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "llama-bpe", "tokenizer.ggml.tokens": bpeTokens,
			"tokenizer.ggml.merges": []string{}, "tokenizer.ggml.add_bos_token": false}, false, false, false, -1, -1},
	}
	for _, c := range cases {
		v, err := ReadVocab(c.m)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if v.AddBOS != c.addBOS || v.AddEOS != c.addEOS || v.AddSpacePrefix != c.space || v.BOS != c.bos || v.EOS != c.eos {
			t.Errorf("%s: addBOS %v addEOS %v space %v bos %d eos %d", c.name, v.AddBOS, v.AddEOS, v.AddSpacePrefix, v.BOS, v.EOS)
		}
		if _, err := New(v); err != nil {
			t.Errorf("%s: New: %v", c.name, err)
		}
	}

	bad := []struct {
		name string
		m    fakeMeta
		want error
	}{
		{"no model", fakeMeta{"tokenizer.ggml.tokens": spmTokens}, ErrMissingKey},
		{"unknown model", fakeMeta{"tokenizer.ggml.model": "bert", "tokenizer.ggml.tokens": spmTokens}, ErrUnknownModel},
		{"no tokens", fakeMeta{"tokenizer.ggml.model": "llama"}, ErrMissingKey},
		{"bpe without merges", fakeMeta{"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": bpeTokens}, ErrMissingKey},
	}
	for _, c := range bad {
		if _, err := FromMetadata(c.m); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v want %v", c.name, err, c.want)
		}
	}
	// llama-bpe asks for BOS; a file that names none cannot be used.
	_, err := FromMetadata(fakeMeta{"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "llama-bpe",
		"tokenizer.ggml.tokens": bpeTokens, "tokenizer.ggml.merges": []string{}})
	if !errors.Is(err, ErrBadMetadata) {
		t.Errorf("llama-bpe without a BOS id: %v", err)
	}
}
