package main

import (
	"flag"
	"log/slog"

	"sluice/internal/tlsload"
)

// tlsOpts are the API and admin listeners' TLS flags (serve, router).
type tlsOpts struct {
	cert, key, adminCA string
}

func (o *tlsOpts) register(fs *flag.FlagSet) {
	fs.StringVar(&o.cert, "tls-cert", "", "PEM certificate (chain) for the API and admin listeners; with --tls-key they speak only TLS (1.2+, Go's defaults). Sending SIGHUP reads both files again: new connections get the new certificate, open streams carry on")
	fs.StringVar(&o.key, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&o.adminCA, "tls-admin-client-ca", "", "PEM CA certificates: the admin listener (/metrics, /health, /ready) then demands a client certificate signed by one of them (needs --tls-cert and a separate admin listener)")
}

// start builds the listeners' TLS servers (nil, nil without --tls-cert)
// and reloads their certificates on SIGHUP (sigs) until stop is called.
func (o *tlsOpts) start(log *slog.Logger, sigs *roleSignals, separateAdmin bool) (api, admin *tlsload.Server, stop func(), err error) {
	stop = func() {}
	if o.cert == "" && o.key == "" && o.adminCA == "" {
		return nil, nil, stop, nil
	}
	if api, err = tlsload.New(tlsload.Config{CertFile: o.cert, KeyFile: o.key}); err != nil {
		return nil, nil, stop, err
	}
	admin = api
	if o.adminCA != "" {
		if !separateAdmin {
			return nil, nil, stop, errAdminCA
		}
		if admin, err = tlsload.New(tlsload.Config{CertFile: o.cert, KeyFile: o.key, ClientCAFile: o.adminCA}); err != nil {
			return nil, nil, stop, err
		}
	}
	hup, stopHUP := sigs.notifyHUP()
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-hup:
				for _, s := range uniq(api, admin) {
					if err := s.Reload(); err != nil {
						log.Error("SIGHUP: the TLS certificate was not reloaded; the previous one stays in use", "err", err)
					} else {
						log.Info("SIGHUP: TLS certificate reloaded", "cert", o.cert)
					}
				}
			}
		}
	}()
	return api, admin, func() { stopHUP(); close(done) }, nil
}

func uniq(a, b *tlsload.Server) []*tlsload.Server {
	if a == b {
		return []*tlsload.Server{a}
	}
	return []*tlsload.Server{a, b}
}

type tlsErr string

func (e tlsErr) Error() string { return string(e) }

const errAdminCA = tlsErr("--tls-admin-client-ca needs a separate admin listener: give --metrics-listen (or --api-keys, which moves metrics off the API)")
