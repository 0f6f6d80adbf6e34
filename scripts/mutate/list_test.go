package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestListApplies: every entry of the mutation list still applies to the
// tree it sits in (its file exists, its --- text appears exactly once, its
// package is a directory), and names are unique. `make mutate` fails a
// stale entry too, but it runs for tens of minutes outside the suite, so
// a refactor that moved a guarded line would otherwise leave its
// safeguard unwatched until someone ran it (four entries had gone stale
// that way by session 17).
func TestListApplies(t *testing.T) {
	root := filepath.Join("..", "..")
	ms, err := parse("mutations.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) < 100 {
		t.Fatalf("parsed %d entries from mutations.txt; the list holds hundreds", len(ms))
	}
	seen := map[string]int{}
	for _, m := range ms {
		if prev, ok := seen[m.name]; ok {
			t.Errorf("entry %q (list line %d) has the name of the entry at line %d", m.name, m.line, prev)
		}
		seen[m.name] = m.line
		src, err := os.ReadFile(filepath.Join(root, m.file))
		if err != nil {
			t.Errorf("entry %q (list line %d): %v", m.name, m.line, err)
			continue
		}
		if n := bytes.Count(src, []byte(m.old)); n != 1 {
			t.Errorf("entry %q (list line %d) is stale: its --- text appears %d times in %s", m.name, m.line, n, m.file)
		}
		for _, pkg := range strings.Fields(m.pkg) {
			if st, err := os.Stat(filepath.Join(root, strings.TrimSuffix(pkg, "..."))); err != nil || !st.IsDir() {
				t.Errorf("entry %q (list line %d): pkg %s is not a directory of the module", m.name, m.line, pkg)
			}
		}
	}
}
