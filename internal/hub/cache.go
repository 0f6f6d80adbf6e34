package hub

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Env is what the environment says about the Hub, read as huggingface_hub
// reads it.
type Env struct {
	// Endpoint: HF_ENDPOINT, default https://huggingface.co.
	Endpoint string
	// Cache: HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE (its older name),
	// else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
	// ~/.cache/huggingface/hub.
	Cache string
	// Token: HF_TOKEN, else the file HF_TOKEN_PATH, else $HF_HOME/token
	// (where `huggingface-cli login` / `hf auth login` saves it).
	Token string
	// Offline: HF_HUB_OFFLINE is 1/true/yes/on.
	Offline bool
}

// FromEnv reads Env from the process environment.
func FromEnv() Env { return envFrom(os.Getenv) }

func envFrom(get func(string) string) Env {
	e := Env{Endpoint: strings.TrimRight(get("HF_ENDPOINT"), "/")}
	if e.Endpoint == "" {
		e.Endpoint = "https://huggingface.co"
	}
	home := get("HF_HOME")
	if home == "" {
		base := get("XDG_CACHE_HOME")
		if base == "" {
			if h, err := os.UserHomeDir(); err == nil {
				base = filepath.Join(h, ".cache")
			}
		}
		home = filepath.Join(base, "huggingface")
	}
	switch {
	case get("HF_HUB_CACHE") != "":
		e.Cache = get("HF_HUB_CACHE")
	case get("HUGGINGFACE_HUB_CACHE") != "":
		e.Cache = get("HUGGINGFACE_HUB_CACHE")
	default:
		e.Cache = filepath.Join(home, "hub")
	}
	e.Token = strings.TrimSpace(get("HF_TOKEN"))
	if e.Token == "" {
		p := get("HF_TOKEN_PATH")
		if p == "" {
			p = filepath.Join(home, "token")
		}
		if b, err := os.ReadFile(p); err == nil {
			e.Token = strings.TrimSpace(string(b))
		}
	}
	switch strings.ToUpper(get("HF_HUB_OFFLINE")) {
	case "1", "TRUE", "YES", "ON":
		e.Offline = true
	}
	return e
}

// repoDir is models--ORG--REPO under the cache (huggingface_hub's
// repo_folder_name; Parse refused "--" inside names, so it is unambiguous).
func repoDir(cache, repo string) string {
	return filepath.Join(cache, "models--"+strings.ReplaceAll(repo, "/", "--"))
}

var commitRe = regexp.MustCompile(`^[0-9a-f]{40}$`)
var sha256Re = regexp.MustCompile(`^[0-9a-f]{64}$`)

// cachedCommit is the commit a revision points to in the cache: itself
// when it is a commit hash, else refs/{rev}.
func cachedCommit(dir, rev string) (string, bool) {
	if commitRe.MatchString(rev) {
		return rev, true
	}
	b, err := os.ReadFile(filepath.Join(dir, "refs", filepath.FromSlash(rev)))
	if err != nil {
		return "", false
	}
	c := strings.TrimSpace(string(b))
	return c, commitRe.MatchString(c)
}

// snapshotFiles lists the files of one cached snapshot, repository-
// relative with '/' separators.
func snapshotFiles(snap string) []string {
	var out []string
	filepath.WalkDir(snap, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if rel, err := filepath.Rel(snap, p); err == nil {
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	return out
}

// link points snapshots/{commit}/{file} at blobs/{etag} with a relative
// symlink, as huggingface_hub does, replacing a link that points
// elsewhere.
func link(dir, commit, file, etag string) (string, error) {
	dst := filepath.Join(dir, "snapshots", commit, filepath.FromSlash(file))
	blob := filepath.Join(dir, "blobs", etag)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", err
	}
	rel, err := filepath.Rel(filepath.Dir(dst), blob)
	if err != nil {
		return "", err
	}
	if cur, err := os.Readlink(dst); err == nil && cur == rel {
		return dst, nil
	}
	tmp := dst + ".tmp-link"
	os.Remove(tmp)
	if err := os.Symlink(rel, tmp); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return "", err
	}
	return dst, nil
}

// writeRef records refs/{rev} = commit (not for a commit asked by hash).
func writeRef(dir, rev, commit string) error {
	if rev == commit {
		return nil
	}
	p := filepath.Join(dir, "refs", filepath.FromSlash(rev))
	if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) == commit {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(commit), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
