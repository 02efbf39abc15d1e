package mtls

import (
	"context"
	"crypto/tls"
	"errors"
	"net"

	"github.com/rs/zerolog"
)

// TLSClient is the client side of a TLS connection that is not gRPC (the
// control plane's connections to Redis): a CA bundle that vouches for the
// server and, for mutual TLS, a certificate and key to present. Like the
// rest of this package it reads the files again at every handshake (a
// parsed copy is kept while their bytes do not change), so they rotate
// without a restart, and a set of files that cannot be used is logged and
// the last good set used until they are fixed. Safe for concurrent use.
type TLSClient struct {
	// Immutable after NewTLSClient.
	l          *loader
	serverName string
}

// NewTLSClient returns a TLSClient on files: CA is required; Cert and Key
// go together, or are both empty for a client that presents no
// certificate. serverName is the name the server's certificate must carry;
// empty means the host of each address dialled (an IP address matches an
// IP SAN). It fails if the files cannot be used now.
func NewTLSClient(files Files, serverName string, log zerolog.Logger) (*TLSClient, error) {
	var errs []error
	if files.CA == "" {
		errs = append(errs, errors.New("tls ca: required"))
	}
	if (files.Cert == "") != (files.Key == "") {
		errs = append(errs, errors.New("tls cert and key: set both or neither"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	l, err := newLoader(files, log)
	if err != nil {
		return nil, err
	}
	return &TLSClient{l: l, serverName: serverName}, nil
}

// Config returns a TLS 1.2+ client configuration from the files as they
// are now (or the last good set): their CA bundle as the roots, their
// certificate when there is one, and the server name.
func (c *TLSClient) Config() *tls.Config {
	m, _ := c.l.load() // never nil: newLoader succeeded
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: m.pool, ServerName: c.serverName}
	if m.cert != nil {
		cfg.Certificates = []tls.Certificate{*m.cert}
	}
	return cfg
}

// Dial connects to addr with d and completes a TLS handshake with Config,
// all within ctx and d's Timeout.
func (c *TLSClient) Dial(ctx context.Context, d *net.Dialer, network, addr string) (net.Conn, error) {
	td := &tls.Dialer{NetDialer: d, Config: c.Config()}
	return td.DialContext(ctx, network, addr)
}
