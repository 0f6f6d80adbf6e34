package router

import (
	"errors"
	"testing"
	"time"
)

// Published templates of widely used models, with their documented
// renderings: Jinja operator precedence (filters bind tighter than +),
// loop variables, set, bos_token, raise_exception.
func TestChatTemplatesOfKnownModels(t *testing.T) {
	cases := []struct {
		name, tmpl, bos string
		msgs            []ChatMessage
		want            string
	}{
		{
			name: "llama-3-instruct",
			tmpl: "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}",
			bos:  "<|begin_of_text|>",
			msgs: []ChatMessage{{Role: "system", Content: "Be brief. "}, {Role: "user", Content: " Hi"}},
			want: "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
		},
		{
			name: "gemma",
			tmpl: "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}",
			bos:  "<bos>",
			msgs: []ChatMessage{{Role: "user", Content: "Hi "}, {Role: "assistant", Content: "Yo"}, {Role: "user", Content: "Bye"}},
			want: "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nYo<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n",
		},
		{
			name: "zephyr",
			tmpl: "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}",
			msgs: []ChatMessage{{Role: "system", Content: "S"}, {Role: "user", Content: "U"}},
			// trim_blocks drops the newline after each block tag; the
			// newline after each {{ }} line stays.
			want: "<|system|>\nS</s>\n<|user|>\nU</s>\n<|assistant|>\n",
		},
	}
	for _, c := range cases {
		eos := "</s>"
		ct, err := NewChatTemplate(c.tmpl, c.bos, eos)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got, err := ct.Render(c.msgs)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got != c.want {
			t.Errorf("%s:\n got  %q\n want %q", c.name, got, c.want)
		}
	}
	ct, _ := NewChatTemplate(cases[1].tmpl, "<bos>", "")
	if _, err := ct.Render([]ChatMessage{{Role: "system", Content: "x"}, {Role: "user", Content: "y"}}); !errors.Is(err, errTemplateRaised) {
		t.Fatalf("gemma's system-role exception: %v", err)
	}
}

func TestStrftime(t *testing.T) {
	tm := time.Date(2024, time.July, 5, 9, 3, 7, 0, time.UTC)
	// Python: datetime(2024,7,5,9,3,7).strftime(...)
	for f, want := range map[string]string{
		"%d %b %Y":           "05 Jul 2024",
		"%A, %B %d %H:%M:%S": "Friday, July 05 09:03:07",
		"%y-%m-%j 100%%":     "24-07-187 100%",
		"%Q":                 "%Q",
	} {
		if got := strftime(tm, f); got != want {
			t.Errorf("strftime(%q) = %q, want %q", f, got, want)
		}
	}
	ct, err := NewChatTemplate(`{{ strftime_now("%Y") }}`, "", "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ct.Render(nil)
	if err != nil || got != strftime(time.Now(), "%Y") {
		t.Fatalf("strftime_now: %q %v", got, err)
	}
}
