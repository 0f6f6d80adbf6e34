package tcp

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
)

// Frame encryption (I15). After the handshake, a connection that encrypts
// seals every frame's payload with AES-256-GCM: the 16-byte header is the
// additional data (authenticated, in clear: the reader needs the length),
// the payload becomes ciphertext, and the 16-byte tag follows it. Page
// bytes, prompt token ids (Reserve, Prefill), generated tokens and every
// other field are therefore unreadable on the wire, and a frame can be
// neither altered, injected, replayed, reordered nor reflected.
//
// Keys. Each side sends an ephemeral X25519 public key in its handshake
// frame (Hello, HelloAck); both keys sit inside the transcript that the
// HMAC proofs over the shared secret cover (I12), so an on-path attacker
// cannot substitute its own. The two directions' keys are
//
//	HKDF-SHA256(ikm = X25519 shared value,
//	            salt = HMAC(secret, "sluice/session" || Hello || HelloAck),
//	            info = "sluice/v8 c->s" or "sluice/v8 s->c")
//
// and the ephemeral private keys live only in the handshake's stack frame:
// someone who recorded a session and later learns the shared secret still
// cannot decrypt it (forward secrecy). Go's crypto/ecdh, crypto/hkdf and
// AES-GCM (AES-NI, carry-less multiply) do the work; nothing here is a
// primitive of our own.
//
// Nonces. A key is used by one direction only, and its nonce is the
// sealed unit's sequence number in that direction (12 bytes: a direction
// byte, three zero bytes, the 64-bit count), which only ever increases, so
// a (key, nonce) pair is never used twice. A sealed unit is a whole frame,
// or one record of a Write frame (frame.go: its metadata, then each page),
// so a Write frame of k pages takes k+1 numbers; the sender takes them
// with the frame's write turn (conn.sendSealed) and the reader in read
// order, so both count the same. The seals and opens themselves run in
// parallel: frames are sealed while the frame before is written, a big
// Write frame's records on two goroutines (sealFrame), and the decode
// side opens a frame's page records on every core but one
// (handoff.Writes.Open, handoff.OpenParallelism).
// That cannot reuse a nonce: a record's nonce (and key) is fixed when its
// frame takes its sequence range, under conn.smu, as one contiguous run
// of the counter, and handed to whichever goroutine seals that record,
// which uses it for that record only; no goroutine ever draws a number
// itself. The order in which goroutines get to records therefore changes
// neither which nonce a record uses nor where a rekey falls, and a frame
// sealed in parallel is byte for byte the frame one sealer would make
// (TestParallelSealedRecordsKeepTheirNonces). Both sides ratchet a direction's key
// (k' = HKDF-Expand(k, "sluice/v8 rekey")) once it has sealed rekeyBytes
// of payload, before AES-GCM's data limit comes near: at the same unit on
// both sides, since both know every unit's length, with no message
// exchanged. The sequence number keeps counting across a rekey.
//
// Records. A Write frame is sealed per page rather than whole so that the
// sender seals each page straight from the pool into the frame buffer (a
// whole-frame seal needs the frame's plaintext contiguous: a copy of every
// page first), each record carrying the frame header and its own length as
// additional data. A record is bound to its frame (header), its place
// (nonce) and its length; nothing of a record is used before its own tag
// verifies (I15). The decode side marks a call's full pages written only
// once every full page's record of the call verified; a short last page
// (opened into a buffer of its own) is written as soon as its record
// verified, before the full pages' records are opened: if one of those
// then fails, the handoff fails (I8) and that page is released and
// scrubbed with the rest, never read. A frame whose records do not follow
// the layout is a protocol error. The tags cost 16 bytes per page.
//
// When the shared-memory transport is used instead (same host), pages never
// leave the machine's memory and are not encrypted.

// rekeyBytes is how much payload one key seals before it is replaced:
// 2^36 bytes (2^32 AES blocks), far below the 2^48-block guidance for a
// GCM key with distinct nonces, so the margin holds with room to spare. A
// variable so a test can make it small.
var rekeyBytes uint64 = 1 << 36

const tagLen = 16

// dirKey is one direction's sealing state.
type dirKey struct {
	key   []byte
	aead  cipher.AEAD
	seq   uint64 // next frame's sequence number
	bytes uint64 // payload bytes sealed under key
	dir   byte
	keyNo uint64 // how many times the key was replaced (tests, metrics)
}

func newDirKey(key []byte, dir byte) *dirKey {
	d := &dirKey{dir: dir}
	d.setKey(key)
	return d
}

func (d *dirKey) setKey(key []byte) {
	blk, err := aes.NewCipher(key)
	if err != nil {
		panic(err) // a 32-byte key always makes a cipher
	}
	g, err := cipher.NewGCM(blk)
	if err != nil {
		panic(err)
	}
	d.key, d.aead, d.bytes = key, g, 0
}

// next returns the nonce for a frame of n payload bytes and the AEAD of
// the key it is sealed under, and advances the sequence, ratcheting the
// key first when this frame would take it past rekeyBytes. Sender and
// receiver call it in the same order with the same n, so they stay in
// step; the seal or open itself may then run on another goroutine (the
// AEAD is safe for concurrent use, and each frame has its own nonce).
func (d *dirKey) next(n int) ([12]byte, cipher.AEAD) {
	if d.bytes > 0 && d.bytes+uint64(n) > rekeyBytes {
		k, err := hkdf.Expand(sha256.New, d.key, "sluice/v8 rekey", 32)
		if err != nil {
			panic(err)
		}
		d.setKey(k)
		d.keyNo++
	}
	d.bytes += uint64(n)
	var nonce [12]byte
	nonce[0] = d.dir
	binary.BigEndian.PutUint64(nonce[4:], d.seq)
	d.seq++
	return nonce, d.aead
}

// newX25519 makes a handshake's ephemeral key pair.
func newX25519() *ecdh.PrivateKey {
	k, err := ecdh.X25519().GenerateKey(nil)
	if err != nil {
		panic(err) // the system's random source failed
	}
	return k
}

// sessionKeys derives the two directions' keys from our ephemeral private
// key, the peer's public key and the transcript's session proof (salt).
// A peer key of low order (an all-zero shared value) is refused.
func sessionKeys(priv *ecdh.PrivateKey, peerPub, salt []byte) (c2s, s2c []byte, err error) {
	pub, err := ecdh.X25519().NewPublicKey(peerPub)
	if err != nil {
		return nil, nil, protoErr("handshake: bad X25519 key: %v", err)
	}
	shared, err := priv.ECDH(pub)
	if err != nil {
		return nil, nil, protoErr("handshake: X25519: %v", err)
	}
	c2s, err = hkdf.Key(sha256.New, shared, salt, "sluice/v8 c->s", 32)
	if err == nil {
		s2c, err = hkdf.Key(sha256.New, shared, salt, "sluice/v8 s->c", 32)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("hkdf: %w", err)
	}
	return c2s, s2c, nil
}
