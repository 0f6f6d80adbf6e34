package handoff

// Registrar is a Decode that must be told a handoff's Reservation before
// it carries writes for it: a one-sided transport places bytes only inside
// the reservation it was given (shm.Writer, as an RDMA memory key scopes a
// peer to a registered region, I3). Push registers the Sender's
// reservation before the first write, finding the Registrar by a type
// assertion: a Decode wrapper around one must forward Register.
type Registrar interface {
	Register(res *Reservation) error
}

// Reservation is the reservation the Sender writes into.
func (s *Sender) Reservation() *Reservation { return s.res }
