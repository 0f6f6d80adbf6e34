package main

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"sluice/internal/router/node"
)

// --shared-prefix-file: the operator's explicit opt-in to ONE cross-tenant
// prefix (I11's only exception). The file's prompt (text, tokenized as a
// completion prompt is, BOS included when the model adds one; or a JSON
// array of token ids) is cached in a public scope: every tenant whose
// prompt starts with exactly those token ids reads the same pages for its
// full pages. What crosses tenants is the timing and cached_tokens of that
// prefix alone (whether somebody used it recently), which the operator has
// declared public; every page after it is keyed under the tenant's salt as
// always. Without the flag nothing is shared across tenants.

// sharedPrefixFlag is the flag's help text (serve and prefill).
const sharedPrefixFlag = "`file` holding a PUBLIC prompt prefix (text, or a JSON array of token ids) whose full KV pages every tenant may share: a deliberate, logged side channel limited to that prefix (any tenant can tell whether it was used recently). Off by default: nothing is shared across tenants"

// maxSharedPrefixBytes bounds the file (it is read whole at start).
const maxSharedPrefixBytes = 1 << 20

// loadSharedPrefix reads and tokenizes the file for m and logs the WARN
// line naming what is shared. Empty path: nil, nothing shared.
func loadSharedPrefix(path string, m *node.Model, pageSize, context int, log *slog.Logger) ([]int32, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--shared-prefix-file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSharedPrefixBytes+1))
	if err != nil {
		return nil, fmt.Errorf("--shared-prefix-file: %w", err)
	}
	if len(b) > maxSharedPrefixBytes {
		return nil, fmt.Errorf("--shared-prefix-file %s is larger than %d bytes", path, maxSharedPrefixBytes)
	}
	ids, err := sharedPrefixIDs(b, m)
	if err != nil {
		return nil, fmt.Errorf("--shared-prefix-file %s: %w", path, err)
	}
	if context > 0 && len(ids) > context {
		return nil, fmt.Errorf("--shared-prefix-file %s is %d tokens, longer than the context of %d", path, len(ids), context)
	}
	full := len(ids) / pageSize
	if full == 0 {
		return nil, fmt.Errorf("--shared-prefix-file %s is %d tokens, less than one KV page of %d: nothing could be shared", path, len(ids), pageSize)
	}
	h := sha256.New()
	for _, id := range ids[:full*pageSize] {
		h.Write(binary.LittleEndian.AppendUint32(nil, uint32(id)))
	}
	sum := hex.EncodeToString(h.Sum(nil))[:16]
	log.Warn(fmt.Sprintf("--shared-prefix-file: the first %d tokens (%d KV pages) of prompts that start with this file's %d tokens are cached in a PUBLIC scope every tenant reads: any tenant can tell from timing or cached_tokens whether they were used recently (a deliberate side channel limited to this prefix); nothing after it is shared", full*pageSize, full, len(ids)),
		"file", path, "prefix_tokens", len(ids), "shared_tokens", full*pageSize, "sha256_ids", sum)
	return ids, nil
}

// sharedPrefixIDs is the file's token ids: a JSON array of ids in the
// model's vocabulary, or text tokenized as a completion prompt.
func sharedPrefixIDs(b []byte, m *node.Model) ([]int32, error) {
	vocab := m.Runtime.Vocab()
	if t := strings.TrimSpace(string(b)); strings.HasPrefix(t, "[") {
		var ids []int32
		if err := json.Unmarshal([]byte(t), &ids); err != nil {
			return nil, fmt.Errorf("starts with '[' but is not a JSON array of token ids: %v", err)
		}
		for _, id := range ids {
			if id < 0 || int(id) >= vocab {
				return nil, fmt.Errorf("token id %d is outside the vocabulary of %d", id, vocab)
			}
		}
		return ids, nil
	}
	return m.Tokenizer().Encode(string(b), true, true)
}
