package main

import (
	"log/slog"
	"net"
	"net/http"
	"time"

	"sluice/internal/tlsload"
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

// serveAdmin serves h on addr (nothing when addr is ""), for metrics and
// probes apart from the API, over TLS when tlsSrv is set. The returned
// stop closes it.
func serveAdmin(log *slog.Logger, addr string, h http.Handler, tlsSrv *tlsload.Server) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go tlsload.Serve(hs, l, tlsSrv)
	log.Info("metrics listening", "addr", tlsload.Scheme(tlsSrv)+"://"+l.Addr().String()+"/metrics")
	return func() { hs.Close() }, nil
}
