// Package hubtest is a fake Hugging Face Hub for tests: an httptest server
// answering the endpoints package hub uses, with the headers the real Hub
// sends (X-Repo-Commit, X-Linked-Etag, X-Linked-Size, a redirect to a
// "CDN" path for file bytes, Range support), and switches to misbehave
// (truncate a download, serve other bytes, require a token).
package hubtest

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Repo is one repository of the fake.
type Repo struct {
	Commit string            // 40 hex digits
	Files  map[string][]byte // path -> bytes (every file is served as an LFS file)
	// Token, when set, is required (Bearer): without it, or with another,
	// the fake answers 401 as the Hub does.
	Token string
}

// Hub is the fake. Its switches may be set between requests.
type Hub struct {
	*httptest.Server
	// CDN serves the file bytes the Hub redirects to, on another host
	// name (localhost, where the Hub is 127.0.0.1), as the real Hub sends
	// downloads to a CDN: a client must not send it the token.
	CDN   *httptest.Server
	mu    sync.Mutex
	repos map[string]*Repo
	// TruncateAt: when > 0, the next file download stops after this many
	// bytes of the response body (the connection is cut), once.
	TruncateAt atomic.Int64
	// Corrupt: serve the file bytes with one byte flipped (the published
	// SHA-256 stays the true one).
	Corrupt atomic.Bool
	// NoRange: answer a Range request with the whole file (200), as a
	// server without range support does.
	NoRange atomic.Bool
	// TreeSHA, when set, is the SHA-256 the tree listing publishes for
	// every file (a Hub contradicting its own ETag).
	TreeSHA atomic.Value
	// Downloads counts GETs of file bytes; RangeGets those with a Range.
	Downloads, RangeGets atomic.Int64
	// Tokens records the Authorization headers seen by the API and
	// resolve endpoints (never by the CDN path).
	mu2      sync.Mutex
	authSeen []string
	cdnAuth  []string
}

// New starts a fake hub serving repos (name "org/repo" -> Repo).
func New(repos map[string]*Repo) *Hub {
	h := &Hub{repos: repos}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/models/{org}/{repo}/tree/{rev}", h.tree)
	// /{org}/{repo}/resolve/{rev}/{path...} overlaps the API's patterns
	// in ServeMux's eyes, so it is split by hand.
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 5)
		if len(parts) < 5 || parts[2] != "resolve" || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
			http.NotFound(w, r)
			return
		}
		r.SetPathValue("org", parts[0])
		r.SetPathValue("repo", parts[1])
		r.SetPathValue("rev", parts[3])
		r.SetPathValue("path", parts[4])
		h.resolve(w, r)
	})
	h.Server = httptest.NewServer(mux)
	cdn := http.NewServeMux()
	cdn.HandleFunc("GET /cdn/{sha}", h.cdn)
	h.CDN = httptest.NewServer(cdn)
	return h
}

// Close stops both servers.
func (h *Hub) Close() { h.Server.Close(); h.CDN.Close() }

// CDNAuth returns the Authorization headers the CDN received (a client
// must send none: the token is for the Hub only).
func (h *Hub) CDNAuth() []string {
	h.mu2.Lock()
	defer h.mu2.Unlock()
	return append([]string(nil), h.cdnAuth...)
}

// SHA256 is the hex SHA-256 of b.
func SHA256(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func (h *Hub) repo(w http.ResponseWriter, r *http.Request) (*Repo, bool) {
	h.mu.Lock()
	rp := h.repos[r.PathValue("org")+"/"+r.PathValue("repo")]
	h.mu.Unlock()
	h.mu2.Lock()
	h.authSeen = append(h.authSeen, r.Header.Get("Authorization"))
	h.mu2.Unlock()
	if rp == nil {
		// The Hub answers 401 for a repository that does not exist (or
		// that the caller may not see), not 404.
		w.Header().Set("X-Error-Code", "RepoNotFound")
		http.Error(w, `{"error":"Repository not found"}`, http.StatusUnauthorized)
		return nil, false
	}
	if rp.Token != "" && r.Header.Get("Authorization") != "Bearer "+rp.Token {
		w.Header().Set("X-Error-Code", "GatedRepo")
		http.Error(w, `{"error":"Invalid credentials"}`, http.StatusUnauthorized)
		return nil, false
	}
	if rev := r.PathValue("rev"); rev != "main" && rev != rp.Commit {
		w.Header().Set("X-Error-Code", "RevisionNotFound")
		http.Error(w, `{"error":"Revision not found"}`, http.StatusNotFound)
		return nil, false
	}
	return rp, true
}

func (h *Hub) tree(w http.ResponseWriter, r *http.Request) {
	rp, ok := h.repo(w, r)
	if !ok {
		return
	}
	type lfs struct {
		Oid         string `json:"oid"`
		Size        int    `json:"size"`
		PointerSize int    `json:"pointerSize"`
	}
	type entry struct {
		Type string `json:"type"`
		Oid  string `json:"oid"`
		Size int    `json:"size"`
		Path string `json:"path"`
		LFS  *lfs   `json:"lfs,omitempty"`
	}
	var out []entry
	dirs := map[string]bool{}
	for p, b := range rp.Files {
		g := sha1.Sum(b)
		sum := SHA256(b)
		if v, _ := h.TreeSHA.Load().(string); v != "" {
			sum = v
		}
		out = append(out, entry{Type: "file", Oid: hex.EncodeToString(g[:]), Size: len(b), Path: p, LFS: &lfs{Oid: sum, Size: len(b), PointerSize: 134}})
		if i := strings.LastIndexByte(p, '/'); i > 0 {
			dirs[p[:i]] = true
		}
	}
	out = append(out, entry{Type: "file", Oid: "0000000000000000000000000000000000000001", Size: 12, Path: "README.md"})
	for d := range dirs {
		out = append(out, entry{Type: "directory", Oid: "0000000000000000000000000000000000000002", Path: d})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

// resolve answers as the Hub does for an LFS file: a 302 to the CDN
// carrying the commit, the LFS SHA-256 and the size.
func (h *Hub) resolve(w http.ResponseWriter, r *http.Request) {
	rp, ok := h.repo(w, r)
	if !ok {
		return
	}
	b, ok := rp.Files[r.PathValue("path")]
	if !ok {
		w.Header().Set("X-Error-Code", "EntryNotFound")
		http.Error(w, `{"error":"Entry not found"}`, http.StatusNotFound)
		return
	}
	sum := SHA256(b)
	w.Header().Set("X-Repo-Commit", rp.Commit)
	w.Header().Set("X-Linked-Etag", `"`+sum+`"`)
	w.Header().Set("X-Linked-Size", fmt.Sprint(len(b)))
	w.Header().Set("ETag", `"`+sum+`"`)
	w.Header().Set("Location", strings.Replace(h.CDN.URL, "127.0.0.1", "localhost", 1)+"/cdn/"+sum)
	w.WriteHeader(http.StatusFound)
}

func (h *Hub) cdn(w http.ResponseWriter, r *http.Request) {
	h.mu2.Lock()
	if a := r.Header.Get("Authorization"); a != "" {
		h.cdnAuth = append(h.cdnAuth, a)
	}
	h.mu2.Unlock()
	var b []byte
	h.mu.Lock()
	for _, rp := range h.repos {
		for _, f := range rp.Files {
			if SHA256(f) == r.PathValue("sha") {
				b = f
			}
		}
	}
	h.mu.Unlock()
	if b == nil {
		http.NotFound(w, r)
		return
	}
	h.Downloads.Add(1)
	if r.Header.Get("Range") != "" {
		h.RangeGets.Add(1)
	}
	if h.Corrupt.Load() {
		b = bytes.Clone(b)
		b[len(b)/2] ^= 0xff
	}
	if n := h.TruncateAt.Swap(0); n > 0 {
		// Announce the whole file, send n bytes, cut the connection.
		w.Header().Set("Content-Length", fmt.Sprint(len(b)))
		w.WriteHeader(http.StatusOK)
		w.Write(b[:n])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
	if h.NoRange.Load() {
		r.Header.Del("Range")
	}
	http.ServeContent(w, r, "model.gguf", time.Time{}, bytes.NewReader(b))
}
