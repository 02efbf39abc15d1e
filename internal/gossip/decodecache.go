package gossip

import (
	"bytes"
	"crypto/sha256"
	"slices"
	"sync"
)

// DecodeCache lets the Nodes of one process share what they decode from
// received states (Options.DecodeCache). Many Nodes in one process (the
// gossip benchmark, package gossipbench, runs a thousand) each receive the
// same states byte for byte, and each would hold its own decoded copy of
// every other node's state: maps of demand, RTT and load per peer, N² in
// all. With a shared cache, a state's JSON is decoded once per process
// and every Node holds the same NodeState maps and wire bytes, which the
// package's contract already makes read-only (NodeState: a state this
// package returns is shared and must not be modified).
//
// Sharing the decoding changes no verdict: the key is the SHA-256 of the
// state's JSON exactly as received, so two Nodes share an entry only for
// identical bytes, and every Node still checks seals (Options.Verifier),
// versions and membership itself. A daemon runs one Node and has no use
// for it. Safe for concurrent use.
//
// The cache holds two generations of at most Entries decoded states each:
// when the current one fills, it becomes the previous and a new one
// starts, so memory stays bounded whatever is received; a state decoded
// after its entry was dropped is simply decoded again.
type DecodeCache struct {
	max int

	mu        sync.Mutex
	cur, prev map[[sha256.Size]byte]*decodedState
	hits      uint64
	misses    uint64
}

// decodedState is one cache entry: a state as decodeStateJSON returns it,
// and the wire form with its seal's chain spliced in, once a Node that
// received the state without its chain built it.
type decodedState struct {
	ws wireState

	mu      sync.Mutex
	chain   [][]byte
	spliced []byte
}

// NewDecodeCache returns a cache of up to 2·entries decoded states
// (entries at least 1).
func NewDecodeCache(entries int) *DecodeCache {
	return &DecodeCache{max: max(entries, 1)}
}

// Stats returns how many lookups found a decoded state and how many
// decoded one.
func (c *DecodeCache) Stats() (hits, misses uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits, c.misses
}

// decode returns decodeStateJSON of a copy of js, from the cache when
// identical bytes were decoded before. It reads js only during the call.
// Only valid states are cached.
func (c *DecodeCache) decode(js []byte) (wireState, error) {
	key := sha256.Sum256(js)
	c.mu.Lock()
	e, ok := c.cur[key]
	if !ok {
		if e, ok = c.prev[key]; ok {
			c.putLocked(key, e)
		}
	}
	if ok {
		c.hits++
	} else {
		c.misses++
	}
	c.mu.Unlock()
	if ok {
		ws := e.ws
		ws.cached = e
		return ws, nil
	}
	ws, err := decodeStateJSON(bytes.Clone(js))
	if err != nil {
		return ws, err
	}
	e = &decodedState{ws: ws}
	c.mu.Lock()
	c.putLocked(key, e)
	c.mu.Unlock()
	ws.cached = e
	return ws, nil
}

func (c *DecodeCache) putLocked(key [sha256.Size]byte, e *decodedState) {
	if len(c.cur) >= c.max {
		c.prev, c.cur = c.cur, nil
	}
	if c.cur == nil {
		c.cur = make(map[[sha256.Size]byte]*decodedState)
	}
	c.cur[key] = e
}

// splicedWire returns the wire form of e's state with chain in its seal,
// built by build the first time (and again for a different chain), so
// that the Nodes sharing e share it too.
func (e *decodedState) splicedWire(chain [][]byte, build func() ([]byte, error)) ([]byte, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.spliced != nil && slices.EqualFunc(e.chain, chain, bytes.Equal) {
		return e.spliced, nil
	}
	wire, err := build()
	if err != nil {
		return nil, err
	}
	e.chain, e.spliced = chain, wire
	return wire, nil
}
