package main

import (
	"context"
	"errors"
	"testing"
)

// Where the metrics go: off the API (loopback admin listener) whenever API
// keys make the API multi-tenant; an explicit --metrics-listen wins; a
// single-tenant server keeps them on its one listener.
func TestAdminAddr(t *testing.T) {
	for _, c := range []struct {
		flag        string
		multiTenant bool
		want        string
	}{
		{"", true, "127.0.0.1:9090"},
		{"", false, ""},
		{"127.0.0.1:7000", true, "127.0.0.1:7000"},
		{"127.0.0.1:7000", false, "127.0.0.1:7000"},
	} {
		o := serveOpts{metricsListen: c.flag}
		if got := o.adminAddr(c.multiTenant); got != c.want {
			t.Errorf("--metrics-listen %q, multi-tenant %v: %q, want %q", c.flag, c.multiTenant, got, c.want)
		}
	}
}

// A worker's /ready: its own dependency check, and never while draining.
func TestWorkerReadiness(t *testing.T) {
	var o workerOpts
	down := errors.New("the decode worker is not ready (transport)")
	var dep error
	ready := o.readiness(func(context.Context) error { return dep })
	if err := ready(context.Background()); err != nil {
		t.Fatalf("up: %v", err)
	}
	dep = down
	if err := ready(context.Background()); err != down {
		t.Fatalf("dependency down: %v", err)
	}
	dep = nil
	o.draining.Store(true)
	if err := ready(context.Background()); err == nil {
		t.Fatal("ready while draining")
	}
	if err := o.readiness(nil)(context.Background()); err == nil {
		t.Fatal("a worker without dependencies is ready while draining")
	}
}
