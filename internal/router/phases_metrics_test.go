package router

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"sluice/internal/engine"
)

// sluice_first_token_phase_seconds: summed over tenants unless tenant
// labels are on (a tenant's name never reaches a scraper otherwise), by
// tenant when they are.
func TestFirstTokenPhaseMetrics(t *testing.T) {
	b := func(n uint64) []uint64 {
		out := make([]uint64, len(engine.QueueWaitBuckets))
		for i := range out {
			out[i] = n
		}
		return out
	}
	st := EngineStats{Phases: map[string][]engine.PhaseStat{
		"router": {
			{Tenant: "acme-corp", Phase: engine.PhaseQueue, Count: 2, Sum: 0.5, Buckets: b(2)},
			{Tenant: "globex", Phase: engine.PhaseQueue, Count: 1, Sum: 0.25, Buckets: b(1)},
		},
		"prefill": {{Tenant: "globex", Phase: engine.PhasePrefillWait, Count: 1, Sum: 0.125, Buckets: b(1)}},
	}}
	for _, labels := range []bool{false, true} {
		reg := prometheus.NewRegistry()
		if err := reg.Register(&statsCollector{stats: func() EngineStats { return st }, tenantLabels: labels}); err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		_, body := get(t, srv.URL)
		srv.Close()
		want := []string{
			`sluice_first_token_phase_seconds_count{phase="queue",role="router"} 3`,
			`sluice_first_token_phase_seconds_sum{phase="queue",role="router"} 0.75`,
			`sluice_first_token_phase_seconds_count{phase="prefill_wait",role="prefill"} 1`,
		}
		if labels {
			want = []string{
				`sluice_first_token_phase_seconds_count{phase="queue",role="router",tenant="acme-corp"} 2`,
				`sluice_first_token_phase_seconds_sum{phase="queue",role="router",tenant="globex"} 0.25`,
				`sluice_first_token_phase_seconds_count{phase="prefill_wait",role="prefill",tenant="globex"} 1`,
			}
		}
		for _, w := range want {
			if !strings.Contains(body, w) {
				t.Errorf("tenant labels %v: no %s in\n%s", labels, w, body)
			}
		}
		if got := strings.Contains(body, "acme-corp"); got != labels {
			t.Errorf("tenant labels %v: tenant name in metrics = %v", labels, got)
		}
	}
}
