package incident

import (
	"bytes"
	"testing"

	"sluice/internal/engine"
	"sluice/internal/gguf"
	"sluice/internal/quant"
	"sluice/internal/synth"
)

// TestIncidentMatrix replays the incident and its relatives against the
// real decode worker: with every safeguard on each case ends in an error;
// with none, each case really leaks (so the cases are real attacks); and
// each case is stopped (error, or no foreign data read) by at least one
// safeguard alone. It also pins the expected cells, so a safeguard that
// silently stops working shows up here.
func TestIncidentMatrix(t *testing.T) {
	rt, _, err := LoadModel("")
	if err != nil {
		t.Fatal(err)
	}
	cells, err := Run(rt)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", Format(cells))
	if v := Verdict(cells); v != "" {
		t.Error(v)
	}
	at := map[[2]string]Cell{}
	for _, c := range cells {
		at[[2]string{c.Case, c.Setting}] = c
	}
	for _, c := range Cases {
		if got := at[[2]string{c.Key, SettingAll}]; got.Outcome != OutcomeError {
			t.Errorf("(%s) with every safeguard on: %s (%s), want error", c.Key, got.Outcome, got.Detail)
		}
		if got := at[[2]string{c.Key, SettingNone}]; got.Outcome != OutcomeLeak {
			t.Errorf("(%s) with no safeguard: %s (%s), want LEAK: the case does not reproduce the bug", c.Key, got.Outcome, got.Detail)
		}
		stopped := 0
		for _, s := range Settings[1 : len(Settings)-1] {
			if at[[2]string{c.Key, s}].Outcome != OutcomeLeak {
				stopped++
			}
		}
		if stopped == 0 {
			t.Errorf("(%s) no safeguard alone stops it", c.Key)
		}
	}
	// Which layer alone stops which case, from the design: admission only
	// sees over-long requests; count/coverage sees short transfers; digest
	// sees any byte that is not what prefill sent; owner tags see stale and
	// foreign pages and unwritten slots; scrub hides stale data but cannot
	// stop live data written into the wrong page.
	want := map[string]map[string]Outcome{
		"a": {SettingAdmission: OutcomeError, SettingCount: OutcomeError, SettingDigest: OutcomeError, SettingOwner: OutcomeError, SettingScrub: OutcomeClean},
		"b": {SettingAdmission: OutcomeLeak, SettingCount: OutcomeError, SettingDigest: OutcomeError, SettingOwner: OutcomeError, SettingScrub: OutcomeClean},
		"c": {SettingAdmission: OutcomeLeak, SettingCount: OutcomeLeak, SettingDigest: OutcomeError, SettingOwner: OutcomeLeak, SettingScrub: OutcomeClean},
		"d": {SettingAdmission: OutcomeLeak, SettingCount: OutcomeLeak, SettingDigest: OutcomeError, SettingOwner: OutcomeLeak, SettingScrub: OutcomeClean},
		"e": {SettingAdmission: OutcomeLeak, SettingCount: OutcomeLeak, SettingDigest: OutcomeError, SettingOwner: OutcomeError, SettingScrub: OutcomeLeak},
		"f": {SettingAdmission: OutcomeLeak, SettingCount: OutcomeLeak, SettingDigest: OutcomeError, SettingOwner: OutcomeError, SettingScrub: OutcomeLeak},
	}
	for k, row := range want {
		for s, o := range row {
			if got := at[[2]string{k, s}]; got.Outcome != o {
				t.Errorf("(%s) with %s alone: %s (%s), want %s", k, s, got.Outcome, got.Detail, o)
			}
		}
	}
}

// TestIncidentMatrixMoE replays the incident on a mixture-of-experts model
// (the glm4moe reference file: the incident model's family): every
// safeguard on stops every case, none on leaks in every case.
func TestIncidentMatrixMoE(t *testing.T) {
	var spec synth.Spec
	for _, r := range synth.MoEReferences() {
		if r.Spec.Arch == "glm4moe" && r.Spec.Type == quant.F16 {
			spec = r.Spec
		}
	}
	var b bytes.Buffer
	if err := synth.Write(&b, spec); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	rt, _, err := engine.LoadRuntime("glm4moe", f)
	if err != nil {
		t.Fatal(err)
	}
	cells, err := Run(rt)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", Format(cells))
	if v := Verdict(cells); v != "" {
		t.Error(v)
	}
	for _, c := range cells {
		if c.Setting == SettingAll && c.Outcome != OutcomeError {
			t.Errorf("(%s) with every safeguard on: %s (%s), want error", c.Case, c.Outcome, c.Detail)
		}
		if c.Setting == SettingNone && c.Outcome != OutcomeLeak {
			t.Errorf("(%s) with no safeguard: %s (%s), want LEAK", c.Case, c.Outcome, c.Detail)
		}
	}
}
