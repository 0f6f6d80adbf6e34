package router

import (
	"errors"
	"strings"
	"testing"
)

// qwen2Template is tokenizer.chat_template of ../shared/vocab/ggml-vocab-qwen2.gguf.
const qwen2Template = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful assistant<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"

func TestChatTemplateQwen2(t *testing.T) {
	ct, err := NewChatTemplate(qwen2Template, "", "<|endoftext|>")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ct.Render([]ChatMessage{{Role: "user", Content: "Hi there"}})
	if err != nil {
		t.Fatal(err)
	}
	// ChatML as Qwen2 documents it: the default system turn, the user turn,
	// then the open assistant turn.
	want := "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	got, err = ct.Render([]ChatMessage{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "a"}, {Role: "assistant", Content: "b"}, {Role: "user", Content: "c"}})
	if err != nil {
		t.Fatal(err)
	}
	want = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nb<|im_end|>\n<|im_start|>user\nc<|im_end|>\n<|im_start|>assistant\n"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

// Llama-2-chat's template as published on Hugging Face: bos_token,
// raise_exception, slicing, string methods.
const llama2Template = "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"

// Hugging Face renders with trim_blocks and lstrip_blocks: the newline after
// a block tag and the indentation before it vanish, those around {{ }} stay.
func TestChatTemplateTrimBlocks(t *testing.T) {
	ct, err := NewChatTemplate("  {% for message in messages %}\n{{ message['role'] }}: {{ message['content'] }}\n  {% endfor %}\n", "", "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ct.Render([]ChatMessage{{Role: "user", Content: "a"}, {Role: "assistant", Content: "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "user: a\nassistant: b\n"; got != want {
		t.Fatalf("got %q want %q", got, want)
	}
}

func TestChatTemplateLlama2(t *testing.T) {
	ct, err := NewChatTemplate(llama2Template, "<s>", "</s>")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ct.Render([]ChatMessage{{Role: "system", Content: "S"}, {Role: "user", Content: " hi "}, {Role: "assistant", Content: "yo"}, {Role: "user", Content: "more"}})
	if err != nil {
		t.Fatal(err)
	}
	want := "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\n hi [/INST] yo </s><s>[INST] more [/INST]"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	_, err = ct.Render([]ChatMessage{{Role: "user", Content: "a"}, {Role: "user", Content: "b"}})
	if !errors.Is(err, errTemplateRaised) || !strings.Contains(err.Error(), "alternate") {
		t.Fatalf("raise_exception: got %v", err)
	}
}

func TestChatTemplateFallback(t *testing.T) {
	ct, err := NewChatTemplate("", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if !ct.IsFallback() {
		t.Fatal("empty template must select the fallback")
	}
	got, err := ct.Render([]ChatMessage{{Role: "system", Content: "Tell stories."}, {Role: "user", Content: "Once"}, {Role: "assistant", Content: "upon"}, {Role: "user", Content: "a time"}})
	if err != nil {
		t.Fatal(err)
	}
	want := "Tell stories.\n\nUser: Once\nAssistant: upon\nUser: a time\nAssistant:"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

func TestChatTemplateCannotInclude(t *testing.T) {
	ct, err := NewChatTemplate(`{% include '/etc/passwd' %}`, "", "")
	if err == nil {
		_, err = ct.Render([]ChatMessage{{Role: "user", Content: "x"}})
	}
	if err == nil {
		t.Fatal("a template must not read files from disk")
	}
}
