package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"sluice/internal/preflight"
)

func init() {
	remotePreflight = func(endpoint, apiKey string, jsonOut bool, stdout, stderr io.Writer) int {
		rep, err := preflight.Remote(context.Background(), endpoint, apiKey, nil)
		if err != nil {
			fmt.Fprintf(stderr, "preflight: %s: %v\n", endpoint, err)
			return 2
		}
		if jsonOut {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			enc.Encode(struct {
				*preflight.RemoteReport
				OK bool `json:"ok"`
			}{rep, rep.OK()})
		} else {
			rep.WriteText(stdout)
		}
		if !rep.OK() {
			return 1
		}
		return 0
	}
}
