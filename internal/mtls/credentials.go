package mtls

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
)

// Options holds the credentials' dependencies. The zero value is usable.
type Options struct {
	// Logger receives the plain-text warning, unusable files and (server)
	// refused handshakes, the last at most a few a second. The zero Logger
	// discards everything.
	Logger zerolog.Logger
	// Refused, if not nil, is called with the error of every handshake the
	// server refuses (a metric). It must be safe for concurrent use and
	// must not block.
	Refused func(error)
}

// ServerCredentials returns the gRPC server credentials of c: with TLS, a
// TLS 1.3 server that requires a client certificate the CA bundle vouches
// for and whose identity AllowedClients allows, re-reading the files at
// every handshake; with InsecurePlaintext, no security at all (after a
// warning). It fails if c is invalid or the files cannot be used now.
func ServerCredentials(c ServerConfig, opts Options) (credentials.TransportCredentials, error) {
	log := opts.Logger
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.InsecurePlaintext {
		log.Warn().Msg("INSECURE: --insecure-plaintext: the control-plane gRPC API is served WITHOUT TLS or client authentication; " +
			"anyone who can reach it reads the configuration (secrets are redacted) and gfes cannot tell it from an impostor")
		return insecure.NewCredentials(), nil
	}
	l, err := newLoader(c.Files, log)
	if err != nil {
		return nil, err
	}
	allowed := c.AllowedClients
	base := &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m, _ := l.load() // never nil: newLoader succeeded
			return &tls.Config{
				MinVersion:   tls.VersionTLS13,
				Certificates: []tls.Certificate{*m.cert},
				ClientAuth:   tls.RequireAndVerifyClientCert,
				ClientCAs:    m.pool,
				// Runs after the chain verified against ClientCAs.
				VerifyConnection: func(cs tls.ConnectionState) error {
					ids := Identities(cs.PeerCertificates[0])
					if !Allowed(allowed, ids) {
						return fmt.Errorf("client certificate %q is not allowed by --tls-allowed-clients %q", ids, allowed)
					}
					return nil
				},
			}, nil
		},
	}
	return &serverCreds{
		TransportCredentials: credentials.NewTLS(base),
		log:                  log.Sample(&zerolog.BurstSampler{Burst: 5, Period: time.Second}),
		refused:              opts.Refused,
	}, nil
}

// serverCreds logs and counts refused handshakes.
type serverCreds struct {
	credentials.TransportCredentials
	log     zerolog.Logger
	refused func(error)
}

func (s *serverCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := s.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		s.log.Warn().Err(err).Str("remote", raw.RemoteAddr().String()).Msg("TLS handshake refused")
		if s.refused != nil {
			s.refused(err)
		}
	}
	return conn, info, err
}

func (s *serverCreds) Clone() credentials.TransportCredentials {
	c := *s
	c.TransportCredentials = s.TransportCredentials.Clone()
	return &c
}

// ClientCredentials returns the gRPC client credentials of c: with TLS, a
// TLS 1.3 client that presents its certificate and accepts only a server
// certificate the CA bundle vouches for under ServerName (or the dialled
// host), re-reading the files at every handshake; with InsecurePlaintext,
// no security at all (after a warning). It fails if c is invalid or the
// files cannot be used now. opts.Refused is not used.
func ClientCredentials(c ClientConfig, opts Options) (credentials.TransportCredentials, error) {
	log := opts.Logger
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.InsecurePlaintext {
		log.Warn().Msg("INSECURE: --insecure-plaintext: snapshots are taken over gRPC WITHOUT TLS from whoever answers at the control-plane addresses")
		return insecure.NewCredentials(), nil
	}
	l, err := newLoader(c.Files, log)
	if err != nil {
		return nil, err
	}
	return &clientCreds{l: l, serverName: c.ServerName}, nil
}

// clientCreds builds a TLS client from the current files at every
// handshake and delegates to grpc's TLS credentials.
type clientCreds struct {
	l          *loader
	serverName string
}

func (c *clientCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	m, _ := c.l.load() // never nil: newLoader succeeded
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		RootCAs:      m.pool,
		Certificates: []tls.Certificate{*m.cert},
	}
	if c.serverName != "" {
		authority = c.serverName // grpc's TLS credentials verify the authority's host
	}
	return credentials.NewTLS(cfg).ClientHandshake(ctx, authority, raw)
}

func (c *clientCreds) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("mtls: client credentials cannot accept connections")
}

func (c *clientCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.3", ServerName: c.serverName}
}

func (c *clientCreds) Clone() credentials.TransportCredentials {
	cp := *c
	return &cp
}

// OverrideServerName sets the expected server name (deprecated in grpc;
// kept for the interface).
func (c *clientCreds) OverrideServerName(name string) error {
	c.serverName = name
	return nil
}

// PeerIdentities returns the identities of the client certificate of the
// gRPC call in ctx, or nil for a call without one (plain text).
func PeerIdentities(ctx context.Context) []string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return nil
	}
	return Identities(info.State.PeerCertificates[0])
}

// Authenticated reports whether the gRPC call in ctx came over a TLS
// connection with a verified client certificate (ServerCredentials allowed
// it).
func Authenticated(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return false
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	return ok && len(info.State.VerifiedChains) > 0
}
