package handoff

import (
	"errors"
	"testing"
)

// A pool with no room refuses with ErrNoRoom (still a refusal to every
// caller that checks ErrRefused), counted apart from other refusals, so
// metrics and the engine can tell back-pressure from a bad request; the
// code survives the wire.
func TestNoRoomIsARefusal(t *testing.T) {
	g := newRig(t, ReceiverConfig{}, 10)
	// The rig's handoff holds 4 of the 32 pages; take the rest.
	if _, err := g.r.Reserve(t0, &Reserve{Handoff: hid(2), Tenant: "acme", PromptTokens: 28 * tPS}); err != nil {
		t.Fatal(err)
	}
	_, err := g.r.Reserve(t0, &Reserve{Handoff: hid(3), Tenant: "acme", PromptTokens: 10})
	if !errors.Is(err, ErrNoRoom) || !errors.Is(err, ErrRefused) {
		t.Fatalf("full pool: %v, want no_room (a refusal)", err)
	}
	_, err = g.r.Reserve(t0, &Reserve{Handoff: hid(4), Tenant: "acme", PromptTokens: 0})
	if !errors.Is(err, ErrRefused) || errors.Is(err, ErrNoRoom) {
		t.Fatalf("empty prompt: %v, want a refusal that is not no_room", err)
	}
	// More than the whole pool can never fit: refused for good, so the
	// router does not queue it.
	_, err = g.r.Reserve(t0, &Reserve{Handoff: hid(5), Tenant: "acme", PromptTokens: 1000})
	if !errors.Is(err, ErrRefused) || errors.Is(err, ErrNoRoom) {
		t.Fatalf("larger than the pool: %v, want a refusal that is not no_room", err)
	}
	if st := g.r.Stats(); st.Failed[ErrNoRoom.Code] != 1 || st.Failed[ErrRefused.Code] != 2 {
		t.Fatalf("counters %v", st.Failed)
	}
	code, msg := ToWire(ErrNoRoom.With("x"))
	if back := FromWire(code, msg); !errors.Is(back, ErrNoRoom) || !errors.Is(back, ErrRefused) {
		t.Fatalf("over the wire: %v", back)
	}
	if errors.Is(ErrRefused, ErrNoRoom) {
		t.Fatal("every refusal matches no_room")
	}
}
