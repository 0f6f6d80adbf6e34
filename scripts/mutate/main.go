// Command mutate runs the project's list of targeted mutations
// (mutations.txt beside it; `make mutate`): for each, it patches one
// safeguard out of a copy of the module, runs the tests of the package
// that guards it, and records whether they noticed (the mutant is
// "killed") or passed (it "survived": no test guards that line). Every
// mutation is reverted; the working tree is never touched, since the
// mutants live in a temporary copy.
//
// The list is hand-written and kept with the code: each entry names a
// safeguard of the isolation contract (I1-I15) or of service isolation
// and the exact text it removes. An entry whose text no longer appears
// exactly once is reported as stale and fails the run, so a refactor that
// moves a safeguard must move its mutation too.
//
// Exit status: 0 when every mutant was killed, 1 when one survived or an
// entry is stale or does not build, 2 on a usage or setup error.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// mutation is one entry of the list.
type mutation struct {
	name, why string
	file, pkg string
	run       string // -run regex; "" runs every test of pkg
	old, new  string
	line      int // of its "===" line, for messages
}

func main() {
	list := flag.String("list", "scripts/mutate/mutations.txt", "the mutation list")
	only := flag.String("only", "", "run only the mutations whose name matches this regexp")
	timeout := flag.Duration("timeout", 10*time.Minute, "bound on one mutant's test run (a hang counts as killed: the suite noticed)")
	baseline := flag.Bool("baseline", true, "first run each guarding package unmutated; a package that fails there makes the run stop (its kills would mean nothing)")
	flag.Parse()
	ms, err := parse(*list)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(2)
	}
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			fmt.Fprintln(os.Stderr, "mutate: -only:", err)
			os.Exit(2)
		}
		var keep []mutation
		for _, m := range ms {
			if re.MatchString(m.name) {
				keep = append(keep, m)
			}
		}
		ms = keep
	}
	root, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(2)
	}
	work, err := os.MkdirTemp("", "sluice-mutate-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(2)
	}
	defer os.RemoveAll(work)
	if err := copyTree(root, work); err != nil {
		fmt.Fprintln(os.Stderr, "mutate: copying the module:", err)
		os.Exit(2)
	}
	// Tests that need ../shared find it through SLUICE_SHARED from the copy.
	if os.Getenv("SLUICE_SHARED") == "" {
		if sh, err := filepath.Abs(filepath.Join(root, "..", "shared")); err == nil {
			if _, err := os.Stat(sh); err == nil {
				os.Setenv("SLUICE_SHARED", sh)
			}
		}
	}

	if *baseline {
		seen := map[string]bool{}
		for _, m := range ms {
			key := m.pkg + " " + m.run
			if seen[key] {
				continue
			}
			seen[key] = true
			res, out, d := runTests(work, m, *timeout)
			fmt.Printf("baseline %-28s %-6s %5.0fs\n", m.pkg, res, d.Seconds())
			if res != "pass" {
				fmt.Printf("the unmutated package fails; fix that first:\n%s\n", tail(out, 40))
				os.Exit(1)
			}
		}
	}

	var survived, bad []string
	for _, m := range ms {
		path := filepath.Join(work, m.file)
		orig, err := os.ReadFile(path)
		if err != nil {
			fmt.Printf("%-34s STALE   %s: %v\n", m.name, m.file, err)
			bad = append(bad, m.name)
			continue
		}
		if n := bytes.Count(orig, []byte(m.old)); n != 1 {
			fmt.Printf("%-34s STALE   its text appears %d times in %s (list line %d)\n", m.name, n, m.file, m.line)
			bad = append(bad, m.name)
			continue
		}
		mutant := bytes.Replace(orig, []byte(m.old), []byte(m.new), 1)
		if err := os.WriteFile(path, mutant, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "mutate:", err)
			os.Exit(2)
		}
		res, out, d := runTests(work, m, *timeout)
		if err := os.WriteFile(path, orig, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "mutate: reverting:", err)
			os.Exit(2)
		}
		switch res {
		case "pass":
			fmt.Printf("%-34s SURVIVED %5.0fs  %s (%s)\n", m.name, d.Seconds(), m.why, m.pkg)
			survived = append(survived, m.name)
		case "build":
			fmt.Printf("%-34s NOBUILD %5.0fs  the mutant does not compile:\n%s\n", m.name, d.Seconds(), tail(out, 10))
			bad = append(bad, m.name)
		default:
			fmt.Printf("%-34s killed  %5.0fs  %s\n", m.name, d.Seconds(), firstFailure(out))
		}
	}
	fmt.Printf("\n%d mutants, %d killed, %d survived, %d stale or not building\n", len(ms), len(ms)-len(survived)-len(bad), len(survived), len(bad))
	if len(survived) > 0 {
		fmt.Printf("survivors (no test noticed): %s\n", strings.Join(survived, ", "))
	}
	if len(bad) > 0 {
		fmt.Printf("fix the list: %s\n", strings.Join(bad, ", "))
	}
	if len(survived)+len(bad) > 0 {
		os.Exit(1)
	}
}

// runTests runs m's guarding tests in dir: "pass", "fail" (a test failed
// or timed out) or "build" (the package does not compile).
func runTests(dir string, m mutation, timeout time.Duration) (string, string, time.Duration) {
	args := []string{"test", "-count=1", fmt.Sprintf("-timeout=%s", timeout)}
	if m.run != "" {
		args = append(args, "-run", m.run)
	}
	args = append(args, strings.Fields(m.pkg)...)
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	start := time.Now()
	out, err := cmd.CombinedOutput()
	d := time.Since(start)
	s := string(out)
	switch {
	case err == nil:
		return "pass", s, d
	case strings.Contains(s, "[build failed]") || strings.Contains(s, "[setup failed]"):
		return "build", s, d
	}
	return "fail", s, d
}

// firstFailure is the first "--- FAIL" line of a run (or its last line).
func firstFailure(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if t := strings.TrimSpace(l); strings.HasPrefix(t, "--- FAIL") || strings.HasPrefix(t, "panic:") {
			return t
		}
	}
	return strings.TrimSpace(tail(out, 1))
}

func tail(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

// parse reads the list. An entry:
//
//	=== name: why it matters
//	file internal/kv/cache.go
//	pkg ./internal/kv/
//	run TestA|TestB          (optional: default every test of pkg)
//	---
//	<the exact text to replace, one or more lines>
//	+++
//	<its replacement>
//
// Lines starting with # outside an entry's text are comments.
func parse(path string) ([]mutation, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []mutation
	var cur *mutation
	var mode string // "", "old", "new"
	var old, nw []string
	flush := func() error {
		if cur == nil {
			return nil
		}
		cur.old = strings.Join(trimBlank(old), "\n")
		cur.new = strings.Join(trimBlank(nw), "\n")
		if cur.file == "" || cur.pkg == "" || cur.old == "" || cur.old == cur.new {
			return fmt.Errorf("%s:%d: entry %q needs file, pkg, and a --- text that +++ changes", path, cur.line, cur.name)
		}
		out = append(out, *cur)
		cur, mode, old, nw = nil, "", nil, nil
		return nil
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "=== "):
			if err := flush(); err != nil {
				return nil, err
			}
			name, why, _ := strings.Cut(strings.TrimPrefix(l, "=== "), ":")
			cur = &mutation{name: strings.TrimSpace(name), why: strings.TrimSpace(why), line: n}
		case cur == nil:
			if strings.TrimSpace(l) != "" && !strings.HasPrefix(l, "#") {
				return nil, fmt.Errorf("%s:%d: text outside an entry", path, n)
			}
		case l == "---":
			mode = "old"
		case l == "+++":
			mode = "new"
		case mode == "old":
			old = append(old, l)
		case mode == "new":
			nw = append(nw, l)
		case strings.HasPrefix(l, "file "):
			cur.file = strings.TrimSpace(strings.TrimPrefix(l, "file "))
		case strings.HasPrefix(l, "pkg "):
			cur.pkg = strings.TrimSpace(strings.TrimPrefix(l, "pkg "))
		case strings.HasPrefix(l, "run "):
			cur.run = strings.TrimSpace(strings.TrimPrefix(l, "run "))
		case strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#"):
		default:
			return nil, fmt.Errorf("%s:%d: unknown line %q", path, n, l)
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New(path + ": no mutations")
	}
	return out, sc.Err()
}

func trimBlank(ls []string) []string {
	for len(ls) > 0 && strings.TrimSpace(ls[len(ls)-1]) == "" {
		ls = ls[:len(ls)-1]
	}
	for len(ls) > 0 && strings.TrimSpace(ls[0]) == "" {
		ls = ls[1:]
	}
	return ls
}

// copyTree copies the module (without .git and build output) to dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if rel == ".git" || rel == "bin" {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil // a worktree's .git file
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
}
