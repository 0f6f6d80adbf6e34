package cluster

import (
	"container/list"
	"crypto/sha256"
	"encoding/binary"
)

// Prefix affinity: send a request to the worker that most likely holds its
// prompt's leading pages in its prefix cache, as SGLang's cache-aware
// router does. Workers do not say which prefixes they hold (their Load
// report is counts only), so the router remembers, approximately and in
// bounded memory, where it sent each (tenant, scope, page chain) and
// believes the worker still has it. The belief can be stale (evicted on the
// worker): then the request simply misses there; the worker's own cache is
// keyed and salted by tenant (kv/cache.go, I11), so a wrong belief never
// reads anything, it only costs a recompute.
//
// The memory is keyed by tenant and cache scope: one tenant's prompts never
// move another tenant's scores (a lookup by B walks B's entries only, even
// for a prompt A sent), so routing reveals nothing of A's prompts to B
// beyond what sharing a worker does anyway.

// PageKey names one full page of a prompt in the router's memory: a chain
// hash over the page's tokens and every earlier one, so a key at depth i
// implies the whole prefix up to it. It is not the workers' salted cache
// key (the router has no salt); the memory's (tenant, scope) part keeps
// tenants apart instead.
type PageKey [32]byte

// PageKeys is the chain of keys of the full pages of tokens.
func PageKeys(pageSize int, tokens []int32) []PageKey {
	if pageSize <= 0 {
		return nil
	}
	n := len(tokens) / pageSize
	out := make([]PageKey, n)
	var parent PageKey
	buf := make([]byte, 0, 64+4*pageSize)
	for i := range n {
		buf = append(buf[:0], "sluice router affinity v1\x00"...)
		buf = append(buf, parent[:]...)
		for _, t := range tokens[i*pageSize : (i+1)*pageSize] {
			buf = binary.LittleEndian.AppendUint32(buf, uint32(t))
		}
		parent = sha256.Sum256(buf)
		out[i] = parent
	}
	return out
}

// maxHolders bounds the workers remembered per page: the most recent ones.
const maxHolders = 4

type affKey struct {
	tenant, scope string
	key           PageKey
}

type affEntry struct {
	k       affKey
	holders []string // most recent first, at most maxHolders
}

// Affinity is the router's bounded LRU memory of which workers were sent
// which (tenant, scope, page) — pure: no clock, no I/O, not safe for
// concurrent use (the caller holds its lock).
type Affinity struct {
	cap int
	lru *list.List // of *affEntry, most recent at the front
	idx map[affKey]*list.Element
}

// NewAffinity remembers at most capacity pages (each entry costs about
// 150 bytes plus the tenant and scope strings, which are shared).
func NewAffinity(capacity int) *Affinity {
	return &Affinity{cap: max(capacity, 1), lru: list.New(), idx: map[affKey]*list.Element{}}
}

// Len is the number of pages remembered.
func (a *Affinity) Len() int { return a.lru.Len() }

// Match returns, per worker, how many leading pages of keys the router
// believes it holds for (tenant, scope): the deepest page it was recorded
// for (a deeper page implies the prefix before it). Only this tenant's
// and scope's entries are read. The pages it walks become recent.
func (a *Affinity) Match(tenant, scope string, keys []PageKey) map[string]int {
	out := map[string]int{}
	for i, k := range keys {
		e, ok := a.idx[affKey{tenant, scope, k}]
		if !ok {
			break // the chain: nothing deeper can be held without this page
		}
		a.lru.MoveToFront(e)
		for _, w := range e.Value.(*affEntry).holders {
			out[w] = i + 1
		}
	}
	return out
}

// Record notes that worker was sent keys for (tenant, scope) and will hold
// them (it caches them when the request runs). Oldest pages are forgotten
// beyond the capacity.
func (a *Affinity) Record(tenant, scope string, keys []PageKey, worker string) {
	for _, k := range keys {
		ak := affKey{tenant, scope, k}
		if el, ok := a.idx[ak]; ok {
			e := el.Value.(*affEntry)
			e.holders = pushHolder(e.holders, worker)
			a.lru.MoveToFront(el)
			continue
		}
		a.idx[ak] = a.lru.PushFront(&affEntry{k: ak, holders: []string{worker}})
		for a.lru.Len() > a.cap {
			old := a.lru.Back()
			delete(a.idx, old.Value.(*affEntry).k)
			a.lru.Remove(old)
		}
	}
}

// Forget drops worker from every entry (it left the cluster, or came back
// with an empty cache after a restart).
func (a *Affinity) Forget(worker string) {
	for el := a.lru.Front(); el != nil; {
		next := el.Next()
		e := el.Value.(*affEntry)
		kept := e.holders[:0]
		for _, w := range e.holders {
			if w != worker {
				kept = append(kept, w)
			}
		}
		e.holders = kept
		if len(kept) == 0 {
			delete(a.idx, e.k)
			a.lru.Remove(el)
		}
		el = next
	}
}

func pushHolder(hs []string, w string) []string {
	out := append(make([]string, 0, maxHolders), w)
	for _, h := range hs {
		if h != w && len(out) < maxHolders {
			out = append(out, h)
		}
	}
	return out
}

// PrefixAffinity prefers the worker believed to hold most of the
// request's prompt pages (State.PrefixPages, from an Affinity): its score
// is those pages over the request's full pages (State.PromptPages), so a
// worker holding the whole cacheable prefix scores 1 and one holding half
// of it 0.5. No belief, or a prompt without a full page, scores 0.
type PrefixAffinity struct{}

func (PrefixAffinity) Name() string { return "prefix-affinity" }
func (PrefixAffinity) Score(cands []State) []float64 {
	out := make([]float64, len(cands))
	for i, c := range cands {
		if c.PromptPages > 0 && c.PrefixPages > 0 {
			out[i] = float64(min(c.PrefixPages, c.PromptPages)) / float64(c.PromptPages)
		}
	}
	return out
}

// Prompt is what affinity needs of a request: its authenticated tenant,
// its cache scope (prompt_cache_key / cache_salt: a narrower scope is
// another cache on the workers) and its prompt's full-page keys.
type Prompt struct {
	Tenant, Scope string
	Keys          []PageKey
}

// PickPrompt is Pick for one request with prefix affinity: each
// candidate's PrefixPages comes from aff's memory of THIS tenant and scope
// only. It records nothing: the caller records the worker the request is
// sent to (aff.Record) once that is settled, e.g. only when a prefill and
// a decode worker were both found, so a pick that sent nothing anywhere
// leaves no belief that the worker holds the prompt. A nil aff is plain
// Pick.
func (p Profile) PickPrompt(ws []State, rotate int, aff *Affinity, r Prompt) (Choice, []Rejection, error) {
	if aff == nil || len(r.Keys) == 0 {
		return p.Pick(ws, rotate)
	}
	held := aff.Match(r.Tenant, r.Scope, r.Keys)
	st := make([]State, len(ws))
	for i, w := range ws {
		w.PrefixPages, w.PromptPages = held[w.Name], len(r.Keys)
		st[i] = w
	}
	c, rej, err := p.Pick(st, rotate)
	if err == nil {
		c.PrefixPages = st[c.Index].PrefixPages
	}
	return c, rej, err
}
