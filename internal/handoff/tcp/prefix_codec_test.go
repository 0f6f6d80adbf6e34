package tcp

import (
	"errors"
	"reflect"
	"testing"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
	"sluice/internal/kv"
)

// The decode-side prefix cache's fields cross the codec intact, and a
// peer's out-of-range values are refused as bad messages at the wire: a
// decode_prefix_len that is not whole pages, covers the whole prompt or
// more pages than listed; prompt ids that do not match the prompt length;
// an oversized cache scope. The KV quota's fields (Weight, NoRevoke)
// cross it too, and a weight above handoff.MaxWeight is refused.
func TestCodecDecodePrefixFields(t *testing.T) {
	id := handofftest.ID(3)
	rs := &handoff.Reserve{Handoff: id, Tenant: "a", PromptTokens: 3, MaxTokens: 2, Tokens: []int32{7, 8, 9}, CacheScope: "prompt_cache_key:1:k;",
		Weight: 7, NoRevoke: true}
	got, err := decReserve(mustEnc(encReserve(rs)))
	if err != nil || !reflect.DeepEqual(got, rs) {
		t.Fatalf("reserve: %+v %v", got, err)
	}
	pages := []kv.PageRef{{Page: 1, Gen: 2}, {Page: 3, Gen: 4}, {Page: 5, Gen: 6}}
	res := &handoff.Reservation{Handoff: id, Pages: pages, PageSize: 4, ExpectTokens: 9, PrefixTokens: 8}
	var e enc
	encReservation(&e, res)
	if got, err := decReservation(e.b); err != nil || !reflect.DeepEqual(got, res) {
		t.Fatalf("reservation: %+v %v", got, err)
	}
	for _, bad := range []struct {
		name   string
		prefix int
		pages  []kv.PageRef
	}{
		{"not page aligned", 3, pages},
		{"the whole prompt", 9, pages},
		{"past the prompt", 12, pages},
		{"more pages than listed", 8, pages[:1]},
	} {
		var e enc
		encReservation(&e, &handoff.Reservation{Handoff: id, Pages: bad.pages, PageSize: 4, ExpectTokens: 9, PrefixTokens: bad.prefix})
		if _, err := decReservation(e.b); !errors.Is(err, handoff.ErrBadMessage) {
			t.Errorf("%s: %v", bad.name, err)
		}
	}
	var neg enc
	encReservation(&neg, &handoff.Reservation{Handoff: id, Pages: pages, PageSize: 4, ExpectTokens: 9, PrefixTokens: -4})
	if neg.err == nil {
		t.Error("a negative decode prefix was encoded")
	}
	for _, bad := range []*handoff.Reserve{
		{Handoff: id, PromptTokens: 4, MaxTokens: 1, Tokens: []int32{1, 2, 3}},
		{Handoff: id, PromptTokens: 1, MaxTokens: 1, Tokens: []int32{1}, CacheScope: string(make([]byte, handoff.MaxCacheScope+1))},
		{Handoff: id, PromptTokens: 1, MaxTokens: 1, Weight: handoff.MaxWeight + 1},
	} {
		if _, err := decReserve(mustEnc(encReserve(bad))); !errors.Is(err, handoff.ErrBadMessage) {
			t.Errorf("reserve with %d ids for %d tokens, %d-byte scope: %v", len(bad.Tokens), bad.PromptTokens, len(bad.CacheScope), err)
		}
	}
}
