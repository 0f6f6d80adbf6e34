package hub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Client fetches models from one Hub into one cache.
type Client struct {
	Env
	// HTTP is the client for every request; nil: one with connect and
	// response-header timeouts and no overall timeout (a download of a
	// few GB takes as long as it takes).
	HTTP *http.Client
	// Progress receives the download progress bar (stderr); nil: none.
	Progress io.Writer
	// Log receives what a user should know (a fallback to the cache).
	Log *slog.Logger
	// UserAgent is sent with every request.
	UserAgent string
}

// Result is a model file ready to open.
type Result struct {
	// Path is snapshots/{commit}/{file} in the cache (a symlink to the
	// blob, as huggingface_hub lays it out).
	Path   string
	Ref    Ref
	File   string
	Commit string
	SHA256 string
	Size   int64
	// Downloaded: bytes came over the network this time (false: the cache
	// had the blob).
	Downloaded bool
	// Offline: resolved from the cache alone.
	Offline bool
}

// maxJSON bounds an API answer (a tree listing of a repository with
// thousands of files is a few MB).
const maxJSON = 32 << 20

func (c *Client) http() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return &http.Client{Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   30 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
	}}
}

func (c *Client) log() *slog.Logger {
	if c.Log != nil {
		return c.Log
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// Fetch resolves ref to a verified file in the cache, downloading it if
// the cache does not have it. Offline (HF_HUB_OFFLINE) it reads the cache
// only; when the Hub cannot be reached at all it falls back to the cache
// with a warning, as huggingface_hub does.
func (c *Client) Fetch(ctx context.Context, ref Ref) (Result, error) {
	if c.Offline {
		return c.fromCache(ref, "HF_HUB_OFFLINE is set")
	}
	res, err := c.fetch(ctx, ref)
	var he *Error
	if err != nil && errors.As(err, &he) && he.Code == ErrIO && he.Err != nil && isNetErr(he.Err) {
		if r, cerr := c.fromCache(ref, "the Hub could not be reached"); cerr == nil {
			c.log().Warn("the Hub could not be reached; using the cached copy", "model", ref.String(), "err", he.Err, "path", r.Path)
			return r, nil
		}
		// Neither the Hub nor the cache: HF_HUB_OFFLINE=1 cannot help
		// (the cache was just tried); say what can.
		return res, &Error{Code: ErrIO, Ref: he.Ref, Msg: fmt.Sprintf("cannot reach the Hub at %s (%v) and the cache (%s) holds no copy: "+
			"give --model PATH to a GGUF file you have (fetched where the Hub is reachable), or set HF_ENDPOINT to a mirror", c.Endpoint, he.Err, c.Cache)}
	}
	return res, err
}

func isNetErr(err error) bool {
	var ne net.Error
	var ue *url.Error
	return errors.As(err, &ne) || errors.As(err, &ue)
}

// fromCache resolves ref with no network: refs/{rev} -> snapshots/{commit}.
func (c *Client) fromCache(ref Ref, why string) (Result, error) {
	dir := repoDir(c.Cache, ref.Repo)
	miss := func(what string) (Result, error) {
		return Result{}, &Error{Code: ErrOffline, Ref: ref.String(), Msg: fmt.Sprintf("%s and the cache (%s) has %s; run once with the Hub reachable (and HF_HUB_OFFLINE unset) to download it, or give --model PATH to a GGUF file", why, c.Cache, what)}
	}
	commit, ok := cachedCommit(dir, ref.Revision)
	if !ok {
		return miss(fmt.Sprintf("no %s at revision %s", ref.Repo, ref.Revision))
	}
	snap := filepath.Join(dir, "snapshots", commit)
	file := ref.File
	if file == "" {
		var err error
		if file, err = Pick(snapshotFiles(snap), ref.Quant); err != nil {
			var he *Error
			if errors.As(err, &he) && he.Code == ErrNoGGUF {
				return miss(fmt.Sprintf("no matching .gguf file (%s)", he.Msg))
			}
			return Result{}, err
		}
	}
	p := filepath.Join(snap, filepath.FromSlash(file))
	st, err := os.Stat(p) // follows the link: a dangling one is a miss
	if err != nil {
		return miss(fmt.Sprintf("no %s in snapshot %s", file, commit))
	}
	r := Result{Path: p, Ref: ref, File: file, Commit: commit, Size: st.Size(), Offline: true}
	if t, err := os.Readlink(p); err == nil && sha256Re.MatchString(filepath.Base(t)) {
		r.SHA256 = filepath.Base(t)
	}
	return r, nil
}

// treeEntry is one element of GET /api/models/{repo}/tree/{rev}.
type treeEntry struct {
	Type string `json:"type"`
	Path string `json:"path"`
	Size int64  `json:"size"`
	LFS  *struct {
		Oid  string `json:"oid"`
		Size int64  `json:"size"`
	} `json:"lfs"`
}

// meta is what HEAD /{repo}/resolve/{rev}/{file} says of a file.
type meta struct {
	commit, etag string
	size         int64
}

func (c *Client) fetch(ctx context.Context, ref Ref) (Result, error) {
	fail := func(code ErrorCode, err error, format string, a ...any) (Result, error) {
		return Result{}, &Error{Code: code, Ref: ref.String(), Msg: fmt.Sprintf(format, a...), Err: err}
	}
	tree, err := c.tree(ctx, ref)
	if err != nil {
		return Result{}, err
	}
	file := ref.File
	if file == "" {
		paths := make([]string, 0, len(tree))
		for p := range tree {
			paths = append(paths, p)
		}
		if file, err = Pick(paths, ref.Quant); err != nil {
			err.(*Error).Ref = ref.String()
			return Result{}, err
		}
	} else if _, ok := tree[file]; !ok {
		return fail(ErrNotFound, nil, "the repository has no file %s at revision %s", file, ref.Revision)
	}
	// The name comes from the Hub's listing and becomes a path under
	// snapshots/: a name that climbs out (or is absolute) is refused.
	if err := checkFile(file); err != nil {
		return fail(ErrProtocol, err, "the Hub listed a file name sluice will not write")
	}
	m, err := c.head(ctx, ref, file)
	if err != nil {
		return Result{}, err
	}
	// The SHA-256 to verify: the LFS object id, from the file's ETag
	// (X-Linked-Etag for LFS files) and the tree listing; both must agree
	// when both are given.
	want := ""
	if sha256Re.MatchString(m.etag) {
		want = m.etag
	}
	if e := tree[file]; e.LFS != nil {
		oid := strings.ToLower(e.LFS.Oid)
		if want != "" && oid != want {
			return fail(ErrProtocol, nil, "the Hub gives two SHA-256 for %s (ETag %s, tree %s); not downloading", file, want, oid)
		}
		want = oid
		if m.size <= 0 {
			m.size = e.LFS.Size
		}
	}
	if !sha256Re.MatchString(want) {
		return fail(ErrNoChecksum, nil, "the Hub publishes no SHA-256 for %s (not an LFS file), so it cannot be verified; download it yourself and give --model PATH", file)
	}
	if m.etag == "" {
		m.etag = want
	}
	dir := repoDir(c.Cache, ref.Repo)
	blob := filepath.Join(dir, "blobs", m.etag)
	res := Result{Ref: ref, File: file, Commit: m.commit, SHA256: want, Size: m.size}
	if st, err := os.Stat(blob); err == nil && (m.size <= 0 || st.Size() == m.size) {
		res.Size = st.Size()
	} else {
		unlock, err := lock(filepath.Join(c.Cache, ".locks", filepath.Base(dir), m.etag+".lock"))
		if err != nil {
			return fail(ErrIO, err, "cannot lock the cache entry")
		}
		defer unlock()
		// Another process may have finished it while we waited.
		if st, err := os.Stat(blob); err == nil && (m.size <= 0 || st.Size() == m.size) {
			res.Size = st.Size()
		} else {
			if err := c.download(ctx, ref, file, blob, want, m.size); err != nil {
				return Result{}, err
			}
			res.Downloaded = true
		}
	}
	if res.Path, err = link(dir, m.commit, file, m.etag); err != nil {
		return fail(ErrIO, err, "cannot link the snapshot in the cache")
	}
	if err := writeRef(dir, ref.Revision, m.commit); err != nil {
		return fail(ErrIO, err, "cannot record the revision in the cache")
	}
	return res, nil
}

func (c *Client) newRequest(ctx context.Context, method, u string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, err
	}
	if c.Token != "" {
		// Go drops Authorization on a redirect to another host, so the
		// token never reaches the CDN a download is sent to.
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	ua := c.UserAgent
	if ua == "" {
		ua = "sluice"
	}
	req.Header.Set("User-Agent", ua)
	return req, nil
}

// statusError turns a Hub status into an error a user can act on.
func (c *Client) statusError(ref Ref, resp *http.Response, what string) error {
	e := &Error{Ref: ref.String()}
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		e.Code = ErrUnauthorized
		if c.Token == "" {
			e.Msg = fmt.Sprintf("the Hub answered 401 for %s: the repository does not exist, or it is private or gated and needs a token; check the name, or set HF_TOKEN to a read token (https://huggingface.co/settings/tokens)", what)
		} else {
			e.Msg = fmt.Sprintf("the Hub answered 401 for %s with the token given (HF_TOKEN or the saved token): the repository does not exist, or the token is invalid or expired; check the name and the token", what)
		}
	case http.StatusForbidden:
		e.Code = ErrForbidden
		e.Msg = fmt.Sprintf("the Hub answered 403 for %s: the repository is gated and the token's user has not been granted access (accept its terms on the model's page), or the token lacks read permission", what)
	case http.StatusNotFound:
		e.Code = ErrNotFound
		if resp.Header.Get("X-Error-Code") == "RevisionNotFound" {
			e.Msg = fmt.Sprintf("the Hub has no revision %s of %s", ref.Revision, ref.Repo)
		} else {
			e.Msg = fmt.Sprintf("the Hub answered 404 for %s: check the repository name and revision", what)
		}
	default:
		e.Code = ErrProtocol
		e.Msg = fmt.Sprintf("the Hub answered %s for %s; try again later", resp.Status, what)
	}
	return e
}

// tree lists the repository's files (recursive), following the Link
// header's pages.
func (c *Client) tree(ctx context.Context, ref Ref) (map[string]treeEntry, error) {
	u := fmt.Sprintf("%s/api/models/%s/tree/%s?recursive=true", c.Endpoint, ref.Repo, url.PathEscape(ref.Revision))
	out := map[string]treeEntry{}
	for page := 0; u != ""; page++ {
		if page == 100 {
			return nil, &Error{Code: ErrProtocol, Ref: ref.String(), Msg: "the repository listing has more than 100 pages"}
		}
		req, err := c.newRequest(ctx, http.MethodGet, u)
		if err != nil {
			return nil, &Error{Code: ErrIO, Ref: ref.String(), Msg: "bad HF_ENDPOINT " + c.Endpoint, Err: err}
		}
		resp, err := c.http().Do(req)
		if err != nil {
			return nil, &Error{Code: ErrIO, Ref: ref.String(), Msg: "cannot reach the Hub at " + c.Endpoint + " (set HF_ENDPOINT for a mirror, HF_HUB_OFFLINE=1 to use the cache only)", Err: err}
		}
		var entries []treeEntry
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return nil, c.statusError(ref, resp, "the repository's file list")
		}
		err = json.NewDecoder(io.LimitReader(resp.Body, maxJSON)).Decode(&entries)
		resp.Body.Close()
		if err != nil {
			return nil, &Error{Code: ErrProtocol, Ref: ref.String(), Msg: "the repository's file list is not the Hub's JSON", Err: err}
		}
		for _, e := range entries {
			if e.Type == "file" {
				out[e.Path] = e
			}
		}
		u = nextLink(resp.Header.Get("Link"), req.URL)
	}
	return out, nil
}

// nextLink is the rel="next" target of a Link header, resolved against
// the request's URL and kept on the same host.
func nextLink(h string, base *url.URL) string {
	for _, part := range strings.Split(h, ",") {
		segs := strings.Split(part, ";")
		if len(segs) < 2 || !strings.Contains(strings.Join(segs[1:], ";"), `rel="next"`) {
			continue
		}
		raw := strings.Trim(strings.TrimSpace(segs[0]), "<>")
		if u, err := base.Parse(raw); err == nil && u.Host == base.Host {
			return u.String()
		}
	}
	return ""
}

func (c *Client) resolveURL(ref Ref, file string) string {
	esc := make([]string, 0, 4)
	for _, p := range strings.Split(file, "/") {
		esc = append(esc, url.PathEscape(p))
	}
	return fmt.Sprintf("%s/%s/resolve/%s/%s", c.Endpoint, ref.Repo, url.PathEscape(ref.Revision), strings.Join(esc, "/"))
}

// normEtag strips a weak marker and the quotes.
func normEtag(s string) string {
	return strings.ToLower(strings.Trim(strings.TrimPrefix(strings.TrimSpace(s), "W/"), `"`))
}

// head asks the file's metadata without following a redirect to the CDN
// (the Hub's headers are on the redirect itself); a relative redirect (a
// renamed repository) is followed, as huggingface_hub does.
func (c *Client) head(ctx context.Context, ref Ref, file string) (meta, error) {
	u := c.resolveURL(ref, file)
	cl := *c.http()
	cl.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for hop := 0; ; hop++ {
		req, err := c.newRequest(ctx, http.MethodHead, u)
		if err != nil {
			return meta{}, &Error{Code: ErrIO, Ref: ref.String(), Msg: "bad HF_ENDPOINT " + c.Endpoint, Err: err}
		}
		req.Header.Set("Accept-Encoding", "identity")
		resp, err := cl.Do(req)
		if err != nil {
			return meta{}, &Error{Code: ErrIO, Ref: ref.String(), Msg: "cannot reach the Hub at " + c.Endpoint, Err: err}
		}
		resp.Body.Close()
		if resp.StatusCode >= 300 && resp.StatusCode < 400 && resp.Header.Get("X-Repo-Commit") == "" && hop < 5 {
			if loc, err := req.URL.Parse(resp.Header.Get("Location")); err == nil && loc.Host == req.URL.Host {
				u = loc.String()
				continue
			}
		}
		if resp.StatusCode >= 400 {
			return meta{}, c.statusError(ref, resp, file)
		}
		m := meta{commit: resp.Header.Get("X-Repo-Commit"), etag: normEtag(resp.Header.Get("X-Linked-Etag"))}
		if m.etag == "" {
			m.etag = normEtag(resp.Header.Get("ETag"))
		}
		size := resp.Header.Get("X-Linked-Size")
		if size == "" && resp.StatusCode == http.StatusOK {
			size = resp.Header.Get("Content-Length")
		}
		m.size, _ = strconv.ParseInt(size, 10, 64)
		if !commitRe.MatchString(m.commit) {
			return meta{}, &Error{Code: ErrProtocol, Ref: ref.String(), Msg: fmt.Sprintf("the answer for %s carries no commit (X-Repo-Commit); is %s a Hugging Face Hub?", file, c.Endpoint)}
		}
		if m.etag != "" && !sha256Re.MatchString(m.etag) && !safeEtag(m.etag) {
			return meta{}, &Error{Code: ErrProtocol, Ref: ref.String(), Msg: fmt.Sprintf("the ETag of %s is not a blob id", file)}
		}
		return m, nil
	}
}

// safeEtag: an ETag usable as a file name (a git blob id for a non-LFS
// file); it names the blob in the cache, so no path separators.
func safeEtag(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isAlnum(s[i]) && s[i] != '-' && s[i] != '_' {
			return false
		}
	}
	return true
}

// download writes the file into blob, verified: it resumes from
// blob.incomplete with a Range request, hashes every byte (the kept
// prefix first), and renames into place only when the SHA-256 and size
// are the published ones; otherwise the partial file is deleted.
func (c *Client) download(ctx context.Context, ref Ref, file, blob, want string, size int64) error {
	fail := func(code ErrorCode, err error, format string, a ...any) error {
		return &Error{Code: code, Ref: ref.String(), Msg: fmt.Sprintf(format, a...), Err: err}
	}
	if err := os.MkdirAll(filepath.Dir(blob), 0o755); err != nil {
		return fail(ErrIO, err, "cannot create the cache directory")
	}
	part := blob + ".incomplete"
	f, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fail(ErrIO, err, "cannot write to the cache")
	}
	defer f.Close()
	h := sha256.New()
	have, err := io.Copy(h, f) // the kept prefix, hashed
	if err != nil {
		return fail(ErrIO, err, "cannot read the partial download")
	}
	if size > 0 && have > size {
		have = 0
	}
	if size > 0 && have == size {
		// A previous run got every byte but stopped before the rename.
		return c.finish(ref, file, f, part, blob, h, have, size, want)
	}
	if have == 0 {
		h.Reset()
		if err := f.Truncate(0); err != nil {
			return fail(ErrIO, err, "cannot write to the cache")
		}
	}
	req, err := c.newRequest(ctx, http.MethodGet, c.resolveURL(ref, file))
	if err != nil {
		return fail(ErrIO, err, "bad HF_ENDPOINT")
	}
	if have > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", have))
	}
	resp, err := c.http().Do(req)
	if err != nil {
		return fail(ErrIO, err, "download of %s failed (run again to resume)", file)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusPartialContent && have > 0 && strings.HasPrefix(resp.Header.Get("Content-Range"), fmt.Sprintf("bytes %d-", have)):
		c.log().Info("resuming a partial download", "model", ref.String(), "file", file, "have_bytes", have)
	case resp.StatusCode == http.StatusOK:
		// No range support (or a fresh start): from the beginning.
		have = 0
		h.Reset()
		if err := f.Truncate(0); err != nil {
			return fail(ErrIO, err, "cannot write to the cache")
		}
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable:
		f.Close()
		os.Remove(part)
		return fail(ErrIO, nil, "the partial download of %s does not fit the Hub's file and was deleted; run again to download it whole", file)
	case resp.StatusCode >= 400:
		return c.statusError(ref, resp, file)
	default:
		return fail(ErrProtocol, nil, "unexpected answer %s to the download of %s", resp.Status, file)
	}
	if _, err := f.Seek(have, io.SeekStart); err != nil {
		return fail(ErrIO, err, "cannot write to the cache")
	}
	total := size
	if total <= 0 && resp.ContentLength > 0 {
		total = have + resp.ContentLength
	}
	bar := newBar(c.Progress, file, have, total)
	n, err := io.Copy(io.MultiWriter(f, h, bar), resp.Body)
	bar.done()
	if err != nil {
		// Keep the partial file: the next run resumes it.
		return fail(ErrIO, err, "download of %s stopped after %d bytes (run again to resume)", file, have+n)
	}
	return c.finish(ref, file, f, part, blob, h, have+n, size, want)
}

// finish verifies the whole file's digest and size and moves it into
// place, or deletes it.
func (c *Client) finish(ref Ref, file string, f *os.File, part, blob string, h hash.Hash, n, size int64, want string) error {
	fail := func(code ErrorCode, err error, format string, a ...any) error {
		return &Error{Code: code, Ref: ref.String(), Msg: fmt.Sprintf(format, a...), Err: err}
	}
	got := hex.EncodeToString(h.Sum(nil))
	if got != want || (size > 0 && n != size) {
		f.Close()
		os.Remove(part)
		return fail(ErrChecksum, nil, "the downloaded %s (%d bytes, SHA-256 %s) is not the file the Hub published (%d bytes, SHA-256 %s); deleted, not used. Run again; if it repeats, the mirror (HF_ENDPOINT) or a proxy is altering it", file, n, got, size, want)
	}
	if err := f.Sync(); err != nil {
		return fail(ErrIO, err, "cannot write to the cache")
	}
	if err := f.Close(); err != nil {
		return fail(ErrIO, err, "cannot write to the cache")
	}
	if err := os.Rename(part, blob); err != nil {
		return fail(ErrIO, err, "cannot move the download into the cache")
	}
	return nil
}
