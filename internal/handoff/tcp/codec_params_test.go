package tcp

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
	"sluice/internal/kv"
	"sluice/internal/sample"
)

// fullSampling sets every sampling field to a value other than its zero.
func fullSampling() sample.Params {
	return sample.Params{Temperature: 0.7, TopK: 40, TopP: 0.9, Seed: 1<<63 + 5, MinP: 0.05,
		PresencePenalty: -1.5, FrequencyPenalty: 2, RepetitionPenalty: 1.3,
		LogitBias: []sample.Bias{{ID: 3, Bias: -100}, {ID: 70000, Bias: 42.5}},
		Logprobs:  true, TopLogprobs: 20,
		Format: sample.Format{Kind: sample.FormatJSONSchema, Schema: `{"type":"object"}`, Think: true, ThinkOpen: 151667, ThinkClose: 151668}}
}

func fullLogprobs() *sample.Logprobs {
	l := &sample.Logprobs{Logprob: -0.25}
	for i := range sample.MaxTopLogprobs {
		l.Top = append(l.Top, sample.TokenLogprob{ID: int32(1000 + i), Logprob: -float32(i)})
	}
	return l
}

// Every sampling option, the prompt ids of the repetition penalty and the
// logprobs of each token cross the codec intact.
func TestCodecCarriesSamplingAndLogprobs(t *testing.T) {
	id := handofftest.ID(7)
	sp := handoff.StreamParams{Sampling: fullSampling(), IgnoreEOS: true, Prompt: []int32{1, 2, 300000}}
	gid, got, err := decStreamOpen(mustEnc(encStreamOpen(id, sp)))
	if err != nil || gid != id || !reflect.DeepEqual(got, sp) {
		t.Fatalf("stream open: %+v %v\nwant %+v", got, err, sp)
	}
	pr := &handoff.PrefillRequest{Handoff: id, Tenant: "a", Tokens: []int32{5}, Reservation: &handoff.Reservation{Pages: []kv.PageRef{{Page: 1}}}, Sampling: fullSampling(), Weight: 7}
	gpr, err := decPrefill(mustEnc(encPrefill(pr)))
	if err != nil || !reflect.DeepEqual(gpr, pr) {
		t.Fatalf("prefill: %+v %v", gpr, err)
	}
	tok := handoff.Token{ID: 9, Logprobs: fullLogprobs()}
	gtok, err := decToken(mustEnc(encToken(tok)))
	if err != nil || !reflect.DeepEqual(gtok, tok) {
		t.Fatalf("token: %+v %v", gtok, err)
	}
	c := &handoff.Commit{Handoff: id, Tokens: 3, Digest: []byte{1}, FirstToken: 4, FirstLogprobs: &sample.Logprobs{Logprob: -3}}
	gc, err := decCommit(mustEnc(encCommit(c)))
	if err != nil || !reflect.DeepEqual(gc, c) {
		t.Fatalf("commit: %+v %v", gc, err)
	}
	// Without logprobs nothing is carried (and nil stays nil).
	gtok, err = decToken(mustEnc(encToken(handoff.Token{ID: 2})))
	if err != nil || gtok.Logprobs != nil {
		t.Fatalf("token without logprobs: %+v %v", gtok, err)
	}
}

// Counts and values beyond the bounds are refused by the encoder, on that
// call alone (bad_message), and the bytes it would have sent are refused
// by the decoder the same way: never an allocation, never a torn
// connection.
func TestCodecBoundsSamplingAndLogprobs(t *testing.T) {
	id := handofftest.ID(8)
	many := handoff.StreamParams{Sampling: sample.Params{LogitBias: make([]sample.Bias, sample.MaxLogitBias+1)}}
	if _, _, err := decStreamOpen(refused(t)(encStreamOpen(id, many))); !errors.Is(err, handoff.ErrBadMessage) {
		t.Fatalf("%d bias entries decoded: %v", sample.MaxLogitBias+1, err)
	}
	top := handoff.StreamParams{Sampling: sample.Params{Logprobs: true, TopLogprobs: sample.MaxTopLogprobs + 1}}
	if _, _, err := decStreamOpen(refused(t)(encStreamOpen(id, top))); !errors.Is(err, handoff.ErrBadMessage) {
		t.Fatalf("top logprobs %d decoded: %v", sample.MaxTopLogprobs+1, err)
	}
	l := fullLogprobs()
	l.Top = append(l.Top, sample.TokenLogprob{})
	if _, err := decToken(refused(t)(encToken(handoff.Token{Logprobs: l}))); !errors.Is(err, handoff.ErrBadMessage) {
		t.Fatalf("%d top logprobs decoded: %v", len(l.Top), err)
	}
	// Logprobs a client's JSON cannot carry are refused.
	for _, v := range []float32{float32(math.NaN()), 0.5, float32(math.Inf(-1)), sample.LogprobFloor - 1} {
		if _, err := decToken(refused(t)(encToken(handoff.Token{Logprobs: &sample.Logprobs{Logprob: v}}))); !errors.Is(err, handoff.ErrBadMessage) {
			t.Fatalf("logprob %v decoded: %v", v, err)
		}
		bad := &sample.Logprobs{Top: []sample.TokenLogprob{{ID: 1, Logprob: v}}}
		if _, err := decCommit(refused(t)(encCommit(&handoff.Commit{FirstLogprobs: bad}))); !errors.Is(err, handoff.ErrBadMessage) {
			t.Fatalf("top logprob %v decoded: %v", v, err)
		}
	}
	// A prompt list longer than the frame is refused before allocating.
	b := mustEnc(encStreamOpen(id, handoff.StreamParams{}))
	b[len(b)-1] = 0xff
	if _, _, err := decStreamOpen(b); !errors.Is(err, handoff.ErrBadMessage) {
		t.Fatalf("oversized prompt count decoded: %v", err)
	}
}

// refused checks an encoder refused its message as a bad message and
// returns the bytes it wrote anyway, for the decoder.
func refused(t *testing.T) func([]byte, error) []byte {
	return func(b []byte, err error) []byte {
		t.Helper()
		if !errors.Is(err, handoff.ErrBadMessage) {
			t.Fatalf("the encoder accepted a message the decoder refuses: %v", err)
		}
		return b
	}
}
