package engine

import (
	"errors"
	"testing"

	"sluice/internal/handoff"
	"sluice/internal/kv"
	"sluice/internal/model"
)

// CheckPrefill refuses each malformed call with its code, and says whether
// the handoff's reservation is aborted with it (not when the call has no
// reservation of its own); a call at every bound passes.
func TestCheckPrefill(t *testing.T) {
	mine := model.Fingerprint{Name: "m", Sum: [16]byte{1}}
	other := model.Fingerprint{Name: "m", Sum: [16]byte{2}}
	l := PrefillLimits{Model: mine, PageSize: 4, Context: 16, Vocab: 32}
	id, id2 := kv.ID{1}, kv.ID{2}
	good := func() *handoff.PrefillRequest {
		return &handoff.PrefillRequest{Handoff: id, Tenant: "a", Tokens: make([]int32, 16), Model: mine, SampleOffset: 15,
			Reservation: &handoff.Reservation{Handoff: id, PageSize: 4, ExpectTokens: 16, Model: mine, Pages: make([]kv.PageRef, 4), PrefixTokens: 12}}
	}
	if abort, err := CheckPrefill(l, good()); err != nil || abort {
		t.Fatalf("a call at every bound: abort %v, %v", abort, err)
	}
	for _, c := range []struct {
		name  string
		edit  func(r *handoff.PrefillRequest)
		want  *handoff.Error
		abort bool
	}{
		{"router's model", func(r *handoff.PrefillRequest) { r.Model = other }, handoff.ErrModelMismatch, true},
		{"decode's model", func(r *handoff.PrefillRequest) { r.Reservation.Model = other }, handoff.ErrModelMismatch, true},
		{"no reservation", func(r *handoff.PrefillRequest) { r.Reservation = nil }, handoff.ErrState, false},
		{"another handoff's reservation", func(r *handoff.PrefillRequest) { r.Reservation.Handoff = id2; r.Reservation.Model = other }, handoff.ErrState, false},
		{"page size", func(r *handoff.PrefillRequest) { r.Reservation.PageSize = 8 }, handoff.ErrState, true},
		{"count", func(r *handoff.PrefillRequest) { r.Reservation.ExpectTokens = 15 }, handoff.ErrCountMismatch, true},
		{"empty prompt", func(r *handoff.PrefillRequest) { r.Tokens, r.Reservation.ExpectTokens = nil, 0 }, handoff.ErrCountMismatch, true},
		{"prefix not whole pages", func(r *handoff.PrefillRequest) { r.Reservation.PrefixTokens = 6 }, handoff.ErrBadMessage, true},
		{"prefix the whole prompt", func(r *handoff.PrefillRequest) { r.Reservation.PrefixTokens = 16 }, handoff.ErrBadMessage, true},
		{"over the context", func(r *handoff.PrefillRequest) {
			r.Tokens, r.Reservation.ExpectTokens, r.Reservation.Pages = make([]int32, 17), 17, make([]kv.PageRef, 5)
		}, handoff.ErrPrefillRefused, true},
		{"offset at the prompt's end", func(r *handoff.PrefillRequest) { r.SampleOffset = 16 }, handoff.ErrPrefillRefused, true},
		{"negative offset", func(r *handoff.PrefillRequest) { r.SampleOffset = -1 }, handoff.ErrPrefillRefused, true},
		{"top_k over the vocabulary", func(r *handoff.PrefillRequest) { r.Sampling.TopK = 33 }, handoff.ErrPrefillRefused, true},
	} {
		r := good()
		c.edit(r)
		abort, err := CheckPrefill(l, r)
		var we *handoff.Error
		if !errors.As(err, &we) || we.Code != c.want.Code || abort != c.abort {
			t.Errorf("%s: abort %v, %v; want %s, abort %v", c.name, abort, err, c.want.Code, c.abort)
		}
	}
}
