package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/router"
)

// --chat-template FILE is read bounded and only from a regular file: a
// template of router.MaxTemplateBytes is read whole, one byte more is
// refused naming the flag and the size, and a device (/dev/zero grew
// start-up's memory without end), a FIFO (the open blocked until a writer
// came) or a directory is refused at once, saying what it is.
func TestChatTemplateFileBounded(t *testing.T) {
	dir := t.TempDir()
	tmpl := func(n int) string { return "{{ messages }}" + strings.Repeat("x", n-len("{{ messages }}")) }
	at, over := filepath.Join(dir, "at.jinja"), filepath.Join(dir, "over.jinja")
	if err := os.WriteFile(at, []byte(tmpl(router.MaxTemplateBytes)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(over, []byte(tmpl(router.MaxTemplateBytes+1)), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	o := serveOpts{chatTemplate: at}
	if err := o.readChatTemplate(); err != nil || o.chatSource != tmpl(router.MaxTemplateBytes) || o.chatFrom != at {
		t.Fatalf("a template of %d bytes: %v (read %d bytes from %q)", router.MaxTemplateBytes, err, len(o.chatSource), o.chatFrom)
	}
	for _, c := range []struct{ arg, says string }{
		{over, "is 1048577 bytes, more than the 1048576 (1 MiB)"},
		{"/dev/zero", "is a device"},
		{fifo, "is a named pipe (FIFO)"},
		{dir, "is a directory"},
		{tmpl(router.MaxTemplateBytes + 1), "the inline template is 1048577 bytes"},
	} {
		done := make(chan error, 1)
		go func() {
			o := serveOpts{chatTemplate: c.arg}
			done <- o.readChatTemplate()
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "--chat-template") || !strings.Contains(err.Error(), c.says) ||
				c.arg == over && !strings.Contains(err.Error(), over) {
				t.Errorf("--chat-template %.40s: %v; want an error saying %q", c.arg, err, c.says)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("--chat-template %.40s: no answer after 10s", c.arg)
		}
	}
}
