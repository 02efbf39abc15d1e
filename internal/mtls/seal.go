package mtls

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Gossip seals (package internal/gossip, seal.go) prove which node
// published a gossip state: GossipSealer signs this node's states with the
// key of its TLS certificate, and GossipVerifier believes another node's
// state only if the certificate chains to the CA bundle and names that
// node. Both re-read their files as the rest of this package does, so
// certificates and CA bundles rotate without a restart.
//
// A certificate names a node when one of its identities (Identities: DNS
// SANs, URI SANs, the subject common name) equals the node's gossip name,
// ignoring case. deploy/mkcerts.sh and internal/topology issue CN=<node
// name>, so a gfe's certificate names only that gfe and a control plane's
// only that replica.

// namesNode reports whether one of ids is the node name node.
func namesNode(ids []string, node string) bool {
	return node != "" && slices.ContainsFunc(ids, func(id string) bool { return strings.EqualFold(id, node) })
}

// Sealer and Verifier are the method sets of gossip.Sealer and
// gossip.Verifier, which GossipSealer and GossipVerifier implement.
type (
	Sealer interface {
		Seal(msg []byte) (chain [][]byte, sig []byte, err error)
	}
	Verifier interface {
		Verify(node string, chain [][]byte, msg, sig []byte) error
	}
)

// GossipSealer signs gossip states with a node's TLS key (gossip.Sealer).
// Safe for concurrent use.
type GossipSealer struct {
	// Immutable after NewGossipSealer.
	m    *recentMaterial
	node string

	mu sync.Mutex
	// Guarded by mu: the leaf of the material last used, parsed.
	leafOf *material
	leaf   *x509.Certificate
}

// recentMaterial is a loader read at most once per reloadEvery: seals are
// made and checked many times a second, handshakes are not. Safe for
// concurrent use.
type recentMaterial struct {
	l   *loader
	now func() time.Time

	mu sync.Mutex
	// Guarded by mu.
	m  *material
	at time.Time
}

// reloadEvery is how often seals re-read their files: a rotated
// certificate or CA bundle is in use within a second.
const reloadEvery = time.Second

func newRecentMaterial(files Files, log zerolog.Logger) (*recentMaterial, error) {
	l, err := newLoader(files, log)
	if err != nil {
		return nil, err
	}
	return &recentMaterial{l: l, now: time.Now}, nil
}

// get returns the files' material, re-read if it is older than
// reloadEvery (or the last good one).
func (r *recentMaterial) get() *material {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.now(); r.m == nil || now.Sub(r.at) >= reloadEvery {
		r.m, _ = r.l.load() // never nil: newLoader succeeded
		r.at = now
	}
	return r.m
}

// NewGossipSealer returns the sealer of node from files (CA, certificate
// and key, as the node's TLS flags name them). It fails if the files cannot
// be used now, or if the certificate does not name node: every peer would
// refuse its seals.
func NewGossipSealer(files Files, node string, log zerolog.Logger) (*GossipSealer, error) {
	if err := errors.Join(files.validate()...); err != nil {
		return nil, fmt.Errorf("gossip seals: %w", err)
	}
	m, err := newRecentMaterial(files, log)
	if err != nil {
		return nil, fmt.Errorf("gossip seals: %w", err)
	}
	s := &GossipSealer{m: m, node: node}
	if _, _, err := s.Seal(nil); err != nil {
		return nil, err
	}
	return s, nil
}

// Seal returns the certificate chain (DER, leaf first) and the signature
// of msg by the certificate's key: ECDSA with SHA-256 (ASN.1), RSA PKCS #1
// v1.5 with SHA-256, or Ed25519, as x509.Certificate.CheckSignature checks
// them. It fails if the current certificate does not name the node.
func (s *GossipSealer) Seal(msg []byte) (chain [][]byte, sig []byte, err error) {
	m := s.m.get()
	files := s.m.l.files
	leaf, err := s.leafFor(m)
	if err != nil {
		return nil, nil, fmt.Errorf("gossip seals: %s: %w", files.Cert, err)
	}
	if ids := Identities(leaf); !namesNode(ids, s.node) {
		return nil, nil, fmt.Errorf("gossip seals: certificate %s names %q, not this node %q: peers would refuse its gossip states; "+
			"issue it with the node name as CN or SAN", files.Cert, ids, s.node)
	}
	signer, ok := m.cert.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("gossip seals: %s: the key cannot sign", files.Key)
	}
	switch signer.Public().(type) {
	case *ecdsa.PublicKey, *rsa.PublicKey:
		digest := sha256.Sum256(msg)
		sig, err = signer.Sign(rand.Reader, digest[:], crypto.SHA256)
	case ed25519.PublicKey:
		sig, err = signer.Sign(rand.Reader, msg, crypto.Hash(0))
	default:
		return nil, nil, fmt.Errorf("gossip seals: %s: unsupported key type %T", files.Key, signer.Public())
	}
	if err != nil {
		return nil, nil, fmt.Errorf("gossip seals: sign: %w", err)
	}
	return m.cert.Certificate, sig, nil
}

// leafFor returns m's leaf certificate, parsed once per material.
func (s *GossipSealer) leafFor(m *material) (*x509.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leafOf != m {
		leaf, err := x509.ParseCertificate(m.cert.Certificate[0])
		if err != nil {
			return nil, err
		}
		s.leafOf, s.leaf = m, leaf
	}
	return s.leaf, nil
}

// sealAlgorithm is the x509 algorithm GossipSealer signs with for pub.
func sealAlgorithm(pub any) (x509.SignatureAlgorithm, error) {
	switch pub.(type) {
	case *ecdsa.PublicKey:
		return x509.ECDSAWithSHA256, nil
	case *rsa.PublicKey:
		return x509.SHA256WithRSA, nil
	case ed25519.PublicKey:
		return x509.PureEd25519, nil
	}
	return 0, fmt.Errorf("unsupported key type %T", pub)
}

// GossipVerifier checks gossip seals against a CA bundle
// (gossip.Verifier). A chain that verified is remembered for a minute
// (and while the bundle's bytes do not change), so that a state costs one
// signature check; the bundle is re-read at most once a second. Safe for
// concurrent use.
type GossipVerifier struct {
	// Immutable after NewGossipVerifier.
	m   *recentMaterial
	now func() time.Time

	mu sync.Mutex
	// Guarded by mu.
	chains map[[sha256.Size]byte]verifiedChain
}

// verifiedChain is a leaf whose chain verified against pool at checked.
type verifiedChain struct {
	leaf    *x509.Certificate
	ids     []string
	pool    *x509.CertPool
	checked time.Time
}

// chainRecheck is how long a verified chain is trusted before it is
// verified again (its expiry, a changed bundle); maxVerifiedChains bounds
// the memory of them.
const (
	chainRecheck      = time.Minute
	maxVerifiedChains = 4096
)

// NewGossipVerifier returns a verifier of seals against the CA bundle in
// ca (re-read as it changes). It fails if the file cannot be used now.
func NewGossipVerifier(ca string, log zerolog.Logger) (*GossipVerifier, error) {
	if ca == "" {
		return nil, errors.New("gossip seals: a CA bundle is required")
	}
	m, err := newRecentMaterial(Files{CA: ca}, log)
	if err != nil {
		return nil, fmt.Errorf("gossip seals: %w", err)
	}
	return &GossipVerifier{m: m, now: time.Now, chains: map[[sha256.Size]byte]verifiedChain{}}, nil
}

// Verify returns nil if chain verifies to the CA bundle now, its leaf names
// node, and sig is the leaf key's signature of msg; otherwise an error
// saying which check failed.
func (v *GossipVerifier) Verify(node string, chain [][]byte, msg, sig []byte) error {
	if len(chain) == 0 {
		return errors.New("no certificate")
	}
	vc, err := v.chain(chain)
	if err != nil {
		return err
	}
	if !namesNode(vc.ids, node) {
		return fmt.Errorf("certificate %q does not name node %q", vc.ids, node)
	}
	algo, err := sealAlgorithm(vc.leaf.PublicKey)
	if err != nil {
		return err
	}
	if err := vc.leaf.CheckSignature(algo, msg, sig); err != nil {
		return fmt.Errorf("signature of certificate %q: %w", vc.ids, err)
	}
	return nil
}

// chain returns the verified leaf of chain, from memory when it verified
// less than chainRecheck ago against the current bundle.
func (v *GossipVerifier) chain(chain [][]byte) (verifiedChain, error) {
	m := v.m.get()
	now := v.now()
	fp := sha256.Sum256(chain[0])
	v.mu.Lock()
	vc, ok := v.chains[fp]
	v.mu.Unlock()
	if ok && vc.pool == m.pool && now.Sub(vc.checked) < chainRecheck && now.Before(vc.leaf.NotAfter) {
		return vc, nil
	}
	leaf, err := x509.ParseCertificate(chain[0])
	if err != nil {
		return verifiedChain{}, fmt.Errorf("certificate: %w", err)
	}
	inter := x509.NewCertPool()
	for i, der := range chain[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return verifiedChain{}, fmt.Errorf("chain[%d]: %w", i+1, err)
		}
		inter.AddCert(c)
	}
	ids := Identities(leaf)
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots: m.pool, Intermediates: inter, CurrentTime: now,
		// Any usage: gfe certificates are TLS clients, control planes'
		// TLS servers; what matters here is who the CA says holds it.
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	}); err != nil {
		return verifiedChain{}, fmt.Errorf("certificate %q: %w", ids, err)
	}
	vc = verifiedChain{leaf: leaf, ids: ids, pool: m.pool, checked: now}
	v.mu.Lock()
	if len(v.chains) >= maxVerifiedChains {
		clear(v.chains)
	}
	v.chains[fp] = vc
	v.mu.Unlock()
	return vc, nil
}

// GossipSeals returns the gossip sealer and verifier of a daemon named node
// from its TLS files, for gossip.Options: the verifier checks seals against
// ca (the daemon's --gossip-ca; empty means files.CA), the sealer signs
// with files' certificate and key. Without TLS files (plain text) it
// returns neither: gossip then believes every key holder alike. A
// certificate that does not name node gives no sealer (logged as a
// warning: peers that verify seals refuse this node's states, and say so)
// but still a verifier; an unusable CA bundle is an error. Absent ones are nil
// interfaces, ready for gossip.Options.
func GossipSeals(files Files, ca, node string, log zerolog.Logger) (Sealer, Verifier, error) {
	if ca == "" {
		ca = files.CA
	}
	if ca == "" {
		return nil, nil, nil
	}
	v, err := NewGossipVerifier(ca, log)
	if err != nil {
		return nil, nil, err
	}
	if files.Cert == "" && files.Key == "" {
		log.Warn().Str("node", node).Msg("no TLS certificate: this node's gossip states go out unsealed, and peers that verify seals refuse them")
		return nil, v, nil
	}
	s, err := NewGossipSealer(files, node, log)
	if err != nil {
		log.Warn().Err(err).Msg("this node's gossip states go out unsealed, and peers that verify seals refuse them")
		return nil, v, nil
	}
	return s, v, nil
}
