package gguf

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// What a user coming from vLLM or Transformers gives --model first is a
// checkpoint directory or a safetensors file; what a git clone of a Hub
// repository without git-lfs leaves is a pointer file. Open names these
// and says what to run instead, rather than "bad magic".

// convertHint is what to do with a Hugging Face checkpoint.
const convertHint = "sluice runs GGUF files: fetch the model's GGUF build with --model hf://ORG/REPO-GGUF:Q4_K_M, " +
	"or convert this checkpoint with llama.cpp's convert_hf_to_gguf.py"

// dirHint is the message for a --model path that is a directory: the GGUF
// files in it to choose from, or what the directory holds instead.
func dirHint(path string) string {
	msg := path + " is a directory, not a GGUF file"
	ents, err := os.ReadDir(path)
	if err != nil {
		return msg + "; give the path of a .gguf file"
	}
	var ggufs []string
	checkpoint := false
	for _, e := range ents {
		name := strings.ToLower(e.Name())
		switch {
		case strings.HasSuffix(name, ".gguf"):
			ggufs = append(ggufs, filepath.Join(path, e.Name()))
		case strings.HasSuffix(name, ".safetensors"), name == "config.json", strings.HasSuffix(name, ".bin"):
			checkpoint = true
		}
	}
	switch {
	case len(ggufs) > 0:
		shown := ggufs
		if len(shown) > 3 {
			shown = shown[:3]
		}
		more := ""
		if len(ggufs) > len(shown) {
			more = fmt.Sprintf(" (and %d more)", len(ggufs)-len(shown))
		}
		return msg + "; give one of its GGUF files: --model " + strings.Join(shown, ", ") + more
	case checkpoint:
		return msg + "; it holds a Hugging Face checkpoint (safetensors or PyTorch weights), and " + convertHint
	}
	return msg + "; it holds no .gguf file: give the path of a .gguf file"
}

// formatHint says what a file that is not GGUF is, from its first bytes,
// and what to do (empty when it is nothing recognisable).
func formatHint(path string, data []byte) string {
	head := data[:min(len(data), 64)]
	switch {
	case bytes.HasPrefix(head, []byte("version https://git-lfs")):
		return "; it is a Git LFS pointer, not the model: fetch the file itself (git lfs pull, or --model hf://ORG/REPO[:QUANT])"
	case isSafetensors(data) || strings.HasSuffix(strings.ToLower(path), ".safetensors"):
		return "; it is a safetensors file (Hugging Face weights), and " + convertHint
	case bytes.HasPrefix(head, []byte("PK\x03\x04")) || len(head) >= 2 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5:
		return "; it is a PyTorch checkpoint, and " + convertHint
	case bytes.HasPrefix(head, []byte("lmgg")) || bytes.HasPrefix(head, []byte("fmgg")) || bytes.HasPrefix(head, []byte("tjgg")):
		return "; it is a GGML/GGJT file, the format llama.cpp used before GGUF: convert it with llama.cpp's convert_llama_ggml_to_gguf.py, or fetch a GGUF build of the model"
	case bytes.HasPrefix(head, []byte("FUGG")):
		return "; it is a big-endian GGUF file, which sluice does not read: use the little-endian build of the model"
	}
	return "; a GGUF file starts with \"GGUF\": give the path of a .gguf model file"
}

// isSafetensors reports whether data starts as a safetensors file does: a
// little-endian 64-bit header length that fits the file, then a JSON object.
func isSafetensors(data []byte) bool {
	if len(data) < 9 {
		return false
	}
	n := binary.LittleEndian.Uint64(data)
	return n > 0 && n <= uint64(len(data)-8) && data[8] == '{'
}
