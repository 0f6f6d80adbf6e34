package engine

import (
	"testing"

	"sluice/internal/request"
)

// A move's event the machine refuses while the request still lives (a
// bug in the move logic, not a race with a cancel) ends the request with
// internal_error: before, run returned and the client's stream never
// ended. After the end (a cancel took effect), a refused move just says
// "stop" and ends nothing twice.
func TestLifecycleMoveRefusedWhileLiveEndsTheRequest(t *testing.T) {
	for _, ev := range []request.EventKind{request.EvRevoked, request.EvRetry, request.EvPreempted} {
		var ends []*Error
		lc := newLifecycle(request.Disaggregated, func(a request.Action, e *Error, _, _ int) {
			if a.Kind == request.ActEnd {
				ends = append(ends, e)
			}
		})
		lc.step(request.Event{Kind: request.EvAdmit}, nil) // Admitted: no move's event is legal
		if lc.move(request.Event{Kind: ev}) {
			t.Fatalf("%v on an admitted request: the move went on", ev)
		}
		if lc.live() || len(ends) != 1 || ends[0] == nil || ends[0].Code != CodeInternal {
			t.Fatalf("%v refused while live: live %v, ends %v; want one end with %s", ev, lc.live(), ends, CodeInternal)
		}
		// Refused after the end: nothing more happens.
		if lc.move(request.Event{Kind: ev}) || len(ends) != 1 {
			t.Fatalf("%v after the end: ends %v", ev, ends)
		}
	}
}
