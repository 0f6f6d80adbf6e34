package tcp

import (
	"context"
	"errors"
	"net"
	"testing"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
)

// A connection that ends in the middle of a frame (a decode worker killed
// while a token frame was half out: its kernel resets the connection and
// drops the rest) is a transport failure for the client's calls and
// streams, as one lost between frames is: a stream cut after its first
// token then migrates (engine.migratable), and a Reserve's outcome is
// unknown (the caller aborts). It was a protocol error, which the router
// does not migrate: TestClusterNetworkFaultsAsProcesses once saw a stream
// cut after its first token under kill -9 of a decode worker.
func TestConnectionCutMidFrameIsTransport(t *testing.T) {
	tok, err := encToken(handoff.Token{ID: 7})
	if err != nil {
		t.Fatal(err)
	}
	for _, cut := range []int{headerLen - 5, headerLen + 2} { // in the header, in the body
		t.Run("stream", func(t *testing.T) {
			addr := fakeServer(t, func(nc net.Conn) {
				c := fakeServerConn(nc)
				if c == nil {
					return
				}
				f, err := c.fr.readFrame(nc, nil)
				if err != nil || f.typ != tStreamOpen {
					return
				}
				c.send(tOK, f.stream)
				c.send(tToken, f.stream, tok)
				nc.Write(rawFrame(c.fr.version, tToken, f.stream, tok, nil)[:cut])
			})
			c := dial(t, addr, Config{Secret: secret})
			ts, err := c.Stream(context.Background(), handofftest.ID(1), handoff.StreamParams{})
			if err != nil {
				t.Fatal(err)
			}
			if got, err := ts.Recv(); err != nil || got.Err != nil || got.ID != 7 {
				t.Fatalf("first token: %+v %v", got, err)
			}
			got, err := ts.Recv()
			if err != nil || !errors.Is(got.Err, handoff.ErrTransport) || errors.Is(got.Err, handoff.ErrProtocol) {
				t.Fatalf("stream cut %d bytes into a frame: %+v %v, want a transport failure", cut, got, err)
			}
		})
		t.Run("reserve", func(t *testing.T) {
			addr := fakeServer(t, func(nc net.Conn) {
				c := fakeServerConn(nc)
				if c == nil {
					return
				}
				f, err := c.fr.readFrame(nc, nil)
				if err != nil || f.typ != tReserve {
					return
				}
				nc.Write(rawFrame(c.fr.version, tReservation, f.stream, make([]byte, 40), nil)[:cut])
			})
			c := dial(t, addr, Config{Secret: secret})
			_, err := c.Reserve(context.Background(), &handoff.Reserve{Handoff: handofftest.ID(1), Tenant: "a", PromptTokens: 4, MaxTokens: 1})
			if !errors.Is(err, handoff.ErrTransport) || errors.Is(err, handoff.ErrProtocol) {
				t.Fatalf("reply cut %d bytes into its frame: %v, want a transport failure (outcome unknown)", cut, err)
			}
		})
	}
}
