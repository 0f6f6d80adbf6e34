// Package tcp carries the handoff services (handoff.Decode and
// handoff.Prefill) over TCP: length-prefixed frames with a CRC32C each,
// version negotiation, frame size limits, read/write timeouts, and a mutual
// challenge-response handshake with HMAC-SHA256 over a shared secret (I12)
// that also agrees ephemeral X25519 keys; off loopback (or when asked)
// every frame after it is encrypted with AES-256-GCM (I15, seal.go). Many calls
// and token streams share one connection, each frame naming its call.
package tcp

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/kv"
	"sluice/internal/model"
)

// Config is shared by clients and servers.
type Config struct {
	// Secret is the shared credential of the cluster's workers (I12), at
	// least 16 bytes. Load it from a file (LoadSecret), never from a
	// command-line flag: argv is visible to every local user.
	Secret []byte
	// Encrypt seals every frame after the handshake with AES-256-GCM under
	// per-connection, per-direction keys from an ephemeral X25519 exchange
	// (seal.go): an on-path attacker can neither read (page bytes, prompt
	// ids, tokens) nor inject, alter or replay frames, and a recorded
	// session stays unreadable even to someone who later learns the
	// secret. It is on when either side asks, and always for a server
	// listening on, and a client dialling, an address that is not loopback
	// (Loopback): the field asks for it on loopback too.
	Encrypt bool
	// MaxFrame bounds a frame's payload (default 16 MiB). Write batches
	// (handoff.SenderConfig.MaxBatchBytes) must stay below it; a server
	// holds at most 2 x MaxInflight x MaxFrame bytes of a connection's
	// calls (Prefill calls and the others each bounded by MaxInflight).
	MaxFrame int
	// HandshakeTimeout bounds the whole handshake (default 5 s).
	HandshakeTimeout time.Duration
	// DialContext, when set, opens a client's connections in place of a
	// net.Dialer (tests put one that blocks, as a peer that does not
	// answer).
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// ReadTimeout bounds the arrival of a frame's body once its header has
	// arrived (default 10 s). An idle connection is not timed out.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing one frame (default 10 s).
	WriteTimeout time.Duration
	// MaxInflight bounds the calls a server runs at once per connection
	// (default 64), Prefill calls apart from the others: a prompt's call
	// lasts as long as its prefill, and short calls do not wait for it.
	// A client keeps its calls within the same bound (Client.sem): the
	// calls past it wait at the client, unsent, so the server's reader
	// never stops and control frames (a router's close frame giving a
	// prompt up, a stream's close, a heartbeat) are never behind a call
	// waiting for a slot. Each end announces its bound in the handshake
	// and a client keeps to the smaller of the two (a peer announcing 0,
	// or more than MaxCallBound, is refused); a call past a server's
	// bound, from a peer that does not keep to it, stops the server's
	// reader until a slot frees: the memory bound against such a peer.
	// At most MaxCallBound.
	MaxInflight int
	// CancelWait bounds how long a caller that gave a Prefill call up
	// waits for the worker to confirm it stopped (default 10 s); past it
	// the connection is closed (Client.roundTripCancel), so a given-up
	// prompt ends for its caller whatever the peer does, heartbeat or
	// not. Only time this process ran counts (as for DeadAfter): a stall
	// of its own never closes a live worker's connection.
	CancelWait time.Duration
	// MaxStreams bounds the token streams open at once per connection
	// (default 4096); one more is refused with ErrRefused.
	MaxStreams int
	// DeadAfter is how long a peer may send nothing at all before it is
	// declared dead and the connection closed (heartbeat.go; default
	// DefaultDeadAfter, 2s; negative: no heartbeat). Both sides ping every
	// DeadAfter/8 when otherwise quiet.
	DeadAfter time.Duration
	// AckTimeout bounds how long the kernel keeps a connection whose peer
	// stopped acknowledging (a half-open connection: the peer's host gone
	// or cut off), heartbeat or not (keepalive.go): keep-alive probes on
	// an idle connection, TCP_USER_TIMEOUT for unacknowledged data, on
	// both ends' sockets. Default DefaultAckTimeout (20 s); negative: the
	// system's defaults (minutes).
	AckTimeout time.Duration
	// Model is the fingerprint of the model this role loaded (I13). Both
	// sides send theirs in the handshake (covered by the HMAC proofs); a
	// connection between roles whose fingerprints differ is refused with
	// ErrModelMismatch naming both, on both sides, before any call.
	Model model.Fingerprint
	// HoldsKV says this role holds KV pages (prefill, decode; not the
	// router), of element type KVType. Both sides send it in the
	// handshake; two roles that both hold KV and store different types are
	// refused with ErrKVTypeMismatch, on both sides, before any call: a
	// page image of one is not a page of the other.
	HoldsKV bool
	KVType  kv.Type

	// overBound, in tests, makes a client keep this many calls in flight
	// whatever the server announced (a peer that does not keep to it).
	overBound int
	// onWake, in tests, is called with each heartbeat watchdog wake's
	// judgement, from the watchdog's goroutine.
	onWake func(*conn, wake)
}

// kvByte is the handshake's KV field: 0 for a role without KV, else the
// type plus one.
func (c Config) kvByte() byte {
	if !c.HoldsKV {
		return 0
	}
	return byte(c.KVType) + 1
}

// checkKV compares the handshake's KV fields (after the peer proved the
// secret): only two roles that both hold KV must agree.
func (c Config) checkKV(peer byte, what string) error {
	if peer == 0 || !c.HoldsKV {
		return nil
	}
	return handoff.CheckKVType(c.KVType, kv.Type(peer-1), what)
}

// kvField reads the handshake's KV field.
func (d *dec) kvField() byte {
	b := d.u8()
	if d.err == nil && (b > 0 && !kv.Type(b-1).Valid()) {
		d.err = msgErr("unknown KV type %d", b)
	}
	return b
}

// Loopback reports whether a is a loopback address (127.0.0.0/8, ::1):
// traffic that never leaves the host, where frame encryption is optional.
// Anything else, a wildcard listener (0.0.0.0, ::) included, may carry
// frames across a network an attacker is on.
func Loopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// MinSecret is the shortest secret accepted.
const MinSecret = 16

// MaxCallBound is the largest call bound (Config.MaxInflight) an end may
// use or announce: a server holds up to 2 x bound x MaxFrame bytes of a
// connection's calls, so an announcement above it is a broken or hostile
// peer, refused at the handshake.
const MaxCallBound = 4096

// checkCallBound vets the call bound a peer announced in the handshake
// (version 14): 1..MaxCallBound.
func checkCallBound(n uint32, who string) error {
	if n == 0 || n > MaxCallBound {
		return protoErr("handshake: %s announces a call bound of %d; a sluice peer announces 1..%d (a broken or foreign peer)", who, n, MaxCallBound)
	}
	return nil
}

func (c Config) withDefaults() (Config, error) {
	if len(c.Secret) < MinSecret {
		return c, handoff.ErrAuth.With("a shared secret of at least %d bytes is required (I12)", MinSecret)
	}
	if c.MaxFrame <= 0 {
		c.MaxFrame = 16 << 20
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = 5 * time.Second
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = 10 * time.Second
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.MaxInflight <= 0 {
		c.MaxInflight = 64
	}
	if c.MaxInflight > MaxCallBound {
		return c, handoff.ErrRefused.With("a connection's call bound of %d is above the most a peer accepts (%d)", c.MaxInflight, MaxCallBound)
	}
	if c.CancelWait <= 0 {
		c.CancelWait = 10 * time.Second
	}
	if c.MaxStreams <= 0 {
		c.MaxStreams = 4096
	}
	if c.DeadAfter == 0 {
		c.DeadAfter = DefaultDeadAfter
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = DefaultAckTimeout
	}
	return c, nil
}

// LoadSecret reads a secret file (surrounding whitespace trimmed). It
// refuses a file other users can read: the secret is what stops a stranger
// from reserving, writing or committing pages (I12).
func LoadSecret(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("secret file: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("secret file %s is readable by others (mode %v); chmod 600 it", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("secret file: %w", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) < MinSecret {
		return nil, fmt.Errorf("secret file %s holds %d bytes, need at least %d", path, len(b), MinSecret)
	}
	return b, nil
}

func proof(secret []byte, label string, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// conn is one authenticated connection, used by both client and server.
type conn struct {
	nc  net.Conn
	cfg Config
	// calls is the call bound a client keeps to: the smaller of its own
	// and the one the server announced (clientHandshake).
	calls int
	fr    framer
	wmu   sync.Mutex
	beat  beat
	// Encrypted sends (sendSealed): smu orders the frames (nonce and
	// write turn taken together), the seal runs outside any lock, and the
	// writes happen in turn order (wturn, under wmu, wcond).
	smu          sync.Mutex
	stake, wturn uint64
	wcond        *sync.Cond
}

// rd is the connection's reader: every byte read is a sign of life.
func (c *conn) rd() beatReader { return beatReader{c} }

func (c *conn) send(typ byte, stream uint32, parts ...[]byte) error {
	return c.sendData(typ, stream, parts, nil)
}

// sendData sends a frame whose parts marked in isData are page data.
func (c *conn) sendData(typ byte, stream uint32, parts [][]byte, isData []bool) error {
	if c.fr.encrypted() {
		return c.sendSealed(typ, stream, parts)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	v := c.fr.version
	if v == 0 {
		v = helloVersion
	}
	var bufs [][]byte
	var err error
	if isData != nil {
		bufs, err = c.fr.encode(v, typ, stream, parts, isData)
	} else {
		bufs, err = c.fr.encode(v, typ, stream, parts)
	}
	if err != nil {
		return &unsentError{err}
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.cfg.WriteTimeout))
	nb := net.Buffers(bufs)
	_, err = nb.WriteTo(c.nc)
	c.beat.touchSend()
	return err
}

// sendSealed sends an encrypted frame. The frame takes its nonces and its
// write turn together (smu), so frames go on the wire in nonce order, as
// the receiver opens them; the seal runs outside any lock, so one frame is
// sealed while the one before it is written (a Write batch of a megabyte:
// AES-GCM and the socket each use a core). Each nonce is still used once
// under its key (seal.go). A Write frame is sealed record by record
// straight from the pages (sealFrame): the cipher's read is the only pass
// over the page bytes before the socket's.
func (c *conn) sendSealed(typ byte, stream uint32, parts [][]byte) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	hdr, err := c.fr.header(c.fr.version, typ, stream, n)
	if err != nil {
		return &unsentError{err}
	}
	c.smu.Lock()
	ks := c.fr.sealKeys(typ, parts, n)
	turn := c.stake
	c.stake++
	c.smu.Unlock()
	buf := sealFrame(hdr, typ, parts, n, ks)

	c.wmu.Lock()
	if c.wcond == nil {
		c.wcond = sync.NewCond(&c.wmu)
	}
	for c.wturn != turn {
		c.wcond.Wait()
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.cfg.WriteTimeout))
	_, err = c.nc.Write(buf)
	c.beat.touchSend()
	c.wturn++
	c.wcond.Broadcast()
	c.wmu.Unlock()
	if cap(buf) >= 64<<10 {
		putBuf(buf)
	}
	return err
}

// read reads one frame: an idle connection may wait forever for a header,
// but once a header is in, its body must arrive within ReadTimeout.
func (c *conn) read() (*frame, error) {
	_ = c.nc.SetReadDeadline(time.Time{})
	return c.fr.readFrame(c.rd(), func() {
		_ = c.nc.SetReadDeadline(time.Now().Add(c.cfg.ReadTimeout))
	})
}

// readHandshake reads a frame of the given type within the handshake deadline.
func (c *conn) readHandshake(want byte) (*frame, error) {
	f, err := c.fr.readFrame(c.nc, nil)
	if err != nil {
		return nil, err
	}
	if f.typ == tError {
		return nil, decError(f.payload)
	}
	if f.typ != want {
		return nil, protoErr("handshake: frame type %d, want %d", f.typ, want)
	}
	return f, nil
}

// clientHandshake proves the client knows the secret and checks the
// server does too (mutual, I12), checks both run the same model (I13),
// then fixes version and encryption.
//
//	Hello    = min version, max version, encryption wanted (u8 each), nonce [32],
//	           X25519 key [32], model, kv, calls
//	HelloAck = version, encryption (u8 each), max frame u32, nonce [32], X25519 key [32],
//	           model, kv, calls, then
//	           the server's proof [32] = HMAC(secret, "sluice/server" || Hello || HelloAck)
//	Auth     = the client's proof [32] = HMAC(secret, "sluice/client" || Hello || HelloAck)
//
// where model is the role's fingerprint (codec.go: sum [16], name), kv
// its KV page type (u8: 0 none, else kv.Type+1; version 7) and calls its
// call bound (u32, Config.MaxInflight; version 14). The X25519
// keys are ephemeral (version 8): both proofs cover them, and an encrypted
// connection derives its frame keys from them (seal.go). Each side
// compares fingerprints and KV types only after its peer proved the
// secret, so a stranger learns nothing about the model.
func (c *conn) clientHandshake() error {
	_ = c.nc.SetDeadline(time.Now().Add(c.cfg.HandshakeTimeout))
	defer c.nc.SetDeadline(time.Time{})
	var cn [32]byte
	rand.Read(cn[:])
	mac := byte(0)
	if c.cfg.Encrypt {
		mac = 1
	}
	eph := newX25519()
	e := enc{b: append(append([]byte{minVersion, maxVersion, mac}, cn[:]...), eph.PublicKey().Bytes()...)}
	e.model(c.cfg.Model)
	e.u8(c.cfg.kvByte())
	e.u32(uint32(c.cfg.MaxInflight))
	hello := e.b
	if err := c.send(tHello, 0, hello); err != nil {
		return err
	}
	f, err := c.fr.readFrame(c.nc, nil)
	if err == nil && f.typ == tError {
		// Our Hello is well formed, so a sluice server that answers it
		// with a protocol error cannot read it: another build (version 1
		// answers exactly this way).
		perr := decError(f.payload)
		if errors.Is(perr, handoff.ErrProtocol) {
			return versionErr("the server at %s could not read this build's Hello (protocol %d..%d): %v", c.nc.RemoteAddr(), minVersion, maxVersion, perr)
		}
		return perr
	}
	if err == nil && f.typ != tHelloAck {
		err = protoErr("handshake: frame type %d, want %d", f.typ, tHelloAck)
	}
	if err != nil {
		return err
	}
	if len(f.payload) < helloAckMin {
		return protoErr("handshake: HelloAck of %d bytes", len(f.payload))
	}
	ack, sproof := f.payload[:len(f.payload)-32], f.payload[len(f.payload)-32:]
	v, smac := ack[0], ack[1]
	peerMax := int(binary.BigEndian.Uint32(ack[2:6]))
	if v < minVersion || v > maxVersion {
		return versionErr("the server at %s chose protocol version %d; this build speaks %d..%d", c.nc.RemoteAddr(), v, minVersion, maxVersion)
	}
	if smac > 1 || (mac == 1 && smac == 0) {
		return protoErr("handshake: server chose encryption %d", smac)
	}
	if !hmac.Equal(sproof, proof(c.cfg.Secret, "sluice/server", hello, ack)) {
		// The server does not know the secret: never send it anything.
		return handoff.ErrAuth.With("the server failed to prove it knows the shared secret")
	}
	spub := ack[6+32 : 6+32+32]
	d := dec{b: ack[6+32+32:]}
	peer := d.model()
	peerKV := d.kvField()
	peerCalls := d.u32()
	if err := d.end(); err != nil {
		// Handshake frames are the connection's, not a call's.
		return protoErr("handshake: %v", err)
	}
	if err := checkCallBound(peerCalls, "the server at "+c.nc.RemoteAddr().String()); err != nil {
		// The peer proved the secret: tell it why, then leave.
		_ = c.send(tError, 0, encError(err))
		return err
	}
	if err := handoff.CheckModel(c.cfg.Model, peer, "the server at "+c.nc.RemoteAddr().String()); err != nil {
		// I13: the peer is authenticated, so tell it why, then leave.
		_ = c.send(tError, 0, encError(err))
		return err
	}
	if err := c.cfg.checkKV(peerKV, "the server at "+c.nc.RemoteAddr().String()); err != nil {
		_ = c.send(tError, 0, encError(err))
		return err
	}
	if err := c.send(tAuth, 0, proof(c.cfg.Secret, "sluice/client", hello, ack)); err != nil {
		return err
	}
	if _, err := c.readHandshake(tAuthOK); err != nil {
		return err
	}
	c.fr.version = v
	c.fr.peerFrame = min(peerMax, c.cfg.MaxFrame)
	c.calls = min(int(peerCalls), c.cfg.MaxInflight)
	if smac == 1 {
		c2s, s2c, err := sessionKeys(eph, spub, proof(c.cfg.Secret, "sluice/session", hello, ack))
		if err != nil {
			return err
		}
		c.fr.enableSeal(c2s, s2c)
	}
	return nil
}

// The shortest Hello and HelloAck: an empty model name.
const (
	helloMin    = 3 + 32 + 32 + 16 + 4 + 1 + 4
	helloAckMin = 2 + 4 + 32 + 32 + 16 + 4 + 1 + 4 + 32
)

func (c *conn) serverHandshake() error {
	_ = c.nc.SetDeadline(time.Now().Add(c.cfg.HandshakeTimeout))
	defer c.nc.SetDeadline(time.Time{})
	f, err := c.readHandshake(tHello)
	if err != nil {
		return err
	}
	hello := f.payload
	if len(hello) < 3 {
		return protoErr("handshake: Hello of %d bytes", len(hello))
	}
	lo, hi, cmac := hello[0], hello[1], hello[2]
	v := min(hi, byte(maxVersion))
	if lo > hi || cmac > 1 {
		return protoErr("handshake: Hello offers versions %d..%d, encryption %d", lo, hi, cmac)
	}
	if v < lo || v < minVersion {
		return versionErr("no common protocol version: the client at %s speaks %d..%d, this server %d..%d", c.nc.RemoteAddr(), lo, hi, minVersion, maxVersion)
	}
	if len(hello) < helloMin {
		return protoErr("handshake: Hello of %d bytes without a model fingerprint (a peer of a build older than I13?)", len(hello))
	}
	cpub := hello[3+32 : 3+32+32]
	d := dec{b: hello[3+32+32:]}
	peer := d.model()
	peerKV := d.kvField()
	peerCalls := d.u32()
	if err := d.end(); err != nil {
		// Handshake frames are the connection's, not a call's.
		return protoErr("handshake: %v", err)
	}
	// Vetted only: the server keeps to its own bound whatever the client's.
	if err := checkCallBound(peerCalls, "the client at "+c.nc.RemoteAddr().String()); err != nil {
		return err
	}
	mac := cmac
	if c.cfg.Encrypt {
		mac = 1
	}
	var sn [32]byte
	rand.Read(sn[:])
	eph := newX25519()
	// The HelloAck carries the server's frame limit so a client never sends
	// a frame the server must refuse by closing the connection.
	e := enc{b: append(append(binary.BigEndian.AppendUint32([]byte{v, mac}, uint32(c.cfg.MaxFrame)), sn[:]...), eph.PublicKey().Bytes()...)}
	e.model(c.cfg.Model)
	e.u8(c.cfg.kvByte())
	e.u32(uint32(c.cfg.MaxInflight))
	ack := e.b
	if err := c.send(tHelloAck, 0, ack, proof(c.cfg.Secret, "sluice/server", hello, ack)); err != nil {
		return err
	}
	f, err = c.readHandshake(tAuth)
	if err != nil {
		return err
	}
	if !hmac.Equal(f.payload, proof(c.cfg.Secret, "sluice/client", hello, ack)) {
		err := handoff.ErrAuth.With("the client failed to prove it knows the shared secret")
		_ = c.send(tError, 0, encError(err))
		return err
	}
	if err := handoff.CheckModel(c.cfg.Model, peer, "the peer at "+c.nc.RemoteAddr().String()); err != nil {
		// I13, checked here too: an honest client refuses first, but the
		// server does not rely on the client's check.
		_ = c.send(tError, 0, encError(err))
		return err
	}
	if err := c.cfg.checkKV(peerKV, "the peer at "+c.nc.RemoteAddr().String()); err != nil {
		_ = c.send(tError, 0, encError(err))
		return err
	}
	var c2s, s2c []byte
	if mac == 1 {
		// Derived before AuthOK, so a bad client key is refused in clear.
		if c2s, s2c, err = sessionKeys(eph, cpub, proof(c.cfg.Secret, "sluice/session", hello, ack)); err != nil {
			_ = c.send(tError, 0, encError(err))
			return err
		}
	}
	if err := c.send(tAuthOK, 0); err != nil {
		return err
	}
	c.fr.version = v
	if mac == 1 {
		c.fr.enableSeal(c2s, s2c)
	}
	return nil
}

// unsentError is a frame refused before any of its bytes was written
// (larger than the peer accepts): the connection is still aligned and
// usable, only the call that wanted to send it fails.
type unsentError struct{ err error }

func (e *unsentError) Error() string { return e.err.Error() }
func (e *unsentError) Unwrap() error { return e.err }

// notSent reports whether err is a frame refused before sending, and why.
func notSent(err error) (error, bool) {
	if u, ok := err.(*unsentError); ok {
		return u.err, true
	}
	return nil, false
}

// versionErr is ErrVersion with what to do about it.
func versionErr(format string, args ...any) error {
	return handoff.ErrVersion.With(format+"; run the same sluice build on every role", args...)
}

// transportErr marks an I/O failure: the remote outcome is unknown.
func transportErr(err error) error {
	var he *handoff.Error
	if errors.As(err, &he) {
		return err
	}
	return handoff.ErrTransport.With("%v", err)
}

func isClosed(err error) bool {
	return errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "use of closed network connection")
}
