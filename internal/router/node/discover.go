package node

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"sort"
	"sync"
	"time"
)

// Resolver turns one worker spec into the addresses behind it (DNS
// below; tests inject a fake).
type Resolver interface {
	Resolve(ctx context.Context, spec string) ([]string, error)
}

// DNS resolves "host:port" specs: an IP literal stays itself, a name gives
// one address per A/AAAA record (a Kubernetes headless Service has one
// per ready pod), all on the spec's port.
type DNS struct{ R *net.Resolver }

// Resolve implements Resolver.
func (d DNS) Resolve(ctx context.Context, spec string) ([]string, error) {
	host, port, err := net.SplitHostPort(spec)
	if err != nil {
		return nil, err
	}
	if net.ParseIP(host) != nil {
		return []string{spec}, nil
	}
	r := d.R
	if r == nil {
		r = net.DefaultResolver
	}
	ips, err := r.LookupHost(ctx, host)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = net.JoinHostPort(ip, port)
	}
	return out, nil
}

// Resolve resolves every spec and returns the addresses sorted, without
// duplicates. Any failed lookup is returned as the error (with what the
// others gave).
func Resolve(ctx context.Context, r Resolver, specs []string) ([]string, error) {
	seen := map[string]bool{}
	var first error
	for _, s := range specs {
		as, err := r.Resolve(ctx, s)
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		for _, a := range as {
			seen[a] = true
		}
	}
	out := make([]string, 0, len(seen))
	for a := range seen {
		out = append(out, a)
	}
	sort.Strings(out)
	return out, first
}

// Discovery re-resolves a role's worker specs every interval and reports
// the changes: add for an address that appeared, remove for one that
// went away. A failed lookup changes nothing (a DNS outage must not empty
// the pool).
type Discovery struct {
	Specs    []string
	Resolver Resolver
	Add      func(addr string)
	Remove   func(addr string)
	Log      *slog.Logger

	mu   sync.Mutex // Specs (SetSpecs), have
	sync sync.Mutex // one Sync at a time
	have []string
}

// Sync resolves once and applies the difference.
func (d *Discovery) Sync(ctx context.Context) {
	// One sync at a time (the resolve loop and a reload may overlap): the
	// difference is taken against what the previous sync applied.
	d.sync.Lock()
	defer d.sync.Unlock()
	d.mu.Lock()
	specs := d.Specs
	d.mu.Unlock()
	got, err := Resolve(ctx, d.Resolver, specs)
	if err != nil {
		if d.Log != nil {
			d.Log.Warn("worker discovery: lookup failed; keeping the known workers", "err", err)
		}
		return
	}
	d.mu.Lock()
	old := d.have
	d.have = got
	d.mu.Unlock()
	for _, a := range got {
		if !slices.Contains(old, a) {
			d.Add(a)
		}
	}
	for _, a := range old {
		if !slices.Contains(got, a) {
			d.Remove(a)
		}
	}
}

// Run syncs every interval until ctx ends.
func (d *Discovery) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			d.Sync(ctx)
		}
	}
}
