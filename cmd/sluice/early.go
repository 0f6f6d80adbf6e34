package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"time"

	"sluice/internal/router"
	"sluice/internal/tlsload"
)

// swapHandler serves whichever handler was stored last: the loading
// answer until the server is ready, then the server's own.
type swapHandler struct{ h atomic.Pointer[http.Handler] }

func newSwapHandler(h http.Handler) *swapHandler {
	s := &swapHandler{}
	s.set(h)
	return s
}

func (s *swapHandler) set(h http.Handler) { s.h.Store(&h) }

func (s *swapHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*s.h.Load()).ServeHTTP(w, r)
}

// earlyServer is the API listener, and the admin listener when there is
// one, bound before the model loads (as llama-server binds its port
// first): until the server is ready both answer router.LoadingHandler's
// 503 model_loading, so probes and clients see "loading" rather than a
// refused connection, and a port another process holds fails start-up at
// once instead of after a minute of loading.
type earlyServer struct {
	api, admin     *swapHandler
	apiL, adminL   net.Listener
	apiHS, adminHS *http.Server
	apiErr         chan error
}

// bindEarly binds apiAddr and adminAddr (either "" for none: a worker
// has only the admin listener) and serves the loading answer on them. adminFlags names what sets the admin address.
func bindEarly(log *slog.Logger, apiAddr, adminAddr, adminFlags string, apiTLS, adminTLS *tlsload.Server) (*earlyServer, error) {
	e := &earlyServer{apiErr: make(chan error, 1)}
	var l net.Listener
	if apiAddr != "" {
		var err error
		if l, err = net.Listen("tcp", apiAddr); err != nil {
			return nil, listenError(err, "--port, --host or --listen")
		}
		e.apiL = l
	}
	if adminAddr != "" {
		al, err := net.Listen("tcp", adminAddr)
		if err != nil {
			if l != nil {
				l.Close()
			}
			err = listenError(err, adminFlags)
			if adminFlags == defaultAdminFlags && errors.Is(err, syscall.EADDRINUSE) {
				err = fmt.Errorf("%w (%s is the admin listener's default with API keys, and also Prometheus's own default port: a Prometheus on this host holds it)", err, defaultAdminListen)
			}
			return nil, err
		}
		e.adminL = al
		e.admin = newSwapHandler(router.LoadingHandler())
		e.adminHS = &http.Server{Handler: e.admin, ReadHeaderTimeout: 10 * time.Second}
		go tlsload.Serve(e.adminHS, al, adminTLS)
	}
	var attrs []any
	if l != nil {
		// ReadTimeout covers headers and body only (responses stream for
		// as long as generation takes); IdleTimeout reaps idle keep-alives.
		e.api = newSwapHandler(router.LoadingHandler())
		e.apiHS = &http.Server{Handler: e.api, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 60 * time.Second, IdleTimeout: 2 * time.Minute}
		go func() { e.apiErr <- tlsload.Serve(e.apiHS, l, apiTLS) }()
		attrs = append(attrs, "addr", tlsload.Scheme(apiTLS)+"://"+l.Addr().String())
	}
	if e.adminL != nil {
		attrs = append(attrs, "admin", tlsload.Scheme(adminTLS)+"://"+e.adminL.Addr().String())
	}
	log.Info(msgBoundLoading, attrs...)
	return e, nil
}

// httpFront is what serve and the router set up before the model loads:
// the API keys, TLS, and the API and admin listeners (bindEarly).
type httpFront struct {
	keys             *router.Keys
	adminAddr        string // "": no admin listener, /metrics on the API
	apiTLS, adminTLS *tlsload.Server
	early            *earlyServer
	stopTLS          func()
}

// bindFront reads the API keys, starts TLS and binds the API listener
// and the admin listener (if any) before the model loads: a port in use
// fails start-up at once, and until the server is ready every request and
// probe gets 503 model_loading (as llama-server), not a refused
// connection. false: it logged why (exit code 1). close undoes it.
func (o *serveOpts) bindFront(log *slog.Logger, sigs *roleSignals) (*httpFront, bool) {
	keys, err := o.keys(log)
	if err != nil {
		log.Error(err.Error())
		return nil, false
	}
	f := &httpFront{keys: keys, adminAddr: o.adminAddr(keys != nil)}
	if f.apiTLS, f.adminTLS, f.stopTLS, err = o.tls.start(log, sigs, f.adminAddr != ""); err != nil {
		log.Error("TLS", "err", err)
		return nil, false
	}
	if f.early, err = bindEarly(log, o.listen, f.adminAddr, o.adminFlags(), f.apiTLS, f.adminTLS); err != nil {
		f.stopTLS()
		log.Error("cannot listen", "err", err)
		return nil, false
	}
	return f, true
}

// close closes the listeners, then stops TLS.
func (f *httpFront) close() {
	f.early.close()
	f.stopTLS()
}

// defaultAdminFlags is what adminFlags says when the admin address is
// the default one, not given.
const defaultAdminFlags = "--metrics-listen (default " + defaultAdminListen + " with --api-keys)"

// readyAdmin hands the admin listener h (nothing without one); stop
// closes it.
func (e *earlyServer) readyAdmin(log *slog.Logger, h http.Handler, tlsSrv *tlsload.Server) (stop func()) {
	if e.adminL == nil {
		return func() {}
	}
	e.admin.set(h)
	log.Info("metrics listening", "addr", tlsload.Scheme(tlsSrv)+"://"+e.adminL.Addr().String()+"/metrics")
	return func() { e.adminHS.Close() }
}

// close stops both listeners; for a start-up that failed after binding.
// After serveHTTP's shutdown it does nothing more.
func (e *earlyServer) close() {
	if e.apiHS != nil {
		e.apiHS.Close()
	}
	if e.adminHS != nil {
		e.adminHS.Close()
	}
}

// msgBoundLoading is the log line of a role whose listeners are bound
// while its model loads. Harnesses read the bound addresses from it
// (internal/bench's boundMsg is the same text), so it is one constant.
const msgBoundLoading = "bound; loading: requests get 503 model_loading until the server is ready"
