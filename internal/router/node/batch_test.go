package node

import (
	"context"
	"testing"

	"sluice/internal/engine"
)

// The prefill chunk, the step budget and the shared step of LocalConfig reach every role's
// engine, in every topology `sluice serve` builds (colocated, one pair,
// a cluster).
func TestBatchSettingsReachEveryRole(t *testing.T) {
	m := loadStories(t)
	for _, c := range []LocalConfig{
		{Colocated: true},
		{Transport: TransportInproc},
		{Transport: TransportTCP, PrefillWorkers: 2, DecodeWorkers: 1},
	} {
		seen := map[string]engine.Config{}
		c.Pools = Pools{Context: 256, PoolTokens: 512}
		c.ChunkTokens, c.StepTokens, c.SharedStepTokens = 24, 40, 12
		c.Engine = func(role string, ec *engine.Config) { seen[role] = *ec }
		st, err := BuildLocal(m, c)
		if err != nil {
			t.Fatal(err)
		}
		st.Close(context.Background())
		if len(seen) == 0 {
			t.Fatalf("%+v: no role built", c)
		}
		for role, ec := range seen {
			if ec.ChunkTokens != 24 || ec.StepTokens != 40 || ec.SharedStepTokens != 12 {
				t.Errorf("colocated=%v workers=%d/%d: %s runs chunk %d, budget %d, shared step %d; want 24, 40, 12", c.Colocated, c.PrefillWorkers, c.DecodeWorkers, role, ec.ChunkTokens, ec.StepTokens, ec.SharedStepTokens)
			}
		}
	}
}
