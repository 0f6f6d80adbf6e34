package handoff_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
)

// startTenantCall is startGatedCall for tenant's handoff n.
func startTenantCall(t *testing.T, r *handofftest.Rig, n int, tenant string) *gatedCall {
	t.Helper()
	ctx := context.Background()
	id := handofftest.ID(n)
	src := r.Sequence(t, id, tenant, 16, byte(n))
	res, err := r.Server.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: tenant, PromptTokens: 16})
	if err != nil {
		t.Fatal(err)
	}
	c := &gatedCall{id: *res, src: src, gate: make(chan struct{}), started: make(chan int, len(res.Pages)), done: make(chan error, 1)}
	c.open = sync.OnceFunc(func() { close(c.gate) })
	t.Cleanup(c.open)
	ws, _ := sealedBatch(t, id, res, src, c.gate, c.started, -1)
	go func() { c.done <- r.Server.Write(ctx, ws) }()
	return c
}

// The openers are shared across tenants, not handed out in arrival order
// alone: a tenant's burst of sealed calls queued for them must not hold a
// co-tenant's call behind every one of them (its first token would wait
// for the whole burst's AES-GCM). A waiting call of a tenant served less
// recently goes first.
func TestRT14OpenersFairAcrossTenants(t *testing.T) {
	setProcs(t, 2) // one opener
	r := handofftest.New(t, handofftest.Options{})
	a1 := startTenantCall(t, r, 1, "acme")
	if opening(a1, 1, 10*time.Second) != 1 {
		t.Fatal("the first call did not open")
	}
	var burst []*gatedCall
	for i := range 3 {
		burst = append(burst, startTenantCall(t, r, 2+i, "acme"))
		waitFor(t, "acme's call to wait", func() bool { return handoff.OpenersWaiting() == 1+i })
	}
	b := startTenantCall(t, r, 9, "bolt")
	waitFor(t, "bolt's call to wait", func() bool { return handoff.OpenersWaiting() == 4 })
	a1.finish(t)
	if opening(b, 1, 10*time.Second) != 1 {
		t.Fatal("bolt's call did not get the opener acme's first call freed")
	}
	time.Sleep(50 * time.Millisecond)
	for i, c := range burst {
		if len(c.started) != 0 {
			t.Fatalf("acme's queued call %d opened before bolt's (the opener is one)", i)
		}
	}
	b.finish(t)
	for _, c := range burst {
		if opening(c, 1, 10*time.Second) != 1 {
			t.Fatal("acme's queued calls did not open in turn")
		}
		c.finish(t)
	}
}
