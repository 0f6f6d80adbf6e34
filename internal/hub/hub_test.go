package hub

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sluice/internal/hub/hubtest"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Ref
	}{
		{"hf://Qwen/Qwen2.5-0.5B-Instruct-GGUF", Ref{Repo: "Qwen/Qwen2.5-0.5B-Instruct-GGUF", Revision: "main"}},
		{"hf://bartowski/Llama-3.2-1B-Instruct-GGUF:q4_k_m", Ref{Repo: "bartowski/Llama-3.2-1B-Instruct-GGUF", Revision: "main", Quant: "q4_k_m"}},
		{"unsloth/Qwen3-0.6B-GGUF:Q8_0", Ref{Repo: "unsloth/Qwen3-0.6B-GGUF", Revision: "main", Quant: "Q8_0"}},
		{"hf://org/repo/sub/dir/model.Q4_0.gguf", Ref{Repo: "org/repo", Revision: "main", File: "sub/dir/model.Q4_0.gguf"}},
		{"hf://org/repo@v1.0:Q8_0", Ref{Repo: "org/repo", Revision: "v1.0", Quant: "Q8_0"}},
	} {
		got, err := Parse(c.in)
		if err != nil || got != c.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"hf://", "hf://onlyorg", "hf://org/repo/../../etc/passwd.gguf", "hf://org/repo/model.bin",
		"hf://../x/y", "hf://org/re--po", "hf://org/repo:Q4/x.gguf", "hf://org/repo:", "hf://org/repo/a//b.gguf", "hf://org/repo@../x"} {
		if r, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) = %+v, want an error", bad, r)
		} else if !strings.Contains(err.Error(), "hf://ORG/REPO") {
			t.Errorf("Parse(%q): %v does not say what the form is", bad, err)
		}
	}
}

func TestPick(t *testing.T) {
	repo := []string{"README.md", "model-IQ4_XS.gguf", "model-Q4_K.gguf", "model-Q4_K_M.gguf", "model-Q8_0.gguf", "mmproj-model-f16.gguf", "model-f16.gguf",
		"Q6_K/model-Q6_K-00001-of-00002.gguf", "Q6_K/model-Q6_K-00002-of-00002.gguf"}
	for _, c := range []struct{ quant, want, err string }{
		{"", "model-Q4_K_M.gguf", ""},
		{"q8_0", "model-Q8_0.gguf", ""},
		{"Q4_K", "model-Q4_K.gguf", ""},                 // not Q4_K_M's file
		{"Q4_XS", "", "no .gguf file for quantization"}, // not IQ4_XS
		{"F16", "model-f16.gguf", ""},                   // never the projector
		{"Q6_K", "", "part 00001 of 00002"},
		{"Q2_K", "", "no .gguf file for quantization"},
	} {
		got, err := Pick(repo, c.quant)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("Pick(%q) = %q, %v; want error %q", c.quant, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("Pick(%q) = %q, %v; want %q", c.quant, got, err, c.want)
		}
	}
	if got, err := Pick([]string{"x/only.gguf", "mmproj.gguf"}, ""); err != nil || got != "x/only.gguf" {
		t.Errorf("single file: %q %v", got, err)
	}
	if _, err := Pick([]string{"a-IQ2_M.gguf", "a-IQ3_M.gguf"}, ""); err == nil || !strings.Contains(err.Error(), "name one with :QUANT") {
		t.Errorf("ambiguous: %v", err)
	}
	if _, err := Pick([]string{"model.safetensors"}, ""); codeOf(err) != ErrNoGGUF {
		t.Errorf("no gguf: %v", err)
	}
}

func TestEnv(t *testing.T) {
	home := t.TempDir()
	os.WriteFile(filepath.Join(home, "token"), []byte("hf_saved\n"), 0o600)
	e := envFrom(func(k string) string {
		return map[string]string{"HF_HOME": home, "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://mirror/"}[k]
	})
	if e.Cache != filepath.Join(home, "hub") || e.Token != "hf_saved" || !e.Offline || e.Endpoint != "http://mirror" {
		t.Errorf("HF_HOME: %+v", e)
	}
	e = envFrom(func(k string) string {
		return map[string]string{"HF_HOME": home, "HF_HUB_CACHE": "/c", "HF_TOKEN": "hf_env", "XDG_CACHE_HOME": "/x"}[k]
	})
	if e.Cache != "/c" || e.Token != "hf_env" || e.Offline || e.Endpoint != "https://huggingface.co" {
		t.Errorf("HF_HUB_CACHE/HF_TOKEN: %+v", e)
	}
	e = envFrom(func(k string) string { return map[string]string{"XDG_CACHE_HOME": "/x"}[k] })
	if e.Cache != "/x/huggingface/hub" {
		t.Errorf("XDG_CACHE_HOME: %+v", e)
	}
}

func codeOf(err error) ErrorCode {
	var he *Error
	if errors.As(err, &he) {
		return he.Code
	}
	return ""
}

const commit = "0123456789abcdef0123456789abcdef01234567"

// fixture is a fake hub with one public and one private repository of
// synthetic "GGUF" bytes (the hub package never parses them).
func fixture(t *testing.T) (*hubtest.Hub, *Client, map[string][]byte) {
	t.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	mk := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	files := map[string][]byte{"model-Q4_K_M.gguf": mk(300_000), "model-Q8_0.gguf": mk(200_000), "sub/model-F16.gguf": mk(100_000)}
	h := hubtest.New(map[string]*hubtest.Repo{
		"org/repo":    {Commit: commit, Files: files},
		"org/private": {Commit: commit, Files: files, Token: "hf_good"},
	})
	t.Cleanup(h.Close)
	c := &Client{Env: Env{Endpoint: h.URL, Cache: t.TempDir()}}
	return h, c, files
}

func mustParse(t *testing.T, s string) Ref {
	t.Helper()
	r, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// checkLayout asserts huggingface_hub's layout for one file.
func checkLayout(t *testing.T, c *Client, res Result, file string, want []byte) {
	t.Helper()
	dir := filepath.Join(c.Cache, "models--org--"+strings.Split(res.Ref.Repo, "/")[1])
	sum := hubtest.SHA256(want)
	blob := filepath.Join(dir, "blobs", sum)
	if b, err := os.ReadFile(blob); err != nil || !bytes.Equal(b, want) {
		t.Fatalf("blob %s: %v (or other bytes)", blob, err)
	}
	snap := filepath.Join(dir, "snapshots", commit, filepath.FromSlash(file))
	if res.Path != snap {
		t.Errorf("path %s, want %s", res.Path, snap)
	}
	target, err := os.Readlink(snap)
	if err != nil || filepath.IsAbs(target) || filepath.Join(filepath.Dir(snap), target) != blob {
		t.Errorf("snapshot link %s -> %q (%v), want a relative link to %s", snap, target, err, blob)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "refs", "main")); err != nil || string(b) != commit {
		t.Errorf("refs/main = %q, %v", b, err)
	}
	if res.SHA256 != sum || res.Commit != commit || res.File != file {
		t.Errorf("result %+v", res)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "blobs", "*.incomplete")); len(m) != 0 {
		t.Errorf("left behind: %v", m)
	}
}

func TestDownloadAndReuse(t *testing.T) {
	h, c, files := fixture(t)
	var progress bytes.Buffer
	c.Progress = &progress
	res, err := c.Fetch(context.Background(), mustParse(t, "hf://org/repo"))
	if err != nil {
		t.Fatal(err)
	}
	checkLayout(t, c, res, "model-Q4_K_M.gguf", files["model-Q4_K_M.gguf"])
	if !res.Downloaded || h.Downloads.Load() != 1 {
		t.Errorf("downloaded %v, %d GETs", res.Downloaded, h.Downloads.Load())
	}
	if !strings.Contains(progress.String(), "100.0%") {
		t.Errorf("no progress to 100%%: %q", progress.String())
	}
	// A file in a folder, picked by a lower-case quantization.
	res, err = c.Fetch(context.Background(), mustParse(t, "hf://org/repo:f16"))
	if err != nil {
		t.Fatal(err)
	}
	checkLayout(t, c, res, "sub/model-F16.gguf", files["sub/model-F16.gguf"])
	// Reuse: no second download of either.
	for _, s := range []string{"hf://org/repo/model-Q4_K_M.gguf", "hf://org/repo:Q4_K_M", "hf://org/repo:F16"} {
		res, err = c.Fetch(context.Background(), mustParse(t, s))
		if err != nil || res.Downloaded {
			t.Fatalf("%s: %v, downloaded %v", s, err, res.Downloaded)
		}
	}
	if n := h.Downloads.Load(); n != 2 {
		t.Errorf("%d downloads, want 2 (the cache reused)", n)
	}
}

// A blob huggingface_hub (or another tool) put in the cache is reused.
func TestReusesForeignCache(t *testing.T) {
	h, c, files := fixture(t)
	b := files["model-Q8_0.gguf"]
	blobs := filepath.Join(c.Cache, "models--org--repo", "blobs")
	os.MkdirAll(blobs, 0o755)
	os.WriteFile(filepath.Join(blobs, hubtest.SHA256(b)), b, 0o644)
	res, err := c.Fetch(context.Background(), mustParse(t, "hf://org/repo:Q8_0"))
	if err != nil {
		t.Fatal(err)
	}
	checkLayout(t, c, res, "model-Q8_0.gguf", b)
	if res.Downloaded || h.Downloads.Load() != 0 {
		t.Errorf("downloaded a blob the cache had")
	}
}

func TestResume(t *testing.T) {
	h, c, files := fixture(t)
	ref := mustParse(t, "hf://org/repo:Q4_K_M")
	h.TruncateAt.Store(120_000)
	_, err := c.Fetch(context.Background(), ref)
	if codeOf(err) != ErrIO || !strings.Contains(err.Error(), "run again to resume") {
		t.Fatalf("truncated download: %v", err)
	}
	want := files["model-Q4_K_M.gguf"]
	part := filepath.Join(c.Cache, "models--org--repo", "blobs", hubtest.SHA256(want)+".incomplete")
	if st, err := os.Stat(part); err != nil || st.Size() != 120_000 {
		t.Fatalf("partial file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(c.Cache, "models--org--repo", "snapshots", commit, "model-Q4_K_M.gguf")); err == nil {
		t.Fatal("a snapshot link to a partial download")
	}
	res, err := c.Fetch(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	checkLayout(t, c, res, "model-Q4_K_M.gguf", want)
	if h.RangeGets.Load() != 1 || h.Downloads.Load() != 2 {
		t.Errorf("resume: %d range GETs of %d, want 1 of 2", h.RangeGets.Load(), h.Downloads.Load())
	}
}

// A server that ignores Range: the partial file is dropped and the whole
// file downloaded (and verified) again.
func TestResumeWithoutRange(t *testing.T) {
	h, c, files := fixture(t)
	ref := mustParse(t, "hf://org/repo:Q8_0")
	h.TruncateAt.Store(70_000)
	if _, err := c.Fetch(context.Background(), ref); codeOf(err) != ErrIO {
		t.Fatalf("truncated download: %v", err)
	}
	h.NoRange.Store(true)
	res, err := c.Fetch(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	checkLayout(t, c, res, "model-Q8_0.gguf", files["model-Q8_0.gguf"])
}

// The tree listing and the file's ETag disagree on the SHA-256: nothing
// is downloaded.
func TestContradictingChecksums(t *testing.T) {
	h, c, _ := fixture(t)
	h.TreeSHA.Store(strings.Repeat("ab", 32))
	if _, err := c.Fetch(context.Background(), mustParse(t, "hf://org/repo:Q8_0")); codeOf(err) != ErrProtocol || h.Downloads.Load() != 0 {
		t.Fatalf("contradicting SHA-256: %v, %d downloads", err, h.Downloads.Load())
	}
}

func TestChecksumRefused(t *testing.T) {
	h, c, files := fixture(t)
	h.Corrupt.Store(true)
	ref := mustParse(t, "hf://org/repo:Q8_0")
	_, err := c.Fetch(context.Background(), ref)
	if codeOf(err) != ErrChecksum || !strings.Contains(err.Error(), "not used") {
		t.Fatalf("corrupt download: %v", err)
	}
	dir := filepath.Join(c.Cache, "models--org--repo")
	if m, _ := filepath.Glob(filepath.Join(dir, "blobs", "*")); len(m) != 0 {
		t.Errorf("kept %v", m)
	}
	if _, err := os.Lstat(filepath.Join(dir, "snapshots", commit, "model-Q8_0.gguf")); err == nil {
		t.Error("a snapshot link to refused bytes")
	}
	// A corrupt partial file is caught after a resume too.
	want := files["model-Q8_0.gguf"]
	bad := bytes.Clone(want[:50_000])
	bad[10] ^= 1
	os.MkdirAll(filepath.Join(dir, "blobs"), 0o755)
	os.WriteFile(filepath.Join(dir, "blobs", hubtest.SHA256(want)+".incomplete"), bad, 0o644)
	h.Corrupt.Store(false)
	if _, err = c.Fetch(context.Background(), ref); codeOf(err) != ErrChecksum {
		t.Fatalf("corrupt prefix: %v", err)
	}
	res, err := c.Fetch(context.Background(), ref) // whole again
	if err != nil {
		t.Fatal(err)
	}
	checkLayout(t, c, res, "model-Q8_0.gguf", want)
}

func TestOffline(t *testing.T) {
	h, c, files := fixture(t)
	ref := mustParse(t, "hf://org/repo:Q8_0")
	c.Offline = true
	_, err := c.Fetch(context.Background(), ref)
	if codeOf(err) != ErrOffline || !strings.Contains(err.Error(), "HF_HUB_OFFLINE") || !strings.Contains(err.Error(), c.Cache) {
		t.Fatalf("offline, empty cache: %v", err)
	}
	c.Offline = false
	if _, err := c.Fetch(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	h.Close() // nothing answers now
	c.Offline = true
	for _, s := range []string{"hf://org/repo:Q8_0", "hf://org/repo/model-Q8_0.gguf"} {
		res, err := c.Fetch(context.Background(), mustParse(t, s))
		if err != nil || !res.Offline {
			t.Fatalf("offline %s: %v", s, err)
		}
		checkLayout(t, c, res, "model-Q8_0.gguf", files["model-Q8_0.gguf"])
	}
	if _, err := c.Fetch(context.Background(), mustParse(t, "hf://org/repo:Q4_K_M")); codeOf(err) != ErrOffline {
		t.Errorf("offline, other file: %v", err)
	}
	// Online but unreachable: the cache, with a warning.
	c.Offline = false
	res, err := c.Fetch(context.Background(), ref)
	if err != nil || !res.Offline {
		t.Errorf("unreachable hub, cached file: %v", err)
	}
	// Neither: what helps (a local file, a mirror), not HF_HUB_OFFLINE,
	// which the fallback has just tried.
	_, err = c.Fetch(context.Background(), mustParse(t, "hf://org/repo:Q4_K_M"))
	if codeOf(err) != ErrIO || !strings.Contains(err.Error(), "--model PATH") || !strings.Contains(err.Error(), c.Cache) || strings.Contains(err.Error(), "HF_HUB_OFFLINE") {
		t.Errorf("unreachable hub, file not cached: %v", err)
	}
}

// A listing whose file name climbs out of the snapshot folder is refused
// before anything is asked or written.
func TestHostileFileName(t *testing.T) {
	h := hubtest.New(map[string]*hubtest.Repo{"org/evil": {Commit: commit, Files: map[string][]byte{"../../../escape-Q4_K_M.gguf": []byte("x")}}})
	t.Cleanup(h.Close)
	base := t.TempDir()
	c := &Client{Env: Env{Endpoint: h.URL, Cache: filepath.Join(base, "cache")}}
	if _, err := c.Fetch(context.Background(), mustParse(t, "hf://org/evil")); codeOf(err) != ErrProtocol {
		t.Fatalf("hostile name: %v", err)
	}
	if m, _ := filepath.Glob(filepath.Join(base, "*")); len(m) != 0 {
		t.Errorf("wrote %v", m)
	}
	if h.Downloads.Load() != 0 {
		t.Error("downloaded")
	}
}

func TestToken(t *testing.T) {
	h, c, _ := fixture(t)
	ref := mustParse(t, "hf://org/private:Q8_0")
	_, err := c.Fetch(context.Background(), ref)
	if codeOf(err) != ErrUnauthorized || !strings.Contains(err.Error(), "set HF_TOKEN") {
		t.Fatalf("no token: %v", err)
	}
	c.Token = "hf_wrong"
	_, err = c.Fetch(context.Background(), ref)
	if codeOf(err) != ErrUnauthorized || !strings.Contains(err.Error(), "token is invalid") {
		t.Fatalf("wrong token: %v", err)
	}
	c.Token = "hf_good"
	if _, err = c.Fetch(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	if a := h.CDNAuth(); len(a) != 0 {
		t.Errorf("the token reached the CDN: %q", a)
	}
	// A repository that does not exist (the Hub says 401 too) and a file
	// that does not.
	c.Token = ""
	if _, err = c.Fetch(context.Background(), mustParse(t, "hf://org/nope")); codeOf(err) != ErrUnauthorized || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing repo: %v", err)
	}
	if _, err = c.Fetch(context.Background(), mustParse(t, "hf://org/repo/none.gguf")); codeOf(err) != ErrNotFound {
		t.Errorf("missing file: %v", err)
	}
	if _, err = c.Fetch(context.Background(), mustParse(t, "hf://org/repo@v9:Q8_0")); codeOf(err) != ErrNotFound || !strings.Contains(err.Error(), "no revision v9") {
		t.Errorf("missing revision: %v", err)
	}
}
