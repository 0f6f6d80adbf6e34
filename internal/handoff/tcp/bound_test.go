package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
)

// Each end announces its call bound in the handshake and a client keeps
// to the smaller, whichever end has it: a router of the default 64 calls
// facing a worker configured for 2 sends no third prompt while two run,
// so the worker's reader never stops for a slot (and never holds a close
// frame behind it). Were both ends to assume 64, the third prompt would
// go out and stop the worker's reader.
func TestCallBoundIsTheSmaller(t *testing.T) {
	for _, tc := range []struct{ server, client int }{{2, 0}, {2, 5}, {5, 2}} {
		p := &gatedPrefill{started: make(chan struct{}, 8), release: make(chan struct{})}
		addr, s := serve(t, Config{Secret: secret, MaxInflight: tc.server, DeadAfter: -1}, nil, p)
		c := dial(t, addr, Config{Secret: secret, MaxInflight: tc.client, DeadAfter: -1})
		want := 2
		if got := c.psem.limit(); got != want || c.sem.limit() != want {
			t.Fatalf("server %d, client %d: the client keeps to %d prompts and %d other calls, want %d", tc.server, tc.client, got, c.sem.limit(), want)
		}
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = c.Prefill(context.Background(), &handoff.PrefillRequest{Handoff: handofftest.ID(i), Tenant: "t", Tokens: []int32{1}})
			}()
		}
		<-p.started
		<-p.started
		waitFor(t, "the third prompt waiting at the client", func() bool { return waitingCalls(c) == 1 })
		if n := s.slotWaits.Load(); n != 0 {
			t.Fatalf("server %d, client %d: the server's reader waited %d times for a slot", tc.server, tc.client, n)
		}
		close(p.release)
		wg.Wait()
	}
}

// A peer announcing a call bound of 0 (no call could ever run) or above
// MaxCallBound (more calls than any sluice end holds memory for) is
// refused at the handshake with a protocol error that names the value;
// a client never takes a server's word for more than its own bound.
func TestBadCallBoundRefused(t *testing.T) {
	for _, bound := range []uint32{0, MaxCallBound + 1, 1 << 31} {
		// A client announcing it: the server refuses before any call.
		addr, _ := serve(t, Config{Secret: secret}, nil, &gatedPrefill{})
		nc, fr := rawClient(t, addr)
		e := enc{b: append([]byte{minVersion, maxVersion, 0}, make([]byte, 64)...)}
		e.model(modelA)
		e.u8(0)
		e.u32(bound)
		bufs, _ := fr.encode(helloVersion, tHello, 0, [][]byte{e.b})
		nb := net.Buffers(bufs)
		nb.WriteTo(nc)
		f, err := fr.readFrame(nc, nil)
		if err != nil || f.typ != tError {
			t.Fatalf("a Hello announcing %d calls got %v %+v, want an error frame", bound, err, f)
		}
		boundText(t, decError(f.payload), bound)

		// A server announcing it, proving the secret: the client refuses
		// and tells it why.
		got := make(chan *frame, 1)
		saddr := fakeServer(t, func(nc net.Conn) {
			nc.SetDeadline(time.Now().Add(5 * time.Second))
			fr := &framer{maxFrame: 1 << 20}
			f, err := fr.readFrame(nc, nil)
			if err != nil {
				return
			}
			hello := f.payload
			e := enc{b: append([]byte{minVersion, 0, 0, 0x10, 0, 0}, make([]byte, 64)...)}
			e.model(modelA)
			e.u8(0)
			e.u32(bound)
			ack := e.b
			bufs, _ := fr.encode(helloVersion, tHelloAck, 0, [][]byte{ack, proof(secret, "sluice/server", hello, ack)})
			nb := net.Buffers(bufs)
			nb.WriteTo(nc)
			f, _ = fr.readFrame(nc, nil)
			got <- f
		})
		_, err = Dial(context.Background(), saddr, Config{Secret: secret, Model: modelA})
		boundText(t, err, bound)
		if f := <-got; f == nil || f.typ != tError {
			t.Fatalf("the client answered a server announcing %d calls with %+v, want an error frame and no proof", bound, f)
		}
	}
	// And an end is not configured past it.
	if _, err := NewServer(Config{Secret: secret, MaxInflight: MaxCallBound + 1}, nil, nil); !errors.Is(err, handoff.ErrRefused) {
		t.Fatalf("a server of %d calls: %v, want refused", MaxCallBound+1, err)
	}
	if _, err := Dial(context.Background(), "127.0.0.1:1", Config{Secret: secret, MaxInflight: MaxCallBound + 1}); !errors.Is(err, handoff.ErrRefused) {
		t.Fatalf("a client of %d calls: %v, want refused", MaxCallBound+1, err)
	}
}

func boundText(t *testing.T, err error, bound uint32) {
	t.Helper()
	if !errors.Is(err, handoff.ErrProtocol) {
		t.Fatalf("announcing %d calls: %v, want a protocol error", bound, err)
	}
	for _, want := range []string{"call bound of " + strconv.Itoa(int(bound)), "1.." + strconv.Itoa(MaxCallBound)} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("announcing %d calls: %q does not say %q", bound, err, want)
		}
	}
}

// A peer of the previous protocol (13: no call bound in its Hello) is
// refused at the handshake with both versions named, not misread.
func TestVersion13PeerRefused(t *testing.T) {
	addr, _ := serve(t, Config{Secret: secret}, nil, &gatedPrefill{})
	nc, fr := rawClient(t, addr)
	e := enc{b: append([]byte{13, 13, 0}, make([]byte, 64)...)}
	e.model(modelA)
	e.u8(0)
	bufs, _ := fr.encode(helloVersion, tHello, 0, [][]byte{e.b})
	nb := net.Buffers(bufs)
	nb.WriteTo(nc)
	f, err := fr.readFrame(nc, nil)
	if err != nil || f.typ != tError {
		t.Fatalf("a version-13 Hello got %v %+v, want an error frame", err, f)
	}
	perr := decError(f.payload)
	if !errors.Is(perr, handoff.ErrVersion) || !strings.Contains(perr.Error(), "13..13") || !strings.Contains(perr.Error(), fmt.Sprintf("%d..%d", minVersion, maxVersion)) {
		t.Fatalf("a version-13 Hello: %v, want a version error naming 13..13 and this build's versions", perr)
	}
}
