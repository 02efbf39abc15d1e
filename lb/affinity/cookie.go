package affinity

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/spillway-lb/spillway/lb/hashing"
)

// MinKeyLen is the shortest HMAC key a Keyring accepts, in bytes: the
// output size of SHA-256, as RFC 2104 §3 recommends.
const MinKeyLen = 32

// Errors returned by Keyring.ParseCookie. Pick treats all of them alike, as
// "no cookie"; they are distinct so that callers can count them.
var (
	// ErrMalformedCookie means the value is not a cookie of this format.
	ErrMalformedCookie = errors.New("affinity: malformed cookie")
	// ErrBadSignature means the value is well formed but no key of the
	// keyring signed it (forged, altered, or signed with a key that has
	// since been removed).
	ErrBadSignature = errors.New("affinity: cookie signature does not verify")
	// ErrExpiredCookie means the cookie is correctly signed but its expiry
	// has passed.
	ErrExpiredCookie = errors.New("affinity: cookie expired")
)

// Cookie format, version 1, before base64url encoding (RFC 4648 §5, no
// padding; 49 bytes give 66 characters):
//
//	offset size  field
//	0      1     version = 1
//	1      8     backend id, big endian (BackendID of the backend's name)
//	9      8     expiry, Unix seconds, big endian, signed
//	17     32    HMAC-SHA256(key, macLabel ‖ bytes 0..16)
//
// The backend is named by a 64-bit hash rather than its address so that
// the cookie does not reveal backend addresses and has a fixed size.
// macLabel separates these MACs from any other use of the same key.
const (
	cookieVersion = 1
	payloadLen    = 1 + 8 + 8
	macLen        = sha256.Size
	rawLen        = payloadLen + macLen
	macLabel      = "spillway affinity cookie v1\x00"
	// encodedLen is the length of every valid cookie value: ⌈rawLen·8/6⌉.
	encodedLen = (rawLen*8 + 5) / 6
)

// BackendID returns the id by which a generated cookie names a backend:
// hashing.String of its name. It is stable across processes, so a cookie
// issued by one gfe pins the same backend on every other gfe.
func BackendID(name string) uint64 { return hashing.String(name) }

// Cookie is the content of a generated affinity cookie.
type Cookie struct {
	// Backend is the BackendID of the pinned backend.
	Backend uint64
	// Expires is when the cookie stops being honoured. It is stored with a
	// resolution of one second (Encode truncates toward the past).
	Expires time.Time
}

// Keyring holds the HMAC-SHA256 keys of generated cookies. The first key
// signs; every key verifies. To rotate: deploy [new, old] (new cookies are
// signed with new, cookies signed with old still verify and are re-signed
// with new when next seen by Picker), wait at least the cookie TTL, then
// deploy [new]. A Keyring is immutable after NewKeyring and safe for
// concurrent use.
type Keyring struct {
	// Immutable after NewKeyring.
	keys [][]byte
	// enc is strict base64url without padding: its decoder rejects
	// non-zero trailing bits, so a cookie has exactly one accepted
	// spelling.
	enc *base64.Encoding
}

// NewKeyring returns a keyring signing with keys[0] and verifying with all
// of keys. It copies the keys. Every key must be at least MinKeyLen bytes of
// secret random data (for example 32 bytes from crypto/rand, kept in the
// secret store, identical on every gfe), and keys must be distinct.
func NewKeyring(keys ...[]byte) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, errors.New("affinity: keyring: at least one key is required")
	}
	var errs []error
	kr := &Keyring{keys: make([][]byte, len(keys)), enc: base64.RawURLEncoding.Strict()}
	for i, k := range keys {
		if len(k) < MinKeyLen {
			errs = append(errs, fmt.Errorf("affinity: keyring: key %d: must be at least %d bytes, got %d", i, MinKeyLen, len(k)))
		}
		for j := range i {
			if bytes.Equal(k, keys[j]) {
				errs = append(errs, fmt.Errorf("affinity: keyring: key %d: duplicate of key %d", i, j))
			}
		}
		kr.keys[i] = bytes.Clone(k)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return kr, nil
}

// Len returns the number of keys.
func (kr *Keyring) Len() int { return len(kr.keys) }

// Encode returns the signed, base64url-encoded value of c, signed with the
// first key. The value is safe to use as a cookie value unquoted.
func (kr *Keyring) Encode(c Cookie) string {
	var raw [rawLen]byte
	raw[0] = cookieVersion
	binary.BigEndian.PutUint64(raw[1:9], c.Backend)
	binary.BigEndian.PutUint64(raw[9:17], uint64(c.Expires.Unix()))
	sign(kr.keys[0], raw[:payloadLen], raw[payloadLen:payloadLen])
	return kr.enc.EncodeToString(raw[:])
}

// ParseCookie decodes value, verifies its signature against every key of the
// keyring, and checks that it has not expired at now. It returns the cookie
// and the index of the key that verified it (0 is the signing key), or an
// error wrapping ErrMalformedCookie, ErrBadSignature or ErrExpiredCookie.
// Nothing in a value is trusted before its signature verifies; signatures
// are compared in constant time (hmac.Equal). Every accepted value is the
// exact output of Encode for some key of the keyring: no other spelling of
// the same bytes is accepted.
func (kr *Keyring) ParseCookie(value string, now time.Time) (Cookie, int, error) {
	if len(value) != encodedLen {
		return Cookie{}, -1, ErrMalformedCookie
	}
	var raw [rawLen + 3]byte // room for the decoder's last partial quantum
	n, err := kr.enc.Decode(raw[:], []byte(value))
	// Decode skips '\r' and '\n', so a value of the right length that
	// contains them decodes to fewer bytes: reject it.
	if err != nil || n != rawLen || raw[0] != cookieVersion {
		return Cookie{}, -1, ErrMalformedCookie
	}
	key := -1
	var mac [macLen]byte
	for i, k := range kr.keys {
		sign(k, raw[:payloadLen], mac[:0])
		if hmac.Equal(mac[:], raw[payloadLen:rawLen]) {
			key = i
			break
		}
	}
	if key < 0 {
		return Cookie{}, -1, ErrBadSignature
	}
	c := Cookie{
		Backend: binary.BigEndian.Uint64(raw[1:9]),
		Expires: time.Unix(int64(binary.BigEndian.Uint64(raw[9:17])), 0),
	}
	if !now.Before(c.Expires) {
		return Cookie{}, -1, ErrExpiredCookie
	}
	return c, key, nil
}

// sign appends HMAC-SHA256(key, macLabel ‖ payload) to dst.
func sign(key, payload, dst []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(macLabel))
	m.Write(payload)
	return m.Sum(dst)
}
