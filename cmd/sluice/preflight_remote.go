package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"sluice/internal/preflight"
)

// remoteOpts are the flags `sluice preflight --endpoint` and `sluice audit`
// share for reaching a server: extra headers and TLS.
type remoteOpts struct {
	headers  multiFlag
	caCert   string
	insecure bool
}

func (o *remoteOpts) register(fs *flag.FlagSet) {
	fs.Var(&o.headers, "header", "extra request header `K:V` sent with every request (repeatable)")
	fs.StringVar(&o.caCert, "ca-cert", "", "PEM file of the CA that signed the server's TLS certificate")
	fs.BoolVar(&o.insecure, "insecure", false, "do not verify the server's TLS certificate (testing only)")
}

// build returns the HTTP client and the parsed headers.
func (o *remoteOpts) build(timeout time.Duration) (*http.Client, http.Header, error) {
	h := http.Header{}
	for _, kv := range o.headers {
		k, v, ok := strings.Cut(kv, ":")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, nil, fmt.Errorf("--header %q: want K:V", kv)
		}
		h.Add(k, strings.TrimSpace(v))
	}
	hc, err := preflight.NewHTTPClient(preflight.TLSOptions{CACert: o.caCert, Insecure: o.insecure}, timeout)
	if err != nil {
		return nil, nil, err
	}
	return hc, h, nil
}

func init() {
	var o remoteOpts
	remotePreflightFlags = o.register
	remotePreflight = func(endpoint, apiKey string, jsonOut bool, stdout, stderr io.Writer) int {
		hc, h, err := o.build(15 * time.Second)
		if err != nil {
			fmt.Fprintf(stderr, "preflight: %v\n", err)
			return 2
		}
		rep, err := preflight.Remote(context.Background(), endpoint, &preflight.Prober{HTTP: hc, APIKey: apiKey, Headers: h})
		if err != nil {
			fmt.Fprintf(stderr, "preflight: %s: %v\n", endpoint, err)
			return 2
		}
		if jsonOut {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			enc.Encode(struct {
				*preflight.RemoteReport
				OK      bool   `json:"ok"`
				Verdict string `json:"verdict"`
			}{rep, rep.OK(), rep.Verdict()})
		} else {
			rep.WriteText(stdout)
		}
		switch rep.Verdict() {
		case preflight.RemoteFail:
			return 1
		case preflight.RemoteInconclusive:
			return 2
		}
		return 0
	}
}
