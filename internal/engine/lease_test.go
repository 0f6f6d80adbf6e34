package engine

import (
	"testing"
	"time"

	"sluice/internal/kv"
)

// A page quarantined in a prefill worker's or a colocated engine's pool (a
// seal mismatch on a cache hit or in the verify sweep quarantines it) is
// free again once its lease has passed.
// Only the decode worker's receiver expired leases before; these pools
// lost each such page for good, a page less for every tenant.
func TestQuarantineLeasesExpireOnEveryRole(t *testing.T) {
	const pages = 12
	cfg := toyConfig(newToy(), pages)
	cfg.Lease = 40 * time.Millisecond
	dw, err := NewDecodeWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dw.Close)
	pw, err := NewPrefillWorker(cfg, dw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pw.Close)
	c, err := NewColocated(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeWithin(t, c) })

	for name, p := range map[string]*kv.Pool{"prefill": pw.Pool(), "colocated": c.Pool()} {
		o := kv.Owner{Tenant: "t", ID: kv.ID{1}}
		refs, err := p.Reserve(o, 3)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// Taken out of use with a lease, as a failed transfer's pages
		// are (the pool's Quarantine, I6).
		p.Quarantine(o, refs, time.Now().Add(cfg.Lease))
		if st := p.Stats(); st.Quarantined == 0 {
			t.Fatalf("%s: %d pages quarantined after the violation (%+v)", name, st.Quarantined, st)
		}
		deadline := time.Now().Add(10 * time.Second)
		for p.Stats().Free != pages {
			if time.Now().After(deadline) {
				t.Fatalf("%s: quarantined pages never came back after their lease: %+v", name, p.Stats())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
