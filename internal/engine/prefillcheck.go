package engine

import (
	"sluice/internal/handoff"
	"sluice/internal/model"
)

// PrefillLimits is what a prefill worker checks a Prefill call against
// before the call queues: its model (I13), page size, context and
// vocabulary.
type PrefillLimits struct {
	Model    model.Fingerprint
	PageSize int
	Context  int
	Vocab    int
}

// CheckPrefill is the prefill worker's checks of a Prefill call before it
// queues for pages, pure so that the simulator's prefill worker runs the
// same ones (internal/sim): both peers' models are the worker's (I13),
// the reservation is this handoff's and fits the prompt, the decode
// worker's prefix claim is whole pages inside the prompt, the prompt fits
// the context, and the sampler's offset and settings are in their domain
// (a peer is not trusted with them: each draw of an offset is work).
// abort says the refusal must also abort the handoff's decode
// reservation (the reservation is this call's); a call without one, or
// naming another handoff's, is refused alone.
func CheckPrefill(l PrefillLimits, r *handoff.PrefillRequest) (abort bool, err error) {
	res := r.Reservation
	if res != nil && res.Handoff == r.Handoff {
		// I13: the prompt was tokenized for the router's model and the KV
		// goes to the decode worker's; both must be this worker's model.
		if err := handoff.CheckModel(l.Model, r.Model, "the router"); err != nil {
			return true, err
		}
		if err := handoff.CheckModel(l.Model, res.Model, "the decode worker that reserved the pages"); err != nil {
			return true, err
		}
	}
	switch {
	case res == nil:
		return false, handoff.ErrState.With("prefill without a reservation")
	case res.Handoff != r.Handoff:
		return false, handoff.ErrState.With("reservation is for another handoff")
	case res.PageSize != l.PageSize:
		return true, handoff.ErrState.With("decode page size %d differs from prefill page size %d", res.PageSize, l.PageSize)
	case len(r.Tokens) == 0 || len(r.Tokens) != res.ExpectTokens:
		return true, handoff.ErrCountMismatch.With("prompt has %d tokens, reservation expects %d", len(r.Tokens), res.ExpectTokens)
	case res.CheckPrefix() != nil:
		// decode_prefix_len is a peer's claim: refused before any work
		// when it is not whole pages strictly inside the prompt.
		return true, res.CheckPrefix()
	case len(r.Tokens) > l.Context:
		return true, handoff.ErrPrefillRefused.With("prompt of %d tokens exceeds the prefill context %d", len(r.Tokens), l.Context)
	case r.SampleOffset < 0 || r.SampleOffset >= len(r.Tokens):
		// The draws already used are the tokens generated before, all
		// part of this prompt; a larger offset (each draw is work) is
		// refused rather than spun through.
		return true, handoff.ErrPrefillRefused.With("sampler offset %d with a prompt of %d tokens", r.SampleOffset, len(r.Tokens))
	}
	if err := r.Sampling.Validate(l.Vocab); err != nil {
		return true, handoff.ErrPrefillRefused.With("sampling settings: %v", err)
	}
	return false, nil
}
