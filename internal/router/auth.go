package router

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"sluice/internal/ratelimit"
)

// SingleTenant is the tenant of every request when no key file is given.
const SingleTenant = "default"

// Keys maps API keys to tenants. The tenant of a request is derived from its
// key alone, never from anything in the request body, because the KV cache
// isolation (I3, I11) is only as good as the tenant it is keyed by.
type Keys struct {
	entries []keyEntry
	tenants map[string]bool
	weights map[string]int              // tenants with a weight= field
	limits  map[string]ratelimit.Limits // tenants with rpm= or tpm=
}

type keyEntry struct {
	sum    [32]byte
	tenant string
}

// KeyLineFormat is one line of a key file, as the flags' help and the
// parser's errors spell it.
const KeyLineFormat = "KEY TENANT [weight=N] [rpm=N] [tpm=N]"

// LoadKeys reads a key file: one "KEY TENANT" pair per line, blank lines and
// lines starting with '#' ignored, several keys per tenant allowed. A line
// may go on with options, in any order:
//
//	weight=N  (1..1000) the tenant's share in the engine's fair queue (default 1)
//	rpm=N     requests per minute (token bucket; 429 rate_limited beyond)
//	tpm=N     tokens per minute, prompt plus generated (charged prompt +
//	          max_tokens at admission, the unused part given back at the end)
//
// A tenant's lines must not disagree on an option; a line without it
// leaves it unchanged.
func LoadKeys(path string) (*Keys, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("api keys: %w", err)
	}
	defer f.Close()
	k, err := ParseKeys(f)
	if err != nil {
		return nil, fmt.Errorf("api keys %s: %w", path, err)
	}
	return k, nil
}

// ParseKeys parses the key file format of LoadKeys.
func ParseKeys(r io.Reader) (*Keys, error) {
	k := &Keys{tenants: map[string]bool{}, weights: map[string]int{}, limits: map[string]ratelimit.Limits{}}
	seen := map[[32]byte]string{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		f := strings.Fields(s)
		if len(f) < 2 {
			return nil, fmt.Errorf("line %d: want \"%s\", got %d field(s)", line, KeyLineFormat, len(f))
		}
		if err := k.options(f[1], f[2:]); err != nil {
			return nil, fmt.Errorf("line %d: %v", line, err)
		}
		f = f[:2]
		sum := sha256.Sum256([]byte(f[0]))
		if prev, dup := seen[sum]; dup {
			if prev != f[1] {
				return nil, fmt.Errorf("line %d: key already maps to tenant %q; one key cannot name two tenants", line, prev)
			}
			continue
		}
		seen[sum] = f[1]
		k.entries = append(k.entries, keyEntry{sum: sum, tenant: f[1]})
		k.tenants[f[1]] = true
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(k.entries) == 0 {
		return nil, fmt.Errorf("no keys found; add lines of the form \"KEY TENANT\"")
	}
	return k, nil
}

// SingleKey is the table of one key for the single tenant (--api-key, as
// vLLM and llama-server take it). The key must be printable ASCII with no
// space: what a client can send in an Authorization header.
func SingleKey(key string) (*Keys, error) {
	for _, c := range key {
		if c <= ' ' || c > '~' {
			return nil, fmt.Errorf("the key must be printable ASCII without spaces")
		}
	}
	if key == "" {
		return nil, fmt.Errorf("the key is empty")
	}
	return &Keys{entries: []keyEntry{{sum: sha256.Sum256([]byte(key)), tenant: SingleTenant}},
		tenants: map[string]bool{SingleTenant: true}, weights: map[string]int{}}, nil
}

// maxWeight bounds a tenant's weight: its per-turn credit is the weight
// times the context, and a bounded weight keeps that sum far from overflow.
const maxWeight = 1000

// maxRate bounds rpm= and tpm=: a bucket's depth in time is limit units
// of ceil(60s/limit) each, which stays far from overflow below it.
const maxRate = 1_000_000_000

// options applies a line's option fields to tenant.
func (k *Keys) options(tenant string, opts []string) error {
	lim := k.limits[tenant]
	for _, o := range opts {
		name, v, ok := strings.Cut(o, "=")
		var max int64
		switch name {
		case "weight":
			max = maxWeight
		case "rpm", "tpm":
			max = maxRate
		default:
			ok = false
		}
		if !ok {
			return fmt.Errorf("field %q: want weight=N, rpm=N or tpm=N", o)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 || n > max {
			return fmt.Errorf("%s %q: want an integer from 1 to %d", name, v, max)
		}
		var prev int64
		switch name {
		case "weight":
			if w, ok := k.weights[tenant]; ok && int64(w) != n {
				return fmt.Errorf("tenant %q already has weight %d; one tenant has one weight", tenant, w)
			}
			k.weights[tenant] = int(n)
			continue
		case "rpm":
			prev, lim.RPM = lim.RPM, n
		case "tpm":
			prev, lim.TPM = lim.TPM, n
		}
		if prev != 0 && prev != n {
			return fmt.Errorf("tenant %q already has %s=%d; one tenant has one limit of each kind", tenant, name, prev)
		}
	}
	if lim != (ratelimit.Limits{}) {
		k.limits[tenant] = lim
	}
	return nil
}

// Limits are the tenants' rate limits from the key file (nil without any).
func (k *Keys) Limits() map[string]ratelimit.Limits {
	if k == nil || len(k.limits) == 0 {
		return nil
	}
	return k.limits
}

// Weight is the tenant's share in the fair queue: 1 unless the key file
// gives another (also 1 in single-tenant mode, k nil).
func (k *Keys) Weight(tenant string) int {
	if k == nil {
		return 1
	}
	if w, ok := k.weights[tenant]; ok {
		return w
	}
	return 1
}

// Tenants is the number of distinct tenants.
func (k *Keys) Tenants() int { return len(k.tenants) }

// Lookup returns the tenant of key. It compares SHA-256 digests in constant
// time against every entry without stopping early, so neither the position
// of a match nor the length of the key shows in the timing.
func (k *Keys) Lookup(key string) (string, bool) {
	sum := sha256.Sum256([]byte(key))
	found := 0
	tenant := ""
	for i := range k.entries {
		eq := subtle.ConstantTimeCompare(sum[:], k.entries[i].sum[:])
		if eq == 1 {
			tenant = k.entries[i].tenant
		}
		found |= eq
	}
	return tenant, found == 1 && key != ""
}
