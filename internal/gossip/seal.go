package gossip

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
)

// Seals give gossip states per-node identities (docs/design.md §9: every value
// one process takes from another is authenticated). The gossip key only
// proves that a member belongs to the cluster, and every gfe host holds it,
// so without seals any key holder can publish under any node's name. A
// sealed state carries the signature of its JSON by the private key of its
// publisher's TLS certificate (the one it uses for the control plane's
// gRPC), and the certificate chain or its fingerprint:
//
//	{...the state's fields...,"seal":{"cert":FP,"sig":SIG,"chain":[DER,...]}}
//
// FP is the SHA-256 of the leaf certificate (DER), SIG the signature of
// sealDomain followed by the state's JSON without the seal member (the bytes
// before `,"seal":`, then `}`), and chain, when present, the certificates,
// leaf first (every field base64). The seal is the last member; JSON
// decoders that do not know it ignore it, so older members read sealed
// states as before.
//
// A Node with a Verifier (Options.Verifier) believes a state only if its
// seal verifies: the chain leads to the trusted roots, the leaf names the
// state's node (Verifier.Verify), and the state is at most
// Config.SealMaxAge old (its Version is its publisher's clock in Unix
// nanoseconds). A state without a seal is refused unless
// Config.AcceptUnsealed; a seal that does not verify is always refused.
// Each refusal is counted (Stats) and logged. So a key holder can publish
// only under the names its certificates carry: a compromised gfe speaks for
// itself, and nobody without a replica's key speaks for a replica.
//
// Chains travel where size does not matter or where they are needed: in
// push/pull payloads, in the state a node sends a member that just joined,
// and in the first state after the node's certificate changed. Other
// messages carry only FP, which a receiver resolves from the chains it has
// already verified; one it cannot resolve yet is refused as
// unknown_certificate and repaired by the next push/pull.

// Sealer signs this node's states (Options.Sealer).
type Sealer interface {
	// Seal returns the certificate chain of this node's key (DER, leaf
	// first) and the key's signature of msg. The leaf must name the node
	// (Config.Name) for receivers to believe the seal. It must be safe for
	// concurrent use.
	Seal(msg []byte) (chain [][]byte, sig []byte, err error)
}

// Verifier checks other nodes' seals (Options.Verifier).
type Verifier interface {
	// Verify returns nil if chain (DER, leaf first) verifies to the trusted
	// roots now, its leaf names node, and sig is the leaf key's signature
	// of msg; otherwise an error saying which check failed. It must be safe
	// for concurrent use and must not block on I/O.
	Verify(node string, chain [][]byte, msg, sig []byte) error
}

// sealDomain starts every signed message, so that a seal's signature
// cannot be taken for a signature of anything else made with the same key
// (a TLS handshake, say).
const sealDomain = "spillway gossip seal v1\n"

// sealedMessage returns what a seal signs for a state's JSON body.
func sealedMessage(body []byte) []byte {
	msg := make([]byte, 0, len(sealDomain)+len(body))
	return append(append(msg, sealDomain...), body...)
}

// sealWire is the seal member of a sealed state's JSON.
type sealWire struct {
	// Cert is the SHA-256 of the leaf certificate (DER).
	Cert []byte `json:"cert"`
	// Sig is the leaf key's signature of sealedMessage(body).
	Sig []byte `json:"sig"`
	// Chain is the certificate chain, leaf first (DER); omitted where the
	// receiver is expected to know it.
	Chain [][]byte `json:"chain,omitempty"`
}

// sealMember is how the seal member starts, after the state's last field.
var sealMember = []byte(`,"seal":`)

// spliceSeal returns body (a JSON object with at least one member) with sw
// as its last member.
func spliceSeal(body []byte, sw sealWire) ([]byte, error) {
	if len(body) < 2 || body[len(body)-1] != '}' {
		return nil, fmt.Errorf("gossip: seal: state JSON is not an object")
	}
	sj, err := json.Marshal(sw)
	if err != nil {
		return nil, fmt.Errorf("gossip: seal: %w", err)
	}
	out := make([]byte, 0, len(body)+len(sealMember)+len(sj))
	out = append(out, body[:len(body)-1]...)
	out = append(out, sealMember...)
	out = append(out, sj...)
	return append(out, '}'), nil
}

// errBadSeal is wrapped by the errors of a seal that cannot be parsed.
var errBadSeal = errors.New("gossip: malformed seal")

// splitSeal splits the JSON of a state that has a top-level seal member
// into the signed body and the seal. The seal must be the last member, as
// spliceSeal writes it: anything else does not split into a body whose
// signature can verify.
func splitSeal(js []byte) ([]byte, sealWire, error) {
	i := bytes.LastIndex(js, []byte(`,"seal":{`))
	if i < 0 || js[len(js)-1] != '}' {
		return nil, sealWire{}, fmt.Errorf("%w: the seal is not the last member", errBadSeal)
	}
	// Unmarshal refuses anything after the seal's object: members
	// after the seal do not split off.
	var sw sealWire
	if err := json.Unmarshal(js[i+len(sealMember):len(js)-1], &sw); err != nil {
		return nil, sealWire{}, fmt.Errorf("%w: %w", errBadSeal, err)
	}
	if len(sw.Cert) != sha256.Size || len(sw.Sig) == 0 {
		return nil, sealWire{}, fmt.Errorf("%w: cert must be a SHA-256 (%d bytes, got %d) and sig not empty", errBadSeal, sha256.Size, len(sw.Cert))
	}
	body := make([]byte, 0, i+1)
	body = append(append(body, js[:i]...), '}')
	return body, sw, nil
}

// certCache maps certificate fingerprints to the chains that verified
// under them, so that messages may carry only the fingerprint. Only chains
// that verified (with a valid signature) are stored, so its size is bounded
// by the certificates the trusted roots issued; maxCachedChains bounds it
// anyway. Safe for concurrent use.
type certCache struct {
	mu     sync.Mutex
	chains map[[sha256.Size]byte][][]byte
}

// maxCachedChains bounds certCache: past it the cache starts over (chains
// come back with the next push/pull).
const maxCachedChains = 4096

func (c *certCache) get(fp []byte) [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.chains[[sha256.Size]byte(fp)]
}

func (c *certCache) put(fp []byte, chain [][]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := [sha256.Size]byte(fp)
	if _, ok := c.chains[key]; ok {
		return
	}
	if c.chains == nil || len(c.chains) >= maxCachedChains {
		c.chains = make(map[[sha256.Size]byte][][]byte)
	}
	c.chains[key] = chain
}

// sealVerdict is what a receiver made of a state's seal.
type sealVerdict uint8

const (
	// sealNone: the state has no seal (or this node verifies none).
	sealNone sealVerdict = iota
	// sealOK: the seal verified; the state is its node's.
	sealOK
	// sealBad: malformed, or a chain, name or signature that does not
	// verify.
	sealBad
	// sealUnknownCert: only a fingerprint, of a certificate not seen yet.
	sealUnknownCert
	// sealStale: older than Config.SealMaxAge.
	sealStale
)

// RefusalReasons are the reasons a Node refuses a received state for its
// seal, as Stats counts them and daemons label their metrics.
var RefusalReasons = []string{"unsealed", "bad_seal", "unknown_certificate", "stale_seal"}
