package node

import "sluice/internal/handoff"

// Register forwards a reservation to a one-sided writer under the meter
// (shm.Writer places bytes only inside reservations it was given, I3).
func (d metered) Register(res *handoff.Reservation) error {
	if r, ok := d.Decode.(handoff.Registrar); ok {
		return r.Register(res)
	}
	return nil
}

var _ handoff.Registrar = metered{}
