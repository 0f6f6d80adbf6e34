package spec

import (
	"strings"
	"testing"
)

// streamVariants are stream.pml's weakened models (see its header).
var streamVariants = []variant{
	{"-DSEND_PARTIAL", "a page sent before its chunk filled it is refused by the sender's slot check (the handoff aborts)", ""},
	{"-DSEND_PARTIAL -DNO_SLOT_CHECK", "a page sent with slots still to compute carries its partial hash into the commit digest, so decode accepts and reads incomplete KV", "(dpage[0]==2)&&(dpage[1]==2)"},
	{"-DREAD_BEFORE_COMMIT", "decode reading a page as it arrives reads corrupted bytes the commit's digest would have refused", "dpage[p]==2"},
	{"-DNO_DIGEST", "a commit accepted on coverage alone lets decode read corrupted KV", "(dpage[0]==2)&&(dpage[1]==2)"},
	{"-DDRAIN_EARLY", "a drain acknowledged with a one-sided write in flight lets the write land in the next owner's page", "downer[p]==1"},
}

// TestSpinStream checks the streaming handoff: pages sent while later
// chunks compute, the commit last. With every safeguard in place no
// interleaving of chunk ends, sends, corruptions, refusals, failures and
// aborts lets decode read anything but the whole computed prompt after a
// verified commit, or lets a write land in a reused page, and none
// deadlocks; with each safeguard removed, spin finds the counterexample.
func TestSpinStream(t *testing.T) {
	r := runModel(t, "stream.pml")
	if r.errors != 0 {
		t.Fatalf("stream.pml has %d error(s) (first: %s):\n%s", r.errors, r.violation, r.output)
	}
	if r.states < 500 {
		t.Fatalf("stream.pml: only %d states explored: the model no longer interleaves chunks and sends", r.states)
	}
	t.Logf("stream.pml: %d states stored, %d matched, depth %d, 0 errors", r.states, r.matched, r.depth)
	for _, v := range streamVariants {
		t.Run(v.define[2:], func(t *testing.T) {
			r := runModel(t, "stream.pml", strings.Fields(v.define)...)
			if v.want == "" {
				if r.errors != 0 {
					t.Fatalf("%s: %d error(s) (first: %s), but %s:\n%s", v.define, r.errors, r.violation, v.why, r.output)
				}
				return
			}
			if r.errors == 0 {
				t.Fatalf("%s found no counterexample, but %s", v.define, v.why)
			}
			if r.violation != "("+v.want+")" && r.violation != v.want {
				t.Fatalf("%s failed on %q, want the assertion %s", v.define, r.violation, v.want)
			}
			t.Logf("%s: counterexample after %d states: %s", v.define, r.states, r.violation)
		})
	}
}
