// Package tlsload serves the HTTP listeners (the API, the admin port) over
// TLS with Go's crypto/tls defaults (TLS 1.2 at least, 1.3 preferred, Go's
// cipher suite choice), from a certificate and key on disk that are read
// again when the operator asks (SIGHUP): a renewed certificate reaches new
// connections while established ones, streams included, carry on under the
// handshake they already made. An optional client CA makes the listener
// demand and verify client certificates (mutual TLS, for the admin port).
package tlsload

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync/atomic"
)

// Config names the files; the zero Config means plaintext.
type Config struct {
	CertFile, KeyFile string
	// ClientCAFile, when set, makes the listener require a client
	// certificate signed by one of its PEM certificates.
	ClientCAFile string
}

// Enabled reports whether TLS was asked for.
func (c Config) Enabled() bool { return c.CertFile != "" || c.KeyFile != "" || c.ClientCAFile != "" }

// Check refuses a half-given configuration, so a typo never serves
// plaintext where TLS was meant.
func (c Config) Check() error {
	if !c.Enabled() {
		return nil
	}
	if c.CertFile == "" || c.KeyFile == "" {
		return errors.New("TLS needs both --tls-cert and --tls-key")
	}
	return nil
}

// Server holds the current certificate of one listener configuration.
type Server struct {
	cfg     Config
	cert    atomic.Pointer[tls.Certificate]
	clients *x509.CertPool
}

// New reads the certificate, key and client CA; any error names the file.
func New(cfg Config) (*Server, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	if cfg.ClientCAFile != "" {
		pem, err := os.ReadFile(cfg.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("client CA: %w", err)
		}
		s.clients = x509.NewCertPool()
		if !s.clients.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("client CA %s holds no PEM certificate", cfg.ClientCAFile)
		}
	}
	return s, nil
}

// Reload reads the certificate and key again. On an error the certificate
// in use stays (a half-written renewal never takes the listener down).
func (s *Server) Reload() error {
	c, err := tls.LoadX509KeyPair(s.cfg.CertFile, s.cfg.KeyFile)
	if err != nil {
		return fmt.Errorf("TLS certificate %s / key %s: %w", s.cfg.CertFile, s.cfg.KeyFile, err)
	}
	s.cert.Store(&c)
	return nil
}

// TLSConfig is the server configuration: Go's defaults, the current
// certificate looked up at each handshake.
func (s *Server) TLSConfig() *tls.Config {
	tc := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.cert.Load(), nil
		},
	}
	if s.clients != nil {
		tc.ClientAuth = tls.RequireAndVerifyClientCert
		tc.ClientCAs = s.clients
	}
	return tc
}

// Serve serves hs on l: in plaintext when s is nil, else over TLS with
// s's configuration (net/http then offers HTTP/2 as well as HTTP/1.1).
func Serve(hs *http.Server, l net.Listener, s *Server) error {
	if s == nil {
		return hs.Serve(l)
	}
	hs.TLSConfig = s.TLSConfig()
	return hs.ServeTLS(l, "", "")
}

// Scheme is "https" with TLS, else "http", for log lines.
func Scheme(s *Server) string {
	if s == nil {
		return "http"
	}
	return "https"
}
