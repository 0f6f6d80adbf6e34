package gguf

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpenSaysWhatIsNotGGUF: what a vLLM or Transformers user gives
// --model first (a checkpoint directory, a safetensors file) and what a
// git clone without git-lfs leaves (a pointer file) are named, with what to
// give instead, and every error ends with its stable code.
func TestOpenSaysWhatIsNotGGUF(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	st := binary.LittleEndian.AppendUint64(nil, 19)
	st = append(st, `{"__metadata__":{}}`...)
	ggufData, err := sampleWriter(t).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	write("withgguf/model-Q4_K_M.gguf", ggufData)
	write("checkpoint/config.json", []byte("{}"))
	write("checkpoint/model.safetensors", st)
	if err := os.MkdirAll(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path string
		code ErrorCode
		want []string
	}{
		{filepath.Join(dir, "withgguf"), ErrIsDirectory, []string{"is a directory", "--model " + filepath.Join(dir, "withgguf", "model-Q4_K_M.gguf")}},
		{filepath.Join(dir, "checkpoint"), ErrIsDirectory, []string{"is a directory", "Hugging Face checkpoint", "hf://ORG/REPO-GGUF", "convert_hf_to_gguf.py"}},
		{filepath.Join(dir, "empty"), ErrIsDirectory, []string{"holds no .gguf file"}},
		{write("weights.bin", st), ErrBadMagic, []string{"safetensors file", "hf://ORG/REPO-GGUF", "convert_hf_to_gguf.py"}},
		{write("model.gguf", []byte("version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 1\n")), ErrBadMagic, []string{"Git LFS pointer", "git lfs pull"}},
		{write("pytorch_model.bin", []byte("PK\x03\x04\x14\x00\x00\x00\x00\x00")), ErrBadMagic, []string{"PyTorch checkpoint", "convert_hf_to_gguf.py"}},
		{write("old.bin", []byte("tjgg\x03\x00\x00\x00\x00\x00")), ErrBadMagic, []string{"GGML/GGJT", "convert_llama_ggml_to_gguf.py"}},
		{write("notes.txt", []byte("# some notes, not a model\n")), ErrBadMagic, []string{`starts with "GGUF"`}},
	}
	for _, c := range cases {
		_, err := Open(c.path)
		if code(err) != c.code {
			t.Errorf("%s: code %q, want %q (%v)", c.path, code(err), c.code, err)
			continue
		}
		msg := err.Error()
		for _, w := range c.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: %q does not say %q", c.path, msg, w)
			}
		}
		if !strings.HasSuffix(msg, "["+string(c.code)+"]") {
			t.Errorf("%s: %q does not end with its code", c.path, msg)
		}
	}
}
