package node

import (
	"slices"
	"testing"

	"sluice/internal/router"
	"sluice/internal/testenv"
	"sluice/internal/tokenizer"
)

// A real model chat template (Qwen2's ChatML, from the qwen2 vocab file)
// rendered by the router and tokenized with special tokens parsed: the turn
// markers become their single special ids, as in llama.cpp and HF.
func TestQwen2ChatTemplateTokenizes(t *testing.T) {
	tok, err := tokenizer.Load(testenv.Shared(t, "vocab/ggml-vocab-qwen2.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	if tok.ChatTemplate() == "" {
		t.Fatal("the qwen2 vocab carries a chat template")
	}
	ct, err := router.NewChatTemplate(tok.ChatTemplate(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	text, err := ct.Render([]router.ChatMessage{{Role: "user", Content: "Hello"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"; text != want {
		t.Fatalf("rendered %q", text)
	}
	ids, _ := tokAdapter{tok}.Encode(text, true, true)
	start, ok1 := tok.ID("<|im_start|>")
	end, ok2 := tok.ID("<|im_end|>")
	if !ok1 || !ok2 {
		t.Fatal("qwen2 vocab lacks its ChatML tokens")
	}
	var starts, ends int
	for _, id := range ids {
		switch id {
		case start:
			starts++
		case end:
			ends++
		}
	}
	if starts != 3 || ends != 2 || !slices.Contains(ids, start) || ids[0] != start {
		t.Fatalf("ids %v: %d <|im_start|>, %d <|im_end|>", ids, starts, ends)
	}
}
