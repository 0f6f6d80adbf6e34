package request

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// paths reach each state by legal events.
var paths = map[State][]Event{
	Received:     {},
	Admitted:     {{Kind: EvAdmit}},
	Reserved:     {{Kind: EvAdmit}, {Kind: EvReserved}},
	Prefilling:   {{Kind: EvAdmit}, {Kind: EvReserved}, {Kind: EvPrefillStarted}},
	Transferring: {{Kind: EvAdmit}, {Kind: EvReserved}, {Kind: EvPrefillStarted}, {Kind: EvTransferStarted}},
	Committed:    {{Kind: EvAdmit}, {Kind: EvReserved}, {Kind: EvPrefillStarted}, {Kind: EvCommitted, Token: 5, Tokens: 9}},
	Decoding:     {{Kind: EvAdmit}, {Kind: EvReserved}, {Kind: EvPrefillStarted}, {Kind: EvCommitted, Token: 5, Tokens: 9}, {Kind: EvToken, Token: 6}},
	Finished:     {{Kind: EvReject, Reason: RejectedContextLength, Msg: "too long"}},
}

// sample is a well-formed event of each kind.
var sample = map[EventKind]Event{
	EvAdmit:           {Kind: EvAdmit},
	EvReject:          {Kind: EvReject, Reason: RejectedOverloaded, Msg: "busy"},
	EvReserved:        {Kind: EvReserved},
	EvPrefillStarted:  {Kind: EvPrefillStarted},
	EvTransferStarted: {Kind: EvTransferStarted},
	EvCommitted:       {Kind: EvCommitted, Token: 7, Tokens: 9},
	EvToken:           {Kind: EvToken, Token: 8},
	EvFinish:          {Kind: EvFinish, Reason: FinishedLength},
	EvCancel:          {Kind: EvCancel},
	EvFail:            {Kind: EvFail, Code: "digest_mismatch", Msg: "bad digest"},
	EvPreempted:       {Kind: EvPreempted},
	EvRetry:           {Kind: EvRetry},
	EvRevoked:         {Kind: EvRevoked},
}

type want struct {
	state   State
	actions []ActionKind
	reason  Reason
}

const illegal = "illegal"

// table is the whole transition function for a disaggregated request,
// written out by hand from DESIGN.md's life cycle and I1/I10: any pair not
// listed must be an illegal transition that changes nothing.
var table = map[State]map[EventKind]want{
	Received: {
		EvAdmit:  {Admitted, []ActionKind{ActReserve}, ""},
		EvReject: {Finished, []ActionKind{ActEnd}, RejectedOverloaded},
		EvCancel: {Finished, []ActionKind{ActEnd}, Cancelled},
		EvFail:   {Finished, []ActionKind{ActEnd}, "failed_digest_mismatch"},
	},
	Admitted: {
		EvReserved: {Reserved, []ActionKind{ActPrefill}, ""},
		EvReject:   {Finished, []ActionKind{ActEnd}, RejectedOverloaded},
		EvCancel:   {Finished, []ActionKind{ActEnd}, Cancelled},
		EvFail:     {Finished, []ActionKind{ActEnd}, "failed_digest_mismatch"},
	},
	Reserved: {
		EvRetry:          {Admitted, []ActionKind{ActAbortHandoff, ActReserve}, ""},
		EvRevoked:        {Admitted, []ActionKind{ActAbortHandoff, ActReserve}, ""},
		EvPrefillStarted: {Prefilling, nil, ""},
		EvCancel:         {Reserved, nil, ""}, // recorded (I10)
		EvFail:           {Finished, []ActionKind{ActAbortHandoff, ActEnd}, "failed_digest_mismatch"},
	},
	Prefilling: {
		EvRetry:           {Admitted, []ActionKind{ActAbortHandoff, ActReserve}, ""},
		EvRevoked:         {Admitted, []ActionKind{ActAbortHandoff, ActReserve}, ""},
		EvTransferStarted: {Transferring, nil, ""},
		EvCommitted:       {Committed, []ActionKind{ActEmit}, ""},
		EvCancel:          {Prefilling, nil, ""},
		EvFail:            {Finished, []ActionKind{ActAbortHandoff, ActEnd}, "failed_digest_mismatch"},
	},
	Transferring: {
		EvRetry:     {Admitted, []ActionKind{ActAbortHandoff, ActReserve}, ""},
		EvRevoked:   {Admitted, []ActionKind{ActAbortHandoff, ActReserve}, ""},
		EvCommitted: {Committed, []ActionKind{ActEmit}, ""},
		EvCancel:    {Transferring, nil, ""},
		EvFail:      {Finished, []ActionKind{ActAbortHandoff, ActEnd}, "failed_digest_mismatch"},
	},
	Committed: {
		EvPreempted: {Admitted, []ActionKind{ActReserve}, ""},
		EvToken:     {Decoding, []ActionKind{ActEmit}, ""},
		EvFinish:    {Finished, []ActionKind{ActStopDecode, ActEnd}, FinishedLength},
		EvCancel:    {Finished, []ActionKind{ActStopDecode, ActEnd}, Cancelled},
		EvFail:      {Finished, []ActionKind{ActStopDecode, ActEnd}, "failed_digest_mismatch"},
	},
	Decoding: {
		EvPreempted: {Admitted, []ActionKind{ActReserve}, ""},
		EvToken:     {Decoding, []ActionKind{ActEmit}, ""},
		EvFinish:    {Finished, []ActionKind{ActStopDecode, ActEnd}, FinishedLength},
		EvCancel:    {Finished, []ActionKind{ActStopDecode, ActEnd}, Cancelled},
		EvFail:      {Finished, []ActionKind{ActStopDecode, ActEnd}, "failed_digest_mismatch"},
	},
	Finished: {
		EvCancel: {Finished, nil, RejectedContextLength}, // no-op: a disconnect may race the end
	},
}

func reach(t *testing.T, mode Mode, s State) *Machine {
	t.Helper()
	m := New(mode)
	for _, ev := range paths[s] {
		if _, err := m.Step(ev); err != nil {
			t.Fatalf("reaching %s: %v", s, err)
		}
	}
	if m.State() != s {
		t.Fatalf("reached %s, want %s", m.State(), s)
	}
	return m
}

func kinds(as []Action) []ActionKind {
	var k []ActionKind
	for _, a := range as {
		k = append(k, a.Kind)
	}
	return k
}

func TestEveryTransition(t *testing.T) {
	for s := Received; s <= Finished; s++ {
		for k := EventKind(0); k < numEventKinds; k++ {
			t.Run(fmt.Sprintf("%s/%s", s, k), func(t *testing.T) {
				m := reach(t, Disaggregated, s)
				before := *m
				acts, err := m.Step(sample[k])
				w, ok := table[s][k]
				if !ok {
					var ie *Error
					if !errors.As(err, &ie) || ie.Code() != "illegal_transition" {
						t.Fatalf("got %v, %v; want an illegal transition", acts, err)
					}
					if *m != before || acts != nil {
						t.Fatal("an illegal event changed the machine or emitted actions")
					}
					return
				}
				if err != nil {
					t.Fatalf("legal transition failed: %v", err)
				}
				if m.State() != w.state || !reflect.DeepEqual(kinds(acts), w.actions) || m.Reason() != w.reason {
					t.Fatalf("got %s %v %q, want %s %v %q", m.State(), kinds(acts), m.Reason(), w.state, w.actions, w.reason)
				}
			})
		}
	}
}

// A rejected reason is set once: nothing after it changes it (I1).
func TestTerminalReasonSetOnce(t *testing.T) {
	for s := Received; s < Finished; s++ {
		for _, end := range []Event{sample[EvFail], {Kind: EvCancel}, {Kind: EvReject, Reason: RejectedContextLength}, sample[EvFinish]} {
			m := reach(t, Disaggregated, s)
			if _, err := m.Step(end); err != nil {
				continue
			}
			if m.State() != Finished {
				continue // cancel recorded (I10)
			}
			r := m.Reason()
			for k := EventKind(0); k < numEventKinds; k++ {
				m.Step(sample[k])
				if m.Reason() != r || m.State() != Finished {
					t.Fatalf("%s after %s changed reason %q -> %q", k, end.Kind, r, m.Reason())
				}
			}
		}
	}
}

// The incident's path (I1): a request rejected for its length never
// produces a reservation, a prefill or a page write, whatever the queues
// try afterwards.
func TestIncidentRejectedNeverReachesKV(t *testing.T) {
	m := New(Disaggregated)
	acts, err := m.Step(Event{Kind: EvReject, Reason: RejectedContextLength, Msg: "prompt_tokens + max_tokens exceed the context of 512"})
	if err != nil || len(acts) != 1 || acts[0].Kind != ActEnd || acts[0].Reason != RejectedContextLength || !strings.Contains(acts[0].Msg, "512") {
		t.Fatalf("reject: %v %v", acts, err)
	}
	if m.Live() {
		t.Fatal("a rejected request looks alive")
	}
	// The incident's queues then bootstrapped it anyway: every such step is refused.
	for _, ev := range []Event{{Kind: EvAdmit}, {Kind: EvReserved}, {Kind: EvPrefillStarted},
		{Kind: EvTransferStarted}, {Kind: EvCommitted, Tokens: 1}, {Kind: EvToken}, {Kind: EvFinish, Reason: FinishedStop}} {
		acts, err := m.Step(ev)
		if err == nil || len(acts) != 0 {
			t.Fatalf("%s on a rejected request: actions %v, err %v", ev.Kind, acts, err)
		}
	}
	if p, c := m.Usage(); p != 0 || c != 0 {
		t.Fatalf("usage %d/%d for a rejected request (I9)", p, c)
	}
}

// I10: a disconnect during the transfer is applied only after the commit,
// through the normal stop path, never as an abort of the handoff.
func TestCancelDuringTransferWaitsForCommit(t *testing.T) {
	for _, s := range []State{Reserved, Prefilling, Transferring} {
		m := reach(t, Disaggregated, s)
		if acts, err := m.Step(Event{Kind: EvCancel}); err != nil || acts != nil || !m.CancelPending() {
			t.Fatalf("%s: cancel gave %v %v", s, acts, err)
		}
		m.Step(Event{Kind: EvCancel}) // idempotent
		for m.State() != Prefilling && m.State() != Transferring {
			m.Step(Event{Kind: EvPrefillStarted})
		}
		acts, err := m.Step(Event{Kind: EvCommitted, Token: 3, Tokens: 40})
		if err != nil || !reflect.DeepEqual(kinds(acts), []ActionKind{ActStopDecode, ActEnd}) || m.Reason() != Cancelled {
			t.Fatalf("%s: commit after cancel gave %v %v %q", s, kinds(acts), err, m.Reason())
		}
		for _, a := range acts {
			if a.Kind == ActAbortHandoff {
				t.Fatal("a disconnect tore the handoff")
			}
		}
		if p, _ := m.Usage(); p != 40 {
			t.Fatalf("prompt usage %d, want 40 (I9)", p)
		}
	}
}

func TestColocatedHasNoTransfer(t *testing.T) {
	m := reach(t, Colocated, Prefilling)
	if _, err := m.Step(Event{Kind: EvTransferStarted}); err == nil {
		t.Fatal("colocated request entered Transferring")
	}
	if _, err := m.Step(Event{Kind: EvCommitted, Token: 1, Tokens: 3}); err != nil || m.State() != Committed {
		t.Fatalf("colocated prefill done: %v, %s", err, m.State())
	}
}

func TestMalformedEvents(t *testing.T) {
	for _, ev := range []Event{
		{Kind: EvReject, Reason: FinishedStop},
		{Kind: EvReject},
		{Kind: EvFail},
		{Kind: numEventKinds},
	} {
		m := New(Disaggregated)
		if _, err := m.Step(ev); err == nil || m.State() != Received {
			t.Fatalf("%+v accepted", ev)
		}
	}
	m := reach(t, Disaggregated, Decoding)
	if _, err := m.Step(Event{Kind: EvFinish, Reason: Cancelled}); err == nil {
		t.Fatal("finish with a non-finish reason accepted")
	}
	m = reach(t, Disaggregated, Prefilling)
	if _, err := m.Step(Event{Kind: EvCommitted}); err == nil {
		t.Fatal("a commit without a verified token count accepted")
	}
}

// Random event sequences, checked against invariants that do not depend on
// the transition table: reserve once per admission, preemption or retry; one
// prefill per reservation, only after it; nothing touching KV after the end.
func TestRandomSequences(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		m := New(Mode(rng.IntN(2)))
		reserved, prefill, ended, preempts := 0, 0, 0, 0
		var reason Reason
		for j := 0; j < 12; j++ {
			ev := sample[EventKind(rng.IntN(int(numEventKinds)))]
			if ev.Kind == EvReject && rng.IntN(2) == 0 {
				ev.Reason = RejectedContextLength
			}
			wasFinished := m.State() == Finished
			acts, err := m.Step(ev)
			if err != nil && acts != nil {
				t.Fatal("actions with an error")
			}
			if err == nil && (ev.Kind == EvPreempted || ev.Kind == EvRetry || ev.Kind == EvRevoked) {
				preempts++
			}
			for _, a := range acts {
				if wasFinished {
					t.Fatalf("action %s after the end", a.Kind)
				}
				switch a.Kind {
				case ActReserve:
					reserved++
				case ActPrefill:
					if reserved != prefill+1 {
						t.Fatal("prefill without its own reservation")
					}
					prefill++
				case ActEnd:
					ended++
					reason = a.Reason
					if reason.Rejected() && prefill > 0 {
						t.Fatal("rejected after prefill started")
					}
				case ActEmit:
					if prefill < 1 {
						t.Fatal("token emitted without a prefill")
					}
				}
			}
			if reserved > 1+preempts || prefill > reserved || ended > 1 {
				t.Fatalf("reserve %d prefill %d end %d", reserved, prefill, ended)
			}
			if ended == 1 && (m.State() != Finished || m.Reason() != reason) {
				t.Fatal("end action without a matching terminal state")
			}
		}
	}
}

// A preempted request waits for a new reservation and resumes: its next
// commit carries the rebuilt prompt (prompt + generated tokens) and emits
// a new token, but usage keeps the prompt counted once (I9); a cancel
// while it waits ends it with nothing reserved.
func TestPreemptedResumes(t *testing.T) {
	m := New(Disaggregated)
	for _, ev := range []Event{{Kind: EvAdmit}, {Kind: EvReserved}, {Kind: EvPrefillStarted}, {Kind: EvTransferStarted},
		{Kind: EvCommitted, Token: 1, Tokens: 5}, {Kind: EvToken, Token: 2}} {
		if _, err := m.Step(ev); err != nil {
			t.Fatal(err)
		}
	}
	acts, err := m.Step(Event{Kind: EvPreempted})
	if err != nil || len(acts) != 1 || acts[0].Kind != ActReserve || m.State() != Admitted {
		t.Fatalf("preempt: %v %v in %s", acts, err, m.State())
	}
	for _, ev := range []Event{{Kind: EvReserved}, {Kind: EvPrefillStarted}} {
		if _, err := m.Step(ev); err != nil {
			t.Fatal(err)
		}
	}
	acts, err = m.Step(Event{Kind: EvCommitted, Token: 3, Tokens: 7})
	if err != nil || len(acts) != 1 || acts[0].Kind != ActEmit || acts[0].Token != 3 {
		t.Fatalf("resumed commit: %v %v", acts, err)
	}
	if p, c := m.Usage(); p != 5 || c != 3 {
		t.Fatalf("usage %d prompt %d completion, want 5 and 3", p, c)
	}
	// A resumed request's new handoff that fails before its commit
	// (its new decode worker died) moves again: abort, then reserve.
	m.Step(Event{Kind: EvPreempted})
	for _, ev := range []Event{{Kind: EvReserved}, {Kind: EvPrefillStarted}} {
		if _, err := m.Step(ev); err != nil {
			t.Fatal(err)
		}
	}
	acts, err = m.Step(Event{Kind: EvPreempted})
	if err != nil || !slices.Equal(kinds(acts), []ActionKind{ActAbortHandoff, ActReserve}) || m.State() != Admitted {
		t.Fatalf("resumed handoff failed before its commit: %v %v in %s", acts, err, m.State())
	}
	// ... but not with a disconnect recorded meanwhile (I10): it ends.
	m.Step(Event{Kind: EvReserved})
	m.Step(Event{Kind: EvCancel})
	acts, err = m.Step(Event{Kind: EvPreempted})
	if err != nil || !slices.Equal(kinds(acts), []ActionKind{ActAbortHandoff, ActEnd}) || m.Reason() != Cancelled {
		t.Fatalf("resumed handoff failed with a cancel recorded: %v %v, %s", acts, err, m.Reason())
	}
	m = New(Disaggregated)
	for _, ev := range []Event{{Kind: EvAdmit}, {Kind: EvReserved}, {Kind: EvPrefillStarted}, {Kind: EvCommitted, Token: 1, Tokens: 5}} {
		m.Step(ev)
	}
	m.Step(Event{Kind: EvPreempted})
	acts, _ = m.Step(Event{Kind: EvCancel})
	if m.State() != Finished || m.Reason() != Cancelled || len(acts) != 1 || acts[0].Kind != ActEnd {
		t.Fatalf("cancel while requeued: %v, %s %s", acts, m.State(), m.Reason())
	}
}

// The engine retries a request whose handoff failed before its commit as
// often as its budget allows (engine.DisaggConfig.MaxRetries; the machine
// sets no count): each retry aborts the failed handoff and reserves again,
// from any pre-commit state; the request then commits with its prompt
// counted once, and, once retried, can fail but never be rejected.
func TestRetriedRepeatedly(t *testing.T) {
	m := New(Disaggregated)
	m.Step(Event{Kind: EvAdmit})
	for i, last := range []Event{{Kind: EvReserved}, {Kind: EvPrefillStarted}, {Kind: EvTransferStarted}} {
		for _, ev := range []Event{{Kind: EvReserved}, {Kind: EvPrefillStarted}, {Kind: EvTransferStarted}} {
			if _, err := m.Step(ev); err != nil {
				t.Fatal(err)
			}
			if ev.Kind == last.Kind {
				break
			}
		}
		acts, err := m.Step(Event{Kind: EvRetry, Code: "handoff_failed"})
		if err != nil || !slices.Equal(kinds(acts), []ActionKind{ActAbortHandoff, ActReserve}) || m.State() != Admitted {
			t.Fatalf("retry %d (after %s): %v %v in %s", i+1, last.Kind, acts, err, m.State())
		}
	}
	if _, err := m.Step(Event{Kind: EvReject, Reason: RejectedOverloaded}); err == nil {
		t.Fatal("a retried request was rejected after its prefill had started")
	}
	for _, ev := range []Event{{Kind: EvReserved}, {Kind: EvPrefillStarted}, {Kind: EvCommitted, Token: 4, Tokens: 6}, {Kind: EvFinish, Reason: FinishedLength}} {
		if _, err := m.Step(ev); err != nil {
			t.Fatal(err)
		}
	}
	if p, c := m.Usage(); m.Reason() != FinishedLength || p != 6 || c != 1 {
		t.Fatalf("after three retries: %s, usage %d prompt %d completion, want finished_length, 6 and 1", m.Reason(), p, c)
	}
}
