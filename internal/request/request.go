// Package request is the life cycle of one generation request as a pure
// state machine (I1): events in, actions out, one terminal reason set once.
//
// Every queue in the engine admits a request by stepping its Machine; the
// actions that touch KV pages (reserve, prefill, decode) are emitted only by
// the transitions below, so a request that was rejected or cancelled can
// never reach reservation, prefill, transfer or decode. There is no
// "pending error" field beside the state and no placeholder prompt: the
// incident's rejected request looked alive because a flag beside the state
// said one thing and the queues read another.
//
//	Received -> Admitted -> Reserved -> Prefilling -> [Transferring] -> Committed -> Decoding -> Finished
//	   any non-terminal state -> Finished (reject / cancel / fail, see Step)
package request

import "fmt"

// State is where a request is in its life.
type State uint8

const (
	// Received: tokenized, not yet admitted.
	Received State = iota
	// Admitted: passed admission (capacity, I2); waiting for KV pages.
	Admitted
	// Reserved: decode pages are reserved for it (colocated: allocated).
	Reserved
	// Prefilling: the prompt's forward pass runs.
	Prefilling
	// Transferring: prefill is writing pages into the reservation (disaggregated only).
	Transferring
	// Committed: the KV is in place and verified (I5); the first token is known.
	Committed
	// Decoding: generating tokens.
	Decoding
	// Finished: terminal. Reason says why; nothing follows.
	Finished
)

var stateNames = [...]string{"received", "admitted", "reserved", "prefilling", "transferring", "committed", "decoding", "finished"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", s)
}

// Reason is the single terminal reason of a request. It is stable and
// machine-readable: metrics label, log field, error code source.
type Reason string

const (
	FinishedStop          Reason = "finished_stop"   // end-of-sequence token or stop sequence
	FinishedLength        Reason = "finished_length" // max_tokens reached
	RejectedContextLength Reason = "rejected_context_length"
	RejectedOverloaded    Reason = "rejected_overloaded"
	Cancelled             Reason = "cancelled"
)

// Failed is the reason of a request that failed with an error code, e.g.
// Failed("digest_mismatch") = "failed_digest_mismatch".
func Failed(code string) Reason { return Reason("failed_" + code) }

// Rejected reports whether r is an admission rejection.
func (r Reason) Rejected() bool { return r == RejectedContextLength || r == RejectedOverloaded }

// Mode selects the path: disaggregated requests go through a transfer,
// colocated ones never do.
type Mode uint8

const (
	Disaggregated Mode = iota
	Colocated
)

// EventKind is what happened to a request.
type EventKind uint8

const (
	EvAdmit           EventKind = iota // admission passed
	EvReject                           // admission refused; Reason is a Rejected* reason
	EvReserved                         // the KV pages are reserved
	EvPrefillStarted                   // the prompt's forward pass started
	EvTransferStarted                  // the first page write was sent (disaggregated)
	EvCommitted                        // KV in place and verified; Token is the first token, Tokens the prompt length
	EvToken                            // a decoded token
	EvFinish                           // generation ended; Reason is FinishedStop or FinishedLength
	EvCancel                           // the client went away
	EvFail                             // an error; Code says which
	EvPreempted                        // decode ran out of pages and released them; the request resumes with a new reservation
	EvRetry                            // the handoff failed before its commit (no token sent); the request tries again on other workers (as often as the engine's budget allows)
	EvRevoked                          // decode took the reservation back before its commit (the KV quota); the request waits for a new one, as after a preemption
	numEventKinds
)

var eventNames = [...]string{"admit", "reject", "reserved", "prefill_started", "transfer_started",
	"committed", "token", "finish", "cancel", "fail", "preempted", "retry", "revoked"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) {
		return eventNames[k]
	}
	return fmt.Sprintf("event(%d)", k)
}

// Event is one input to Step.
type Event struct {
	Kind   EventKind
	Reason Reason // EvReject, EvFinish
	Code   string // EvFail: stable error code
	Msg    string // EvReject, EvFail: a sentence for the user
	Token  int32  // EvCommitted (first token), EvToken
	Tokens int    // EvCommitted: prompt tokens prefilled and verified (I9)
}

// ActionKind is what the engine must do.
type ActionKind uint8

const (
	// ActReserve: reserve KV pages for the prompt. Emitted only on EvAdmit.
	ActReserve ActionKind = iota
	// ActPrefill: run the prompt (and, disaggregated, push its pages).
	// Emitted only on EvReserved.
	ActPrefill
	// ActEmit: send Token to the client.
	ActEmit
	// ActAbortHandoff: abort the handoff on both workers; pages go through
	// release or quarantine (I6). Emitted for failures before the commit.
	ActAbortHandoff
	// ActStopDecode: stop decoding between steps and release the pages the
	// normal way.
	ActStopDecode
	// ActEnd: send the terminal event: Reason (and Msg for errors).
	ActEnd
)

var actionNames = [...]string{"reserve", "prefill", "emit", "abort_handoff", "stop_decode", "end"}

func (k ActionKind) String() string {
	if int(k) < len(actionNames) {
		return actionNames[k]
	}
	return fmt.Sprintf("action(%d)", k)
}

// Action is one output of Step, to be carried out in order.
type Action struct {
	Kind   ActionKind
	Token  int32  // ActEmit
	Reason Reason // ActEnd
	Msg    string // ActEnd
}

// Error is an illegal transition: the event does not apply in the state.
// The machine is unchanged.
type Error struct {
	State State
	Event EventKind
	Msg   string
}

func (e *Error) Error() string {
	return fmt.Sprintf("request: illegal transition: %s in state %s: %s", e.Event, e.State, e.Msg)
}

// Code is the stable code of an illegal transition.
func (e *Error) Code() string { return "illegal_transition" }

// Machine is one request's life cycle. It is pure (no goroutines, clock or
// I/O) and not safe for concurrent use: the engine serialises its events.
type Machine struct {
	m       Mode
	state   State
	reason  Reason
	msg     string
	cancel  bool // client left during Reserved..Transferring; applied after the commit (I10)
	prompt  int  // verified prompt tokens (I9)
	emitted int  // completion tokens produced
	// resumed: preempted once at least; later commits rebuild KV of
	// tokens already counted, so they do not change prompt (I9).
	resumed bool
	// retried: a handoff of this request failed before its commit and it
	// reserves again; having started a prefill, it can fail but no longer
	// be rejected.
	retried bool
}

// New returns a machine in state Received.
func New(m Mode) *Machine { return &Machine{m: m} }

// State is the current state.
func (r *Machine) State() State { return r.state }

// Reason is the terminal reason; empty until Finished.
func (r *Machine) Reason() Reason { return r.reason }

// Message is the sentence that came with a rejection or failure.
func (r *Machine) Message() string { return r.msg }

// CancelPending reports a recorded disconnect not yet applied (I10).
func (r *Machine) CancelPending() bool { return r.cancel }

// Usage is the honest accounting (I9): prompt tokens that were prefilled
// and verified (0 if the request never got that far) and completion tokens
// produced.
func (r *Machine) Usage() (prompt, completion int) { return r.prompt, r.emitted }

// Live reports whether the request may still use KV pages or the client.
// Queues call it before handing a request on; it reads the one state, so a
// rejected request cannot look alive (I1).
func (r *Machine) Live() bool { return r.state != Finished }

func (r *Machine) illegal(ev Event, msg string) error {
	return &Error{State: r.state, Event: ev.Kind, Msg: msg}
}

// finish sets the terminal reason exactly once (I1).
func (r *Machine) finish(reason Reason, msg string) []Action {
	r.state = Finished
	r.reason = reason
	r.msg = msg
	r.cancel = false
	return []Action{{Kind: ActEnd, Reason: reason, Msg: msg}}
}

// Step applies one event and returns the actions to carry out, in order.
// An illegal event returns an *Error and changes nothing. Transitions:
//
//	Received     admit -> Admitted [reserve]; reject -> Finished
//	Admitted     reserved -> Reserved [prefill]; reject (overloaded) -> Finished
//	Reserved     prefill_started -> Prefilling
//	Prefilling   transfer_started -> Transferring (disaggregated only)
//	Prefilling, Transferring   committed -> Committed [emit first]
//	Committed, Decoding        token -> Decoding [emit]; finish -> Finished
//	cancel:  before Reserved -> Finished (nothing reserved);
//	         Reserved..Transferring -> recorded, state unchanged (I10),
//	         applied on committed: [stop_decode, end cancelled];
//	         Committed, Decoding -> [stop_decode] Finished;
//	         Finished -> no-op (a disconnect may race the end).
//	fail:    before Reserved -> Finished; Reserved..Transferring ->
//	         [abort_handoff] Finished; Committed, Decoding -> [stop_decode] Finished.
//	preempted: Committed, Decoding -> Admitted [reserve] (decode released
//	         the pages; the request waits for a new reservation, which
//	         rebuilds its KV from prompt + generated tokens; its next commit
//	         emits a new token but leaves the prompt count as it was);
//	         a resumed request's Reserved..Transferring -> [abort_handoff]
//	         Admitted [reserve] (its new handoff failed before the commit:
//	         it migrates again).
func (r *Machine) Step(ev Event) ([]Action, error) {
	s := r.state
	if s == Finished {
		if ev.Kind == EvCancel {
			return nil, nil
		}
		return nil, r.illegal(ev, "the request has finished ("+string(r.reason)+")")
	}
	switch ev.Kind {
	case EvAdmit:
		if s != Received {
			return nil, r.illegal(ev, "admission happens once, on a received request")
		}
		r.state = Admitted
		return []Action{{Kind: ActReserve}}, nil

	case EvReject:
		if !ev.Reason.Rejected() {
			return nil, r.illegal(ev, "reject needs a rejected_* reason, got "+string(ev.Reason))
		}
		switch {
		case s == Received:
		case s == Admitted && ev.Reason == RejectedOverloaded && !r.resumed && !r.retried:
			// A queue that cannot get pages in time rejects before any exist.
			// (A resumed request already sent tokens: it can only fail.)
		default:
			return nil, r.illegal(ev, "rejection is only possible before pages are reserved")
		}
		// I1: terminal, set once; no page was reserved and none ever will be.
		return r.finish(ev.Reason, ev.Msg), nil

	case EvReserved:
		if s != Admitted {
			return nil, r.illegal(ev, "only an admitted request may hold a reservation")
		}
		r.state = Reserved
		return []Action{{Kind: ActPrefill}}, nil

	case EvPrefillStarted:
		if s != Reserved {
			return nil, r.illegal(ev, "prefill starts only on a reserved request")
		}
		r.state = Prefilling
		return nil, nil

	case EvTransferStarted:
		if r.m != Disaggregated {
			return nil, r.illegal(ev, "a colocated request has no transfer")
		}
		if s != Prefilling {
			return nil, r.illegal(ev, "the transfer follows the prefill")
		}
		r.state = Transferring
		return nil, nil

	case EvCommitted:
		if s != Prefilling && s != Transferring {
			return nil, r.illegal(ev, "a commit ends a prefill or transfer")
		}
		if ev.Tokens <= 0 {
			return nil, r.illegal(ev, "a commit must report the prompt tokens it verified")
		}
		if !r.resumed {
			r.prompt = ev.Tokens
		}
		r.state = Committed
		if r.cancel {
			// I10: the transfer ran to its commit; only now does the
			// recorded disconnect take effect, through the normal release.
			return append([]Action{{Kind: ActStopDecode}}, r.finish(Cancelled, "the client disconnected")...), nil
		}
		r.emitted++
		return []Action{{Kind: ActEmit, Token: ev.Token}}, nil

	case EvToken:
		if s != Committed && s != Decoding {
			return nil, r.illegal(ev, "tokens are decoded only after the commit")
		}
		r.state = Decoding
		r.emitted++
		return []Action{{Kind: ActEmit, Token: ev.Token}}, nil

	case EvFinish:
		if ev.Reason != FinishedStop && ev.Reason != FinishedLength {
			return nil, r.illegal(ev, "finish needs finished_stop or finished_length, got "+string(ev.Reason))
		}
		if s != Committed && s != Decoding {
			return nil, r.illegal(ev, "only a decoding request can finish generating")
		}
		return append([]Action{{Kind: ActStopDecode}}, r.finish(ev.Reason, "")...), nil

	case EvCancel:
		switch s {
		case Received, Admitted:
			return r.finish(Cancelled, "the client disconnected"), nil
		case Reserved, Prefilling, Transferring:
			// I10: never tear a transfer; record and apply after the commit.
			r.cancel = true
			return nil, nil
		default: // Committed, Decoding
			return append([]Action{{Kind: ActStopDecode}}, r.finish(Cancelled, "the client disconnected")...), nil
		}

	case EvPreempted:
		if r.resumed && (s == Reserved || s == Prefilling || s == Transferring) {
			// A resumed request (it already sent tokens) whose new handoff
			// failed before its commit by transport (its new worker died
			// too) moves once more: that handoff is aborted (I6) and it
			// waits for another reservation, as after a preemption. The
			// engine bounds how often (--max-migrations). A disconnect
			// recorded meanwhile (I10) ends it instead.
			if r.cancel {
				return append([]Action{{Kind: ActAbortHandoff}}, r.finish(Cancelled, "the client disconnected")...), nil
			}
			r.state = Admitted
			return []Action{{Kind: ActAbortHandoff}, {Kind: ActReserve}}, nil
		}
		if s != Committed && s != Decoding {
			return nil, r.illegal(ev, "only a decoding request, or a resumed one whose handoff has not committed, can be preempted")
		}
		r.resumed = true
		r.state = Admitted
		return []Action{{Kind: ActReserve}}, nil

	case EvRetry:
		// Nothing reached the client yet: the failed handoff is aborted
		// (I6) and the request goes back to reserve on other workers.
		if s != Reserved && s != Prefilling && s != Transferring {
			return nil, r.illegal(ev, "only a request whose handoff has not committed can be retried")
		}
		if r.resumed {
			return nil, r.illegal(ev, "a resumed request already sent tokens: it can only fail")
		}
		if r.cancel {
			return append([]Action{{Kind: ActAbortHandoff}}, r.finish(Cancelled, "the client disconnected")...), nil
		}
		r.state = Admitted
		r.retried = true
		return []Action{{Kind: ActAbortHandoff}, {Kind: ActReserve}}, nil

	case EvRevoked:
		// Decode took the reservation back before the commit for its
		// tenant's KV share (handoff.ErrRevoked): not a failure, and no
		// retry of the engine's budget, but a preemption before the
		// commit (the engine bounds how often, handoff.MaxRevocations).
		// The handoff is aborted (I6: decode already fenced it; the
		// abort is the router's side of it) and the request waits for a
		// new reservation; a resumed request keeps its tokens. A
		// disconnect recorded meanwhile (I10) ends it instead.
		if s != Reserved && s != Prefilling && s != Transferring {
			return nil, r.illegal(ev, "only a request whose handoff has not committed can have its reservation revoked")
		}
		if r.cancel {
			return append([]Action{{Kind: ActAbortHandoff}}, r.finish(Cancelled, "the client disconnected")...), nil
		}
		r.state = Admitted
		r.retried = true
		return []Action{{Kind: ActAbortHandoff}, {Kind: ActReserve}}, nil

	case EvFail:
		if ev.Code == "" {
			return nil, r.illegal(ev, "a failure needs an error code")
		}
		reason := Failed(ev.Code)
		switch s {
		case Received, Admitted:
			return r.finish(reason, ev.Msg), nil
		case Reserved, Prefilling, Transferring:
			// I8: fail closed; the handoff's pages are released or quarantined.
			return append([]Action{{Kind: ActAbortHandoff}}, r.finish(reason, ev.Msg)...), nil
		default:
			return append([]Action{{Kind: ActStopDecode}}, r.finish(reason, ev.Msg)...), nil
		}
	}
	return nil, r.illegal(ev, "unknown event")
}
