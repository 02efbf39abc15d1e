package mtls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/devpki"
)

// tlsServer serves TLS on a loopback port with f's certificate, asking for
// (requireClient: requiring) a client certificate f's CA vouches for, and
// answers each connection with the CN of its client certificate ("-" for
// none).
func tlsServer(t *testing.T, f devpki.Files, requireClient bool) string {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	auth := tls.VerifyClientCertIfGiven
	if requireClient {
		auth = tls.RequireAndVerifyClientCert
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: auth})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tc := c.(*tls.Conn)
				if tc.Handshake() != nil {
					return
				}
				cn := "-"
				if pc := tc.ConnectionState().PeerCertificates; len(pc) > 0 {
					cn = pc[0].Subject.CommonName
				}
				c.Write([]byte(cn + "\n"))
			}()
		}
	}()
	return l.Addr().String()
}

// TestTLSClient: a TLSClient reaches a TLS server its CA vouches for,
// presenting its certificate when it has one, as a server that requires
// one wants; with no certificate it reaches only a server that does not
// require one; with the wrong CA, none.
func TestTLSClient(t *testing.T) {
	p := newPKI(t)
	sf := p.issue(t, "redis", "127.0.0.1")
	cf := p.issue(t, "cp", "cp.example")
	other, err := devpki.NewCA("other CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := other.WriteCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	optional, required := tlsServer(t, sf, false), tlsServer(t, sf, true)
	for _, tt := range []struct {
		name    string
		files   Files
		addr    string
		want    string // the CN the server saw, or "" for a failed handshake
		wantErr string // from NewTLSClient
	}{
		{"mutual", Files{CA: cf.CA, Cert: cf.Cert, Key: cf.Key}, required, "cp", ""},
		{"CA only, client certificate optional", Files{CA: cf.CA}, optional, "-", ""},
		{"CA only, client certificate required", Files{CA: cf.CA}, required, "", ""},
		{"wrong CA", Files{CA: otherCA}, optional, "", ""},
		{"no CA", Files{Cert: cf.Cert, Key: cf.Key}, optional, "", "tls ca: required"},
		{"cert without key", Files{CA: cf.CA, Cert: cf.Cert}, optional, "", "set both or neither"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewTLSClient(tt.files, "", testLogger(t))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("NewTLSClient(%+v) = %v, want an error with %q", tt.files, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			got := ""
			if conn, err := c.Dial(ctx, &net.Dialer{}, "tcp", tt.addr); err == nil {
				// TLS 1.3: a refused client certificate shows on the first read.
				buf := make([]byte, 64)
				if n, err := conn.Read(buf); err == nil {
					got = strings.TrimSpace(string(buf[:n]))
				}
				conn.Close()
			}
			if got != tt.want {
				t.Errorf("the server saw %q, want %q (\"\": no connection)", got, tt.want)
			}
		})
	}
}
