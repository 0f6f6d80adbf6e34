package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sluice/internal/gguf"
	"sluice/internal/router/node"
)

// --shared-prefix-file: token ids or text; the WARN line names the shared
// length and a hash; ids outside the vocabulary, a prefix shorter than a
// page and a missing file refuse to start.
func TestLoadSharedPrefix(t *testing.T) {
	m, err := node.LoadModel("", gguf.MemoryAuto)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ids := "[" + strings.TrimSuffix(strings.Repeat("5,", 40), ",") + "]"
	got, err := loadSharedPrefix(write("ids.json", ids), m, 16, 0, log)
	if err != nil || len(got) != 40 || got[0] != 5 {
		t.Fatalf("ids: %v %v", got, err)
	}
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "shared_tokens=32") || !strings.Contains(l, "sha256_ids=") {
		t.Fatalf("no WARN naming the shared prefix: %s", l)
	}
	text := strings.Repeat("You are a helpful assistant who answers briefly. ", 8)
	want, _ := m.Tokenizer().Encode(text, true, true)
	if got, err := loadSharedPrefix(write("sys.txt", text), m, 16, 0, log); err != nil || len(got) != len(want) || got[0] != want[0] {
		t.Fatalf("text: %d ids, %v; want %d", len(got), err, len(want))
	}
	for name, content := range map[string]string{"vocab.json": "[1, 99999999]", "short.json": "[1,2,3]", "bad.json": "[1, x]"} {
		if _, err := loadSharedPrefix(write(name, content), m, 16, 0, log); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := loadSharedPrefix(write("long.json", ids), m, 16, 20, log); err == nil {
		t.Error("a prefix longer than the context was accepted")
	}
	if _, err := loadSharedPrefix(filepath.Join(dir, "missing"), m, 16, 0, log); err == nil {
		t.Error("a missing file was accepted")
	}
	if got, err := loadSharedPrefix("", m, 16, 0, log); got != nil || err != nil {
		t.Error("no flag must share nothing")
	}
}
