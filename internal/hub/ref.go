// Package hub fetches GGUF models from a Hugging Face Hub (huggingface.co,
// a mirror named by HF_ENDPOINT, or a test's fake) into the cache layout
// huggingface_hub uses, so a file the user already downloaded with
// huggingface-cli, transformers or vLLM is reused, and one sluice
// downloaded is theirs too.
//
// What it does for `--model hf://ORG/REPO[:QUANT | /FILE.gguf]`:
//
//  1. list the repository's files (GET /api/models/{repo}/tree/{rev}) and
//     pick the GGUF file (Pick: the QUANT asked for, else a preference list);
//  2. ask the file's metadata (HEAD /{repo}/resolve/{rev}/{file}, redirects
//     not followed): the commit (X-Repo-Commit) and the LFS object's
//     SHA-256 (X-Linked-Etag, else ETag; the tree's lfs.oid must agree);
//  3. reuse blobs/{sha256} when present, else download it into
//     blobs/{sha256}.incomplete (resumed with a Range request when a
//     previous attempt left one), hashing as it goes; a file whose SHA-256
//     or size is not what the Hub published is deleted and never used;
//  4. link snapshots/{commit}/{file} -> ../../blobs/{sha256} and record
//     refs/{rev} = commit.
//
// HF_HUB_OFFLINE=1 skips steps 1-3 and reads refs/ and snapshots/ only.
// Only the standard library speaks HTTP.
package hub

import (
	"fmt"
	"regexp"
	"strings"
)

// Scheme prefixes a model spec that names a Hub repository.
const Scheme = "hf://"

// DefaultRevision is the branch used when a spec names none.
const DefaultRevision = "main"

// Ref names one GGUF file of a Hub repository, or a quantization to pick
// from it. At most one of Quant and File is set; neither means "pick by
// the default preference" (DefaultQuants).
type Ref struct {
	Repo     string // ORG/REPO
	Revision string // branch, tag or commit; DefaultRevision if not given
	Quant    string // e.g. Q4_K_M, matched case-insensitively in file names
	File     string // path of the file in the repository
}

func (r Ref) String() string {
	s := Scheme + r.Repo
	if r.Revision != DefaultRevision {
		s += "@" + r.Revision
	}
	switch {
	case r.File != "":
		s += "/" + r.File
	case r.Quant != "":
		s += ":" + r.Quant
	}
	return s
}

// IsSpec reports whether a --model value names a Hub model.
func IsSpec(s string) bool { return strings.HasPrefix(s, Scheme) }

var (
	// A Hub name part: letters, digits, '-', '_', '.'; not starting with
	// a '.' or '-', no "--" or ".." (the Hub refuses both; "--" would
	// also make the cache folder name ambiguous).
	namePart = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,95}$`)
	quantRe  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$`)
	revRe    = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._/-]{0,127}$`)
)

// Parse reads "hf://ORG/REPO[@REV][:QUANT | /FILE.gguf]" or, without the
// scheme, llama-server's -hf form "ORG/REPO[:QUANT]" (and the same
// optional @REV and /FILE.gguf).
func Parse(spec string) (Ref, error) {
	s := strings.TrimPrefix(spec, Scheme)
	bad := func(why string) (Ref, error) {
		return Ref{}, fmt.Errorf("%q is not a Hugging Face model: %s (use hf://ORG/REPO, hf://ORG/REPO:QUANT or hf://ORG/REPO/FILE.gguf, e.g. hf://Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M)", spec, why)
	}
	r := Ref{Revision: DefaultRevision}
	parts := strings.SplitN(s, "/", 3)
	if len(parts) < 2 {
		return bad("no ORG/REPO")
	}
	org, repo := parts[0], parts[1]
	rest := ""
	if len(parts) == 3 {
		rest = parts[2]
	}
	if i := strings.IndexByte(repo, ':'); i >= 0 {
		if rest != "" {
			return bad("a :QUANT and a /FILE together")
		}
		repo, r.Quant = repo[:i], repo[i+1:]
		if !quantRe.MatchString(r.Quant) {
			return bad(fmt.Sprintf("quantization %q", r.Quant))
		}
	}
	if i := strings.IndexByte(repo, '@'); i >= 0 {
		repo, r.Revision = repo[:i], repo[i+1:]
		if !revRe.MatchString(r.Revision) || strings.Contains(r.Revision, "..") {
			return bad(fmt.Sprintf("revision %q", r.Revision))
		}
	}
	for _, p := range []string{org, repo} {
		if !namePart.MatchString(p) || strings.Contains(p, "--") || strings.Contains(p, "..") {
			return bad(fmt.Sprintf("name %q", p))
		}
	}
	r.Repo = org + "/" + repo
	if rest != "" {
		if err := checkFile(rest); err != nil {
			return bad(err.Error())
		}
		r.File = rest
	}
	return r, nil
}

// checkFile accepts a repository-relative GGUF path that cannot climb out
// of a snapshot folder.
func checkFile(p string) error {
	if !strings.HasSuffix(strings.ToLower(p), ".gguf") {
		return fmt.Errorf("file %q is not a .gguf file", p)
	}
	if strings.HasPrefix(p, "/") || strings.ContainsAny(p, "\\\x00") {
		return fmt.Errorf("file path %q", p)
	}
	for _, c := range strings.Split(p, "/") {
		if c == "" || c == "." || c == ".." {
			return fmt.Errorf("file path %q", p)
		}
	}
	return nil
}
