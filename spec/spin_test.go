package spec

import (
	"os"
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
	states    int // stored
	matched   int
	depth     int    // deepest step reached
	violation string // first assertion that failed, if any
	output    string
}

var (
	reErrors    = regexp.MustCompile(`errors: (\d+)`)
	reStates    = regexp.MustCompile(`(\d+) states, stored`)
	reMatched   = regexp.MustCompile(`(\d+) states, matched`)
	reDepth     = regexp.MustCompile(`depth reached (\d+)`)
	reViolation = regexp.MustCompile(`assertion violated (.*) \(at depth`)
)

// runSpin generates, compiles and runs a safety verifier for handoff.pml
// with the given macro definitions, in a temporary directory.
func runSpin(t *testing.T, defines ...string) spinResult {
	t.Helper()
	return runModel(t, "handoff.pml", defines...)
}

// runModel is runSpin for any model of this directory.
func runModel(t *testing.T, file string, defines ...string) spinResult {
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
	model, err := filepath.Abs(file)
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
	// -O0: compiling the verifier costs more than running it at these
	// sizes (a second of gcc -O2 against a quarter at -O0).
	run("gcc", "-O0", "-DSAFETY", "-o", "pan", "pan.c")
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
	if m := reMatched.FindStringSubmatch(out); m != nil {
		r.matched, _ = strconv.Atoi(m[1])
	}
	if m := reDepth.FindStringSubmatch(out); m != nil {
		r.depth, _ = strconv.Atoi(m[1])
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
	t.Logf("full model: %d states stored, %d matched, depth %d, 0 errors", r.states, r.matched, r.depth)
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

// fullSize says whether to check the models at the sizes of `make spec`
// (SLUICE_SPEC_FULL=1): more handoffs, readers, tokens and preemptions,
// about a million states each, instead of the default suite's smaller
// sizes (tens of thousands, a second each).
func fullSize() bool { return os.Getenv("SLUICE_SPEC_FULL") == "1" }

// variant is one weakened model: a safeguard switched off by a macro.
type variant struct {
	define string
	why    string
	// want is the assertion that must fail; empty means the variant must
	// NOT fail (a layer another layer backs up: removing it alone is safe).
	want string
}

// models are the models beside handoff.pml, each with its sizes and its
// weakened variants (docs/testing.md lists their state counts).
var models = []struct {
	file        string
	small, full []string // size macros: default suite, make spec
	variants    []variant
}{
	{
		file:  "shm.pml",
		small: nil, // NH=4: a request, its resume and one other handoff
		full:  []string{"-DNH=5"},
		variants: []variant{
			{"-DNO_GEN_WORD", "a writer stalled past the lease copies into the next owner's page when it does not load the generation word", "(powner==h)&&(pgen==g)"},
			{"-DWORD_NOT_CLOSED", "a word left open by quarantine and free lets a stalled writer copy into a freed page", "(powner==h)&&(pgen==g)"},
			{"-DHB_RELEASE", "freeing a handoff's pages when the heartbeat declares its writer dead lets a stopped writer mid-copy land in the next owner's page", "(powner==h)&&(pgen==g)"},
			{"-DRESUME_OLD_GEN", "a resume at the old generation reopens the word for the old handoff's stalled writer", "(powner==h)&&(pgen==g)"},
		},
	},
	{
		file:  "prefix.pml",
		small: nil, // NR=2 readers
		full:  []string{"-DNR=3"},
		variants: []variant{
			{"-DNO_SEALED_CHECK", "a write applied to a cached page changes what its readers read", "pdata==sealedData"},
			{"-DEVICT_WITH_READERS", "evicting a read page lets a new owner's bytes reach a reader between its tag check and its read", "pdata==sealedData"},
			{"-DNO_INSERT_SHARE", "an inserter not counted as a reader lets the page be evicted under it", "pdata==sealedData"},
			{"-DSEALED_ONESIDED", "a one-sided writer with neither the prefix refusal nor the closed word writes the shared page", "pdata==sealedData"},
			{"-DNO_PREFIX_REFUSAL", "the closed generation word alone keeps the one-sided writer off a sealed page", ""},
		},
	},
	{
		file:  "abortcommit.pml",
		small: nil, // one handoff, two aborts, its commit and its stream
		full:  nil,
		variants: []variant{
			{"-DOLD_ABORT", "an abort that ignores what the core's abort found strands committed pages or leaves the sequence decoding", "(releases==1)&&( !(started)||stopped)"},
			{"-DCOMMIT_IGNORES_FAILED", "a commit that takes the pages of a handoff the worker already ended strands them", "(releases==1)&&( !(started)||stopped)"},
			{"-DNO_SECOND_LOOK", "the first look and Commit's check cover the commit race without the look after the core's abort", ""},
		},
	},
	{
		file:  "migrate.pml",
		small: nil, // N=3 tokens, 1 preemption, --max-migrations 1
		full:  []string{"-DN=5", "-DNPRE=2", "-DMAXM=2"},
		variants: []variant{
			{"-DWRONG_OFFSET", "a resume that restarts the sampler draws other tokens than the reference", "kv==delivered"},
			{"-DACCEPT_STALE", "a continued worker's items for its migrated handoff reach the client", "kv==delivered"},
			{"-DNO_EXCLUDE", "a migration that does not avoid the failed worker goes back to it and runs out of migrations", "finished"},
			{"-DMAXM=0", "without migration a stream whose worker stops after its first token ends with an error", "finished"},
			{"-DMAXR=0", "without retries a request whose worker stops before its first token ends with an error", "finished"},
		},
	},
}

// TestSpinModels checks each model beside handoff.pml: with every
// safeguard in place no interleaving violates its properties and none
// deadlocks; with each safeguard removed alone, spin finds the
// counterexample that safeguard exists for (or, for a backed-up layer,
// still none).
func TestSpinModels(t *testing.T) {
	for _, m := range models {
		size := m.small
		if fullSize() {
			size = m.full
		}
		t.Run(m.file, func(t *testing.T) {
			t.Parallel()
			r := runModel(t, m.file, size...)
			if r.errors != 0 {
				t.Fatalf("%s %v has %d error(s) (first: %s):\n%s", m.file, size, r.errors, r.violation, r.output)
			}
			if r.states < 1000 {
				t.Fatalf("%s: only %d states explored: the model no longer interleaves its actors", m.file, r.states)
			}
			t.Logf("%s %v: %d states stored, %d matched, depth %d, 0 errors", m.file, size, r.states, r.matched, r.depth)
			for _, v := range m.variants {
				t.Run(v.define[2:], func(t *testing.T) {
					t.Parallel()
					// The variant's macro after the sizes, so that
					// -DMAXM=0 overrides a size.
					r := runModel(t, m.file, append(append([]string(nil), size...), v.define)...)
					if v.want == "" {
						if r.errors != 0 {
							t.Fatalf("%s %s: %d error(s) (first: %s), but %s:\n%s", m.file, v.define, r.errors, r.violation, v.why, r.output)
						}
						t.Logf("%s %s: no counterexample in %d states, as expected: %s", m.file, v.define, r.states, v.why)
						return
					}
					if r.errors == 0 {
						t.Fatalf("%s %s found no counterexample, but %s", m.file, v.define, v.why)
					}
					if r.violation != "("+v.want+")" && r.violation != v.want {
						t.Fatalf("%s %s failed on %q, want the assertion %s", m.file, v.define, r.violation, v.want)
					}
					t.Logf("%s %s: counterexample after %d states, depth %d: %s", m.file, v.define, r.states, r.depth, r.violation)
				})
			}
		})
	}
}
