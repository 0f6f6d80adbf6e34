package engine

import (
	"sluice/internal/handoff"
)

// receiverSafeguards maps the engine's test hooks onto the protocol core's.
func receiverSafeguards(u Unsafe) handoff.Safeguards {
	return handoff.Safeguards{
		NoCount:            u.NoCountCheck,
		NoCoverage:         u.NoCountCheck,
		NoDigest:           u.NoDigest,
		NoChecksum:         u.NoDigest,
		NoReservationMatch: u.NoOwnerCheck,
	}
}
