package spec

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"sluice/internal/testenv"
)

// spinResult is what one verification run printed.
type spinResult struct {
	errors    int
	states    int
	violation string // first assertion that failed, if any
	output    string
}

var (
	reErrors    = regexp.MustCompile(`errors: (\d+)`)
	reStates    = regexp.MustCompile(`(\d+) states, stored`)
	reViolation = regexp.MustCompile(`assertion violated (.*) \(at depth`)
)

// runSpin generates, compiles and runs a safety verifier for the model with
// the given macro definitions, in a temporary directory.
func runSpin(t *testing.T, defines ...string) spinResult {
	t.Helper()
	spin, err := exec.LookPath("spin")
	if err != nil {
		if testenv.Required() {
			t.Fatalf("spin is not installed; the test command (scripts/test.sh) installs the Debian package 'spin'")
		}
		t.Skip("SKIPPED: spin (Debian package 'spin') is not installed; the protocol model was NOT checked. Run scripts/test.sh, which installs it.")
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("SKIPPED: no gcc to compile spin's verifier; the protocol model was NOT checked")
	}
	model, err := filepath.Abs("handoff.pml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	args := append([]string{"-a"}, defines...)
	args = append(args, model)
	run := func(name string, args ...string) string {
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return string(out)
	}
	run(spin, args...)
	run("gcc", "-O2", "-DSAFETY", "-o", "pan", "pan.c")
	// pan exits non-zero when it finds an error; read its output either way.
	cmd := exec.Command(filepath.Join(dir, "pan"), "-m1000000")
	cmd.Dir = dir
	outb, _ := cmd.CombinedOutput()
	out := string(outb)
	var r spinResult
	r.output = out
	m := reErrors.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("cannot read the error count from spin's output:\n%s", out)
	}
	r.errors, _ = strconv.Atoi(m[1])
	if m := reStates.FindStringSubmatch(out); m != nil {
		r.states, _ = strconv.Atoi(m[1])
	}
	if m := reViolation.FindStringSubmatch(out); m != nil {
		r.violation = m[1]
	}
	return r
}

// TestSpinFullModel: with every safeguard in place, no interleaving of
// reserve, two- and one-sided writes, commits, aborts, quarantine, lease
// expiry and reuse violates I3, I5 or I6, and no state deadlocks.
func TestSpinFullModel(t *testing.T) {
	r := runSpin(t)
	if r.errors != 0 {
		t.Fatalf("the full protocol model has %d error(s) (first: %s):\n%s", r.errors, r.violation, r.output)
	}
	if r.states < 1000 {
		t.Fatalf("only %d states explored: the model no longer exercises reuse", r.states)
	}
	t.Logf("full model: %d states stored, 0 errors", r.states)
}

// TestSpinWeakenedModels: each safeguard removed alone must let the model
// checker find a counterexample against the property that safeguard
// protects; a model that cannot fail proves nothing.
func TestSpinWeakenedModels(t *testing.T) {
	cases := []struct {
		define string
		why    string
		want   string // the assertion that must fail
	}{
		{"-DNO_GEN_CHECK", "writes applied without owner/generation fencing land on a reused page (I6/I3)", "(powner==h)&&(pgen==g)"},
		{"-DRELEASE_BEFORE_DRAIN", "an aborted one-sided transfer's page is reused while its write is in flight (I6)", "(powner==h)&&(pgen==g)"},
		{"-DCOMMIT_COUNT_ONLY", "a short transfer is accepted on its claimed count (I5)", "(pwriter==h)&&(pdata==h)"},
		{"-DSHORT_LEASE", "a lease shorter than the transport's in-flight time frees a page a write can still reach (I6)", "(powner==h)&&(pgen==g)"},
	}
	for _, c := range cases {
		t.Run(c.define[2:], func(t *testing.T) {
			r := runSpin(t, c.define)
			if r.errors == 0 {
				t.Fatalf("weakened model %s found no counterexample, but %s", c.define, c.why)
			}
			if r.violation != "("+c.want+")" {
				t.Fatalf("weakened model %s failed on %q, want the assertion (%s)", c.define, r.violation, c.want)
			}
			t.Logf("%s: counterexample found after %d states: %s", c.define, r.states, r.violation)
		})
	}
}
