package main

import (
	"errors"
	"fmt"
	"syscall"
)

// defaultAdminListen is where a multi-tenant server serves its metrics when
// --metrics-listen is not given: loopback, so only the host's operator
// (or a scraper beside it) reads them.
const defaultAdminListen = "127.0.0.1:9090"

// adminAddr is the admin listener's address, or "" to keep /metrics on
// the API listener. With API keys the API is every tenant's, so metrics
// (which name pools, refusals and per-request counts) move off it; a
// single-tenant server keeps them on its one listener unless told
// otherwise.
func (o *serveOpts) adminAddr(multiTenant bool) string {
	if o.metricsListen != "" {
		return o.metricsListen
	}
	if multiTenant {
		return defaultAdminListen
	}
	return ""
}

// adminFlags names what set the admin address, for a bind error: the
// flag, or the default it fell back to.
func (o *serveOpts) adminFlags() string {
	if o.metricsListen != "" {
		return "--metrics-listen"
	}
	return defaultAdminFlags
}

// listenError is err from binding an address, with what to change when
// another process holds the address: the bare "bind: address already in
// use" does not say which of a role's listeners (API, admin, handoff) it
// was, nor which flag moves it. flags names the flags that set it.
func listenError(err error, flags string) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%w: another process holds this address; stop it or give another with %s", err, flags)
	}
	return fmt.Errorf("%w (set with %s)", err, flags)
}
