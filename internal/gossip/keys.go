package gossip

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
)

// Encrypted reports whether this node encrypts and authenticates gossip
// (it was configured with a key).
func (n *Node) Encrypted() bool { return n.keyring != nil }

// ErrNotEncrypted is returned by SetKeys on a node started without a key:
// memberlist cannot turn encryption on in a running node.
var ErrNotEncrypted = errors.New("gossip: this node runs without encryption; restart it with a key to use a keyring")

// SetKeys replaces the keyring of a running (or not yet running) node
// with keys (base64, as Config.Keys): the first becomes the primary, which
// encrypts everything this node sends from now on; every key decrypts what
// it receives; keys not listed are removed. It applies all of keys or
// none: a bad entry returns an error naming it (never the key) and
// changes nothing.
//
// Rotating a cluster's key without losing a member: (1) give every node
// [old, new] (new decrypts everywhere, old still encrypts); (2) once every
// node has it, give every node [new, old] (new encrypts; nodes not yet
// switched still decrypt it); (3) once every node has that, give every
// node [new]. Each step must reach every node before the next starts
// (TestKeyRotation).
func (n *Node) SetKeys(keys []string) error {
	if n.keyring == nil {
		return ErrNotEncrypted
	}
	decoded, err := decodeKeys("keys", keys)
	if err != nil {
		return fmt.Errorf("gossip: set keys: %w", err)
	}
	if len(decoded) == 0 {
		return fmt.Errorf("gossip: set keys: %w", errors.New("keys: empty keyring; an encrypted node needs at least one key"))
	}
	for _, k := range decoded {
		if err := n.keyring.AddKey(k); err != nil {
			return fmt.Errorf("gossip: set keys: %w", err)
		}
	}
	if err := n.keyring.UseKey(decoded[0]); err != nil {
		return fmt.Errorf("gossip: set keys: %w", err)
	}
	keep := make(map[string]bool, len(decoded))
	for _, k := range decoded {
		keep[string(k)] = true
	}
	removed := 0
	for _, k := range n.keyring.GetKeys() {
		if !keep[string(k)] {
			if err := n.keyring.RemoveKey(k); err != nil {
				return fmt.Errorf("gossip: set keys: %w", err)
			}
			removed++
		}
	}
	n.log.Info().Int("keys", len(decoded)).Int("removed", removed).Str("primary", KeyID(decoded[0])).
		Msg("gossip keyring updated")
	return nil
}

// KeyID names a key in logs without revealing it: the first 8 hex digits
// of its SHA-256.
func KeyID(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:4])
}

// PrimaryKeyID returns KeyID of the primary key, or "" without encryption.
func (n *Node) PrimaryKeyID() string {
	if n.keyring == nil {
		return ""
	}
	return KeyID(n.keyring.GetPrimaryKey())
}
