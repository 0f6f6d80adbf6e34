package tcp

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
)

// fullTiming sets every duration of a first token's Timing, each its own.
func fullTiming() *handoff.Timing {
	return &handoff.Timing{PrefillQueue: 1500 * time.Microsecond, PrefillWait: 2 * time.Millisecond, PrefillCompute: 7*time.Millisecond + 3,
		Push: 900 * time.Microsecond, DecodeWait: 40 * time.Microsecond}
}

// The first token's Timing (version 16) crosses the codec intact on the
// commit (prefill -> decode) and on the first token (decode -> router),
// and nil stays nil (every later token, a resumed handoff's commit).
func TestCodecCarriesTiming(t *testing.T) {
	id := handofftest.ID(9)
	c := &handoff.Commit{Handoff: id, Tokens: 3, Digest: []byte{1}, FirstToken: 4, FirstLogprobs: fullLogprobs(), Timing: fullTiming()}
	if gc, err := decCommit(mustEnc(encCommit(c))); err != nil || !reflect.DeepEqual(gc, c) {
		t.Fatalf("commit: %+v %v, want %+v", gc, err, c)
	}
	tok := handoff.Token{ID: 5, Logprobs: fullLogprobs(), Timing: fullTiming()}
	if gtok, err := decToken(mustEnc(encToken(tok))); err != nil || !reflect.DeepEqual(gtok, tok) {
		t.Fatalf("token: %+v %v, want %+v", gtok, err, tok)
	}
	for _, tok := range []handoff.Token{{ID: 6}, {Done: true, Finish: "stop"}} {
		if gtok, err := decToken(mustEnc(encToken(tok))); err != nil || gtok.Timing != nil {
			t.Fatalf("token without timing: %+v %v", gtok, err)
		}
	}
	c.Timing = nil
	if gc, err := decCommit(mustEnc(encCommit(c))); err != nil || gc.Timing != nil {
		t.Fatalf("commit without timing: %+v %v", gc, err)
	}
}

// A worker's figures are bounded: the encoder cuts a duration outside
// [0, MaxTiming] to the bound (a timing never fails a commit or a token),
// and the decoder refuses one past the bound as a bad message on that call
// (a peer that sends it is not this build's encoder).
func TestCodecBoundsTiming(t *testing.T) {
	id := handofftest.ID(10)
	wild := &handoff.Timing{PrefillQueue: -time.Second, PrefillWait: handoff.MaxTiming + 1, PrefillCompute: time.Millisecond, Push: 1 << 62, DecodeWait: -1}
	gc, err := decCommit(mustEnc(encCommit(&handoff.Commit{Handoff: id, Tokens: 1, Digest: []byte{1}, Timing: wild})))
	want := handoff.Timing{PrefillWait: handoff.MaxTiming, PrefillCompute: time.Millisecond, Push: handoff.MaxTiming}
	if err != nil || gc.Timing == nil || *gc.Timing != want {
		t.Fatalf("commit with out-of-range timing: %+v %v, want %+v", gc.Timing, err, want)
	}
	// Each duration of a token's timing, one past the bound on the wire.
	body := mustEnc(encToken(handoff.Token{ID: 1, Timing: fullTiming()}))
	for i := range 5 {
		b := append([]byte(nil), body...)
		off := len(b) - 8*(5-i)
		binary.BigEndian.PutUint64(b[off:], uint64(handoff.MaxTiming)+1)
		if _, err := decToken(b); !errors.Is(err, handoff.ErrBadMessage) {
			t.Fatalf("duration %d past the bound decoded: %v", i, err)
		}
		binary.BigEndian.PutUint64(b[off:], uint64(handoff.MaxTiming))
		if got, err := decToken(b); err != nil || got.Timing == nil {
			t.Fatalf("duration %d at the bound refused: %v", i, err)
		}
	}
	// A presence byte other than 0 or 1, and a cut timing.
	b := append([]byte(nil), body...)
	b[len(b)-41] = 2
	if _, err := decToken(b); !errors.Is(err, handoff.ErrBadMessage) {
		t.Fatalf("timing presence 2 decoded: %v", err)
	}
	if _, err := decToken(body[:len(body)-3]); !errors.Is(err, handoff.ErrBadMessage) {
		t.Fatalf("cut timing decoded: %v", err)
	}
}
