package handoff

import (
	"errors"
	"fmt"

	"sluice/internal/kv"
	"sluice/internal/model"
)

// Code is a stable machine-readable error code; it crosses transports as a
// string and metrics use it as a label.
type Code string

// Error is a handoff failure. Errors compare by Code under errors.Is, so an
// error rebuilt from the wire matches the sentinel it was created from.
type Error struct {
	Code Code
	// Msg is a sentence a user or operator can act on.
	Msg string
}

func (e *Error) Error() string { return "handoff " + string(e.Code) + ": " + e.Msg }

// Is matches any *Error with the same Code; ErrNoRoom and ErrDraining
// also match ErrRefused, since having no free pages and shutting down are
// reasons to refuse, and ErrOverShare matches both ErrNoRoom and
// ErrRefused (it is a "not now" for one tenant).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	if e.Code == ErrOverShare.Code && (t.Code == ErrNoRoom.Code || t.Code == ErrRefused.Code) {
		return true
	}
	return t.Code == e.Code || (t.Code == ErrRefused.Code && (e.Code == ErrNoRoom.Code || e.Code == ErrDraining.Code))
}

// With returns a copy of the sentinel with a more specific message.
func (e *Error) With(format string, args ...any) *Error {
	return &Error{Code: e.Code, Msg: e.Msg + ": " + fmt.Sprintf(format, args...)}
}

// The sentinels. Match with errors.Is(err, handoff.ErrCountMismatch).
var (
	// ErrCountMismatch: the commit's token count differs from what was
	// reserved, or from what was actually written (I5).
	ErrCountMismatch = &Error{"count_mismatch", "tokens written, reserved and committed differ"}
	// ErrCoverage: a reserved page was not written, or written twice (I5).
	ErrCoverage = &Error{"coverage", "reserved pages were not each written exactly once"}
	// ErrDigestMismatch: the commit's digest differs from the receiver's digest of what it received (I5).
	ErrDigestMismatch = &Error{"digest_mismatch", "the KV digest does not match what the decode worker received"}
	// ErrDigestMissing: the commit carried no digest; a missing digest is a failure (I5).
	ErrDigestMissing = &Error{"digest_missing", "the commit carried no digest"}
	// ErrUnknownHandoff: no live handoff has this id (never reserved, or already ended).
	ErrUnknownHandoff = &Error{"unknown_handoff", "no live handoff has this id"}
	// ErrAuth: the peer failed authentication (I12).
	ErrAuth = &Error{"auth", "peer authentication failed"}
	// ErrBadWrite: a page write does not match the reservation (block, page,
	// generation, slot count) or the pool refused it (owner, state) (I3).
	ErrBadWrite = &Error{"bad_write", "page write does not match the reservation"}
	// ErrSealedWrite: a write (or one-sided notice) named a block of the
	// decode worker's cached prefix (Reservation.PrefixTokens): shared and
	// read-only; a prefill that ignores the prefix is refused.
	ErrSealedWrite = &Error{"sealed_write", "a page write named a block the decode worker holds in its prefix cache, which is read-only"}
	// ErrChecksum: the page bytes do not match the write's checksum.
	ErrChecksum = &Error{"checksum", "page bytes do not match their checksum"}
	// ErrState: the message is not legal in the handoff's current phase
	// (e.g. a write after the commit).
	ErrState = &Error{"bad_state", "message not legal in the handoff's current phase"}
	// ErrAborted: the handoff was aborted.
	ErrAborted = &Error{"aborted", "the handoff was aborted"}
	// ErrRefused: the decode worker refused the reservation (capacity, limits).
	ErrRefused = &Error{"refused", "the decode worker refused the reservation"}
	// ErrPrefillRefused: the prefill worker refused the prompt (longer
	// than its context, its queue full or timed out, settings it does
	// not accept). Distinct from ErrRefused so that every refusal names
	// the role that refused.
	ErrPrefillRefused = &Error{"prefill_refused", "the prefill worker refused the prompt"}
	// ErrNoRoom: the decode worker refused the reservation because its KV
	// pool has no free pages for it now, though it could hold it when
	// empty (back-pressure: the router's queue waits and tries again; never
	// an integrity failure). errors.Is(err, ErrRefused) holds for it too.
	ErrNoRoom = &Error{"no_room", "the decode worker has no free KV pages for the reservation"}
	// ErrOverShare: a reservation refused for now because its tenant
	// would hold more than its share of the decode worker's KV pages
	// while another tenant holds pages or waits for some (the KV quota,
	// docs/isolation.md). Unlike ErrNoRoom it holds back only that
	// tenant: the router's queue passes over it and admits the others.
	// errors.Is(err, ErrNoRoom) and errors.Is(err, ErrRefused) hold for
	// it too (in this build: matching happens in the receiver's code, so
	// a router of an older build, which does not know the code, fails
	// the request instead of waiting: upgrade routers first).
	ErrOverShare = &Error{"over_share", "the tenant holds its share of the decode worker's KV pages while another tenant waits"}
	// ErrRevoked: the decode worker took a reservation back before its
	// commit because its tenant held more than its share of the pool's
	// pages while another tenant waited within its own (the KV quota,
	// docs/isolation.md). The pages go through the abort path (fenced by
	// generation, released or quarantined, I6). Not a failure of the
	// request: the router puts it back in the queue as a preemption
	// before its first token (at most MaxRevocations times, then its
	// Reserve says NoRevoke).
	ErrRevoked = &Error{"revoked", "the decode worker took the reservation back before its commit, for a tenant waiting within its KV share; the request waits for another"}
	// ErrDraining: the worker got SIGTERM and takes no new reservation
	// while the ones it holds finish; nothing was reserved, so another
	// worker can take the request at once. Its load report answers the
	// same, so routers stop picking it. errors.Is(err, ErrRefused) holds
	// for it too.
	ErrDraining = &Error{"draining", "the worker is shutting down and takes no new request; another worker can"}
	// ErrDuplicate: a handoff with this id already exists.
	ErrDuplicate = &Error{"duplicate_handoff", "a handoff with this id already exists"}
	// ErrProtocol: a malformed frame on a transport (framing, checksum,
	// an unexpected frame type); the connection is closed.
	ErrProtocol = &Error{"protocol", "malformed or unexpected frame"}
	// ErrBadMessage: one call's message could not be encoded or decoded (a
	// field outside what the wire carries, a malformed body inside an intact
	// frame). Only that call fails: the connection, which other tenants'
	// calls share, stays up.
	ErrBadMessage = &Error{"bad_message", "a message field is out of range or malformed; only this call is refused"}
	// ErrVersion: the peers speak no common protocol version (builds of
	// different wire formats); refused at the handshake, before any call.
	ErrVersion = &Error{"protocol_version", "the peers speak different protocol versions"}
	// ErrTransport: the transport failed (connection lost, timeout). Whether
	// the remote side applied the call is UNKNOWN; callers must abort.
	ErrTransport = &Error{"transport", "transport failure; the remote outcome is unknown"}
	// ErrModelMismatch: the peers run different models (I13): a connection
	// or a message names a model fingerprint that is not the receiver's.
	// The message names both models and both fingerprints.
	ErrModelMismatch = &Error{"model_mismatch", "the roles run different models (I13)"}
	// ErrKVTypeMismatch: two roles that hold KV store its pages as
	// different element types (--kv-type f16 vs f32): a prefill worker's
	// pages would not be the decode worker's pages, byte for byte.
	ErrKVTypeMismatch = &Error{"kv_type_mismatch", "the roles store KV pages of different types (--kv-type)"}
	// ErrInternal: anything else from the remote side.
	ErrInternal = &Error{"internal", "internal error"}
)

// FromWire rebuilds an error from its code and message as sent by a peer.
// Unknown codes keep their code (errors.Is still works against an *Error
// with the same code) and are otherwise treated as internal.
func FromWire(code, msg string) error {
	if code == "" {
		return nil
	}
	return &Error{Code: Code(code), Msg: msg}
}

// ToWire splits an error into a code and message for a peer. Errors that are
// not *Error travel as internal with their text.
func ToWire(err error) (code, msg string) {
	if err == nil {
		return "", ""
	}
	if e, ok := err.(*Error); ok {
		return string(e.Code), e.Msg
	}
	var he *Error
	if errors.As(err, &he) {
		return string(he.Code), err.Error()
	}
	var v *kv.Violation
	if errors.As(err, &v) {
		return "kv_" + string(v.Kind), err.Error()
	}
	return string(ErrInternal.Code), err.Error()
}

// CheckKVType is nil when a peer that holds KV stores it as mine does;
// otherwise ErrKVTypeMismatch naming both. what says who the peer is.
func CheckKVType(mine, peer kv.Type, what string) error {
	if mine == peer {
		return nil
	}
	return ErrKVTypeMismatch.With("this role's KV pages are %v, %s's are %v; start every role with the same --kv-type", mine, what, peer)
}

// CheckModel is nil when peer, the fingerprint a peer's connection or
// message names, is mine; otherwise ErrModelMismatch naming both (I13).
// what says who the peer is ("the router", "the decode reservation").
func CheckModel(mine, peer model.Fingerprint, what string) error {
	if mine.Same(peer) {
		return nil
	}
	return ErrModelMismatch.With("this role runs %v, %s runs %v; start every role with the same model file", mine, what, peer)
}
