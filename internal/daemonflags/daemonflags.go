// Package daemonflags turns the command-line values the Spillway daemons
// (gfe, controlplane) share into their typed configuration, so both read
// the same flags the same way.
package daemonflags

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/internal/mtls"
)

// List splits a comma-separated flag value, dropping blanks and spaces.
func List(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Gossip returns the gossip configuration of a daemon named name that binds
// addr ("host:port"), joins the comma-separated seeds in join, and encrypts
// with key (base64; empty for none). Node states list per-group data that
// outgrows one Ethernet frame with many groups, so the UDP packet size is
// raised to 8192 bytes, which loopback and LANs carry.
func Gossip(name, addr, join, key string) (gossip.Config, error) {
	c := gossip.DefaultConfig()
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return c, fmt.Errorf("--gossip-addr: %w", err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return c, fmt.Errorf("--gossip-addr: port %q: %w", p, err)
	}
	c.Name, c.BindAddr, c.BindPort = name, host, port
	c.Seeds = List(join)
	c.SecretKey = key
	c.UDPBufferSize = 8192
	return c, nil
}

// ServerTLS returns the control plane's transport security from its flags:
// --tls-ca, --tls-cert, --tls-key, --tls-allowed-clients (comma-separated)
// and --insecure-plaintext. The result is validated by its user.
func ServerTLS(ca, cert, key, allowed string, plaintext bool) mtls.ServerConfig {
	return mtls.ServerConfig{
		Files:             mtls.Files{CA: ca, Cert: cert, Key: key},
		AllowedClients:    List(allowed),
		InsecurePlaintext: plaintext,
	}
}

// ClientTLS returns a control-plane client's transport security from its
// flags: --tls-ca, --tls-cert, --tls-key, --tls-server-name and
// --insecure-plaintext. The result is validated by its user.
func ClientTLS(ca, cert, key, serverName string, plaintext bool) mtls.ClientConfig {
	return mtls.ClientConfig{
		Files:             mtls.Files{CA: ca, Cert: cert, Key: key},
		ServerName:        serverName,
		InsecurePlaintext: plaintext,
	}
}
