package main

import (
	"errors"
	"strings"
	"testing"

	"sluice/internal/handoff"
)

// A role that cannot connect at start says why when retrying cannot help:
// another model (I13), another secret (I12), another build's protocol.
func TestConnectFailureNamesTheCause(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{handoff.ErrModelMismatch.With("x"), "another model"},
		{handoff.ErrAuth.With("x"), "authentication"},
		{handoff.ErrVersion.With("x"), "protocol version"},
		{errors.New("connection refused"), "cannot reach"},
	} {
		if got := connectFailure("decode", c.err); !strings.Contains(got, c.want) {
			t.Errorf("%v: %q lacks %q", c.err, got, c.want)
		}
	}
}
