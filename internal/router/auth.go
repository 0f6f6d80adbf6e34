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
)

// SingleTenant is the tenant of every request when no key file is given.
const SingleTenant = "default"

// Keys maps API keys to tenants. The tenant of a request is derived from its
// key alone, never from anything in the request body, because the KV cache
// isolation (I3, I11) is only as good as the tenant it is keyed by.
type Keys struct {
	entries []keyEntry
	tenants map[string]bool
	weights map[string]int // tenants with a weight= field
}

type keyEntry struct {
	sum    [32]byte
	tenant string
}

// LoadKeys reads a key file: one "KEY TENANT" pair per line, blank lines and
// lines starting with '#' ignored, several keys per tenant allowed. A line
// may end with "weight=N" (1 <= N <= 1000): the tenant's share in the
// engine's fair queue (default 1). A tenant's lines must not disagree on
// its weight; a line without one leaves it unchanged.
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
	k := &Keys{tenants: map[string]bool{}, weights: map[string]int{}}
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
		if len(f) == 3 {
			w, err := parseWeight(f[2])
			if err != nil {
				return nil, fmt.Errorf("line %d: %v", line, err)
			}
			if prev, ok := k.weights[f[1]]; ok && prev != w {
				return nil, fmt.Errorf("line %d: tenant %q already has weight %d; one tenant has one weight", line, f[1], prev)
			}
			k.weights[f[1]] = w
			f = f[:2]
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("line %d: want \"KEY TENANT [weight=N]\" (two or three fields), got %d fields", line, len(f))
		}
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

func parseWeight(s string) (int, error) {
	v, ok := strings.CutPrefix(s, "weight=")
	if !ok {
		return 0, fmt.Errorf("third field %q: want weight=N", s)
	}
	w, err := strconv.Atoi(v)
	if err != nil || w < 1 || w > maxWeight {
		return 0, fmt.Errorf("weight %q: want an integer from 1 to %d", v, maxWeight)
	}
	return w, nil
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
