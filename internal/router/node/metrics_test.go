package node

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"sluice/internal/handoff"
	"sluice/internal/kv"
	"sluice/internal/router"
)

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// A decode worker with no free pages is back-pressure: the request waits
// in the queue and, when no page comes back within --queue-timeout, the
// client gets 503 queue_timeout (not 429 overloaded, not an integrity
// error); the refusals are counted under their own metrics, and the
// integrity counter an operator pages on does not move. A real integrity failure (a forged write
// into another owner's page of the same decode pool) then does move it.
func TestCapacityRefusalIsNotIntegrity(t *testing.T) {
	m := loadStories(t)
	for _, mode := range []LocalConfig{{Transport: TransportTCP}, {Colocated: true}} {
		role, handoffLine := "decode", `sluice_handoff_reservations_refused_total{reason="kv_capacity_exhausted"} `
		if mode.Colocated {
			role, handoffLine = "colocated", ""
		}
		t.Run(role, func(t *testing.T) {
			mode.Pools = Pools{Context: 128, PoolTokens: 128}
			mode.QueueTimeout = 200 * time.Millisecond
			s := serve(t, m, mode, nil)
			pool := s.stack.Pools[role]
			// Another request holds every page.
			holder := kv.Owner{Tenant: "other", ID: kv.ID{1}}
			held, err := pool.Reserve(holder, pool.Pages())
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Release(holder, held)
			_, err = s.client.Completions.New(context.Background(), openai.CompletionNewParams{
				Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}, MaxTokens: openai.Int(8)})
			var ae *openai.Error
			if !errors.As(err, &ae) || ae.StatusCode != 503 || ae.Code != router.CodeQueueTimeout {
				t.Fatalf("pool full: want 503 %s, got %v", router.CodeQueueTimeout, err)
			}
			body := scrape(t, s.ts.URL)
			for _, want := range []string{
				`sluice_requests_refused_total{reason="queue_timeout"} 1`,
				`sluice_requests_total{code="queue_timeout",route="/v1/completions",status="503"} 1`,
				handoffLine,
			} {
				if !strings.Contains(body, want) {
					t.Errorf("metrics lack %s", want)
				}
			}
			if nonZero(body, "sluice_integrity_violations_total{") {
				t.Errorf("a capacity refusal moved the integrity counter:\n%s", grepLines(body, "sluice_integrity_violations_total"))
			}

			// A real integrity failure: a write by an owner that does not
			// hold the page (I3) is refused, quarantines the page and is
			// counted.
			intruder := kv.Owner{Tenant: "intruder", ID: kv.ID{2}}
			data := make([]byte, pool.Geometry().PageBytes())
			if err := pool.WritePage(intruder, held[0], 1, data); err == nil {
				t.Fatal("a foreign owner's write was accepted")
			}
			body = scrape(t, s.ts.URL)
			if !strings.Contains(body, `sluice_integrity_violations_total{kind="foreign_owner"} 1`) {
				t.Errorf("the integrity failure was not counted:\n%s", grepLines(body, "sluice_integrity_violations_total"))
			}
		})
	}
}

// nonZero reports a line of body that starts with prefix and whose value
// is not 0.
func nonZero(body, prefix string) bool {
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) && !strings.HasSuffix(l, " 0") {
			return true
		}
	}
	return false
}

func grepLines(body, prefix string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Every failure code the decode side counts lands in exactly one family:
// refusals and aborts never in the integrity violations.
func TestReceiverStatsClassified(t *testing.T) {
	var st router.EngineStats
	st.Violations = map[string]uint64{}
	addReceiverStats(&st, handoff.ReceiverStats{LateWrites: 4, Failed: map[handoff.Code]uint64{
		handoff.ErrNoRoom.Code: 5, handoff.ErrRefused.Code: 2, handoff.ErrAborted.Code: 3,
		handoff.ErrDigestMismatch.Code: 1, handoff.ErrCoverage.Code: 6,
	}})
	want := map[string]uint64{"handoff_digest_mismatch": 1, "handoff_coverage": 6}
	if len(st.Violations) != len(want) || st.Violations["handoff_digest_mismatch"] != 1 || st.Violations["handoff_coverage"] != 6 {
		t.Errorf("violations %v, want %v", st.Violations, want)
	}
	if st.ReservationsRefused[router.RefusedKVCapacity] != 5 || st.ReservationsRefused[router.RefusedOther] != 2 || st.HandoffsAborted != 3 || st.LateWritesDropped != 4 {
		t.Errorf("refused %v, aborted %d, late %d", st.ReservationsRefused, st.HandoffsAborted, st.LateWritesDropped)
	}
}

// Every counter an alert or a dashboard queries has its series from the
// start, at 0: a series born at 1 with the first violation hides that
// violation from increase() and rate(), and a missing series cannot be
// told from a target that stopped exporting it. Checked before any
// request, for the split roles (a decode worker: the handoff verification
// kinds too) and colocated.
func TestCountersStartAtZero(t *testing.T) {
	m := loadStories(t)
	for _, mode := range []LocalConfig{{Transport: TransportTCP}, {Colocated: true}} {
		mode.Pools = Pools{Context: 128, PoolTokens: 256}
		s := serve(t, m, mode, nil)
		body := scrape(t, s.ts.URL)
		var want []string
		for _, k := range kv.Kinds {
			want = append(want, `sluice_integrity_violations_total{kind="`+string(k)+`"} 0`)
		}
		if !mode.Colocated {
			for _, c := range integrityHandoffCodes {
				want = append(want, `sluice_integrity_violations_total{kind="handoff_`+string(c)+`"} 0`)
			}
			want = append(want, `sluice_handoff_reservations_refused_total{reason="kv_capacity_exhausted"} 0`,
				`sluice_handoff_reservations_refused_total{reason="refused"} 0`)
		}
		for _, r := range []string{router.CodeOverloaded, router.CodeTenantLimit, router.CodeQueueTimeout, router.CodeKVCapacity,
			router.CodeRateLimited, router.CodeDraining, router.CodeShuttingDown} {
			want = append(want, `sluice_requests_refused_total{reason="`+r+`"} 0`)
		}
		want = append(want, "sluice_prompt_tokens_total 0", "sluice_completion_tokens_total 0")
		for _, w := range want {
			if !strings.Contains(body, w+"\n") {
				t.Errorf("colocated %v: metrics lack %s", mode.Colocated, w)
			}
		}
	}
}

// Each handoff code whose zero series is exported counts as integrity.
func TestIntegrityHandoffCodesAreIntegrity(t *testing.T) {
	for _, c := range integrityHandoffCodes {
		var st router.EngineStats
		st.Violations = map[string]uint64{}
		addReceiverStats(&st, handoff.ReceiverStats{Failed: map[handoff.Code]uint64{c: 1}})
		if st.Violations["handoff_"+string(c)] != 1 {
			t.Errorf("handoff code %s has a zero integrity series but is not counted as integrity", c)
		}
	}
}
