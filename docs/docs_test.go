package docs

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// maxReadmeLines bounds the top-level README: it is the newcomer's page,
// and everything else belongs in a topic file under docs/.
const maxReadmeLines = 400

// repoRoot is the repository's root: this package is docs/.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root not found from docs/: %v", err)
	}
	return root
}

// markdownFiles lists every .md file of the repository (paths relative to
// root), skipping VCS and build output directories.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "bench-out", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("no Markdown files found")
	}
	return out
}

// doc is one Markdown file reduced to what the checks need.
type doc struct {
	links   []link          // inline and reference-definition links outside code
	anchors map[string]bool // anchors its headings (and HTML ids) produce
	text    []string        // lines outside fenced code blocks
	// glued lists the lines that directly follow a table row without a
	// blank line: GitHub renders such a line as one more table row.
	glued []int
}

type link struct {
	line   int
	target string
}

var (
	fenceRe    = regexp.MustCompile("^\\s{0,3}(```+|~~~+)")
	atxRe      = regexp.MustCompile(`^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	setextRe   = regexp.MustCompile(`^\s{0,3}(=+|-+)\s*$`)
	codeSpanRe = regexp.MustCompile("`+[^`]*`+")
	// [text](target) and ![alt](target); the target may be <...> and may
	// carry a "title".
	inlineLinkRe = regexp.MustCompile(`\]\(\s*(<[^>]*>|[^()\s]*(?:\([^()\s]*\)[^()\s]*)*)(?:\s+"[^"]*")?\s*\)`)
	refDefRe     = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*(\S+)`)
	htmlIDRe     = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	headingLink  = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTagRe    = regexp.MustCompile(`<[^>]+>`)
	schemeRe     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

func parse(t *testing.T, path string) doc {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := doc{anchors: map[string]bool{}}
	seen := map[string]int{}
	addHeading := func(h string) {
		a := slug(h)
		if n, ok := seen[a]; ok {
			seen[a] = n + 1
			a = fmt.Sprintf("%s-%d", a, n+1)
		} else {
			seen[a] = 0
		}
		d.anchors[a] = true
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	fence := ""
	prev := "" // the previous line outside code, for setext headings
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if m := fenceRe.FindStringSubmatch(line); m != nil {
			marker := m[1][:3]
			switch {
			case fence == "":
				fence = marker
			case strings.HasPrefix(marker, fence[:1]):
				fence = ""
			}
			prev = ""
			continue
		}
		if fence != "" {
			continue
		}
		d.text = append(d.text, line)
		if strings.HasPrefix(strings.TrimSpace(prev), "|") && strings.TrimSpace(line) != "" && !strings.HasPrefix(strings.TrimSpace(line), "|") {
			d.glued = append(d.glued, n)
		}
		if m := atxRe.FindStringSubmatch(line); m != nil {
			addHeading(m[2])
		} else if setextRe.MatchString(line) && strings.TrimSpace(prev) != "" && !strings.HasPrefix(strings.TrimSpace(prev), "|") {
			addHeading(strings.TrimSpace(prev))
		}
		for _, m := range htmlIDRe.FindAllStringSubmatch(line, -1) {
			d.anchors[m[1]] = true
		}
		plain := codeSpanRe.ReplaceAllString(line, "")
		for _, m := range inlineLinkRe.FindAllStringSubmatch(plain, -1) {
			d.links = append(d.links, link{n, strings.Trim(m[1], "<>")})
		}
		if m := refDefRe.FindStringSubmatch(plain); m != nil {
			d.links = append(d.links, link{n, strings.Trim(m[1], "<>")})
		}
		prev = line
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return d
}

// slug is GitHub's heading anchor: the rendered text (inline code keeps its
// content, links their text, HTML tags go), lower-cased; letters, digits,
// '-' and '_' stay, spaces become '-', everything else is dropped. Repeated
// headings get -1, -2, ... (see parse).
func slug(h string) string {
	h = headingLink.ReplaceAllString(h, "$1")
	h = htmlTagRe.ReplaceAllString(h, "")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"I1 Rejection is terminal":                    "i1-rejection-is-terminal",
		"The incident, replayed":                      "the-incident-replayed",
		"sluice inspect, tokenize, generate":          "sluice-inspect-tokenize-generate",
		"`sluice audit`":                              "sluice-audit",
		"The llama.cpp references":                    "the-llamacpp-references",
		"Queueing, fairness and preemption":           "queueing-fairness-and-preemption",
		"A [linked](x.md) heading — with a dash":      "a-linked-heading--with-a-dash",
		"snake_case and 2 numbers":                    "snake_case-and-2-numbers",
		"I14 Derived state is re-derived":             "i14-derived-state-is-re-derived",
		"Isolation guarantees and how each is tested": "isolation-guarantees-and-how-each-is-tested",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestLinksResolve: every relative link of every Markdown file names a file
// or directory inside the repository, and an anchor names a heading of the
// target Markdown file. External links (a URL scheme) are not fetched.
func TestLinksResolve(t *testing.T) {
	root := repoRoot(t)
	files := markdownFiles(t, root)
	docs := map[string]doc{}
	get := func(rel string) doc {
		if d, ok := docs[rel]; ok {
			return d
		}
		d := parse(t, filepath.Join(root, rel))
		docs[rel] = d
		return d
	}
	checked := 0
	for _, rel := range files {
		for _, l := range get(rel).links {
			target := l.target
			if target == "" || schemeRe.MatchString(target) {
				continue
			}
			where := fmt.Sprintf("%s:%d: link %q", rel, l.line, target)
			pathPart, anchor, _ := strings.Cut(target, "#")
			pathPart, _, _ = strings.Cut(pathPart, "?")
			dest := rel
			if pathPart != "" {
				if strings.HasPrefix(pathPart, "/") {
					t.Errorf("%s: absolute path; use a path relative to the file", where)
					continue
				}
				dest = filepath.Clean(filepath.Join(filepath.Dir(rel), filepath.FromSlash(pathPart)))
				if dest == ".." || strings.HasPrefix(dest, ".."+string(filepath.Separator)) {
					t.Errorf("%s: points outside the repository (a fresh clone does not have it)", where)
					continue
				}
				fi, err := os.Stat(filepath.Join(root, dest))
				if err != nil {
					t.Errorf("%s: %s does not exist", where, filepath.ToSlash(dest))
					continue
				}
				if fi.IsDir() {
					if anchor != "" {
						t.Errorf("%s: an anchor on a directory", where)
					}
					checked++
					continue
				}
			}
			if anchor != "" {
				if !strings.HasSuffix(dest, ".md") {
					t.Errorf("%s: an anchor into a file that is not Markdown", where)
					continue
				}
				if !get(dest).anchors[anchor] {
					t.Errorf("%s: no heading of %s gives the anchor #%s", where, filepath.ToSlash(dest), anchor)
					continue
				}
			}
			checked++
		}
	}
	if checked < 50 {
		t.Errorf("only %d links checked: is the link parser broken?", checked)
	}
}

// TestTablesEndWithABlankLine: a paragraph glued under a table is
// rendered by GitHub as a table row, which hides it in a table cell.
func TestTablesEndWithABlankLine(t *testing.T) {
	root := repoRoot(t)
	for _, rel := range markdownFiles(t, root) {
		for _, n := range parse(t, filepath.Join(root, rel)).glued {
			t.Errorf("%s:%d: text directly under a table; leave a blank line after the table", rel, n)
		}
	}
}

// conflictMarker matches the lines git leaves in a file whose merge
// conflict was not resolved.
var conflictMarker = regexp.MustCompile(`^(<{7} |={7}$|>{7} )`)

// TestNoConflictMarkers: several people edit these files at once; a
// rebase that left git's markers in a document must not land.
func TestNoConflictMarkers(t *testing.T) {
	root := repoRoot(t)
	for _, rel := range markdownFiles(t, root) {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if conflictMarker.MatchString(line) {
				t.Errorf("%s:%d: an unresolved merge conflict marker", rel, i+1)
			}
		}
	}
}

// TestReadmeIsShort: the top-level README is the newcomer's page.
func TestReadmeIsShort(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	n := strings.Count(string(b), "\n")
	if len(b) > 0 && b[len(b)-1] != '\n' {
		n++
	}
	if n > maxReadmeLines {
		t.Errorf("README.md has %d lines, more than %d: move the detail into a topic file under docs/", n, maxReadmeLines)
	}
}

// TestReadmeHasTheTwoCommands: the README's promise is two commands, the
// server and the suite, and CI runs exactly the second. Keep the README,
// the Makefile and .ci/run saying the same thing.
func TestReadmeHasTheTwoCommands(t *testing.T) {
	root := repoRoot(t)
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	readme := read("README.md")
	for _, cmd := range []string{"make serve", "go run ./cmd/sluice serve", "make test", ".ci/run"} {
		if !strings.Contains(readme, cmd) {
			t.Errorf("README.md no longer says %q", cmd)
		}
	}
	mk := read("Makefile")
	for _, target := range []string{"\nserve:", "\ntest:"} {
		if !strings.Contains(mk, target) {
			t.Errorf("the Makefile has no %q target", strings.TrimSpace(target))
		}
	}
	if !regexp.MustCompile(`(?m)^\s*(exec\s+)?make test\s*$`).MatchString(read(".ci/run")) {
		t.Errorf(".ci/run does not run `make test`")
	}
}

// outsideDoc matches a document the reader would have to find outside the
// repository: a Markdown file under ../shared (or the machine's /work/shared).
// Mentions of tools and models there (llama.cpp builds, benchmark models)
// are fine: they say where optional inputs come from.
var outsideDoc = regexp.MustCompile(`(?:\.\./|/work/)shared/\S*\.md\b`)

// TestNoRequiredReadingOutside: no document sends the reader to a document
// outside the repository (the design once lived in ../shared/DESIGN.md,
// which a clone does not have).
func TestNoRequiredReadingOutside(t *testing.T) {
	root := repoRoot(t)
	for _, rel := range markdownFiles(t, root) {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range outsideDoc.FindAllString(line, -1) {
				t.Errorf("%s:%d: refers to %s, which is outside the repository; bring what the reader needs into docs/", rel, i+1, m)
			}
		}
	}
}
