package mtls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/spillway-lb/spillway/internal/devpki"
)

const defaultTestTimeout = 30 * time.Second

func testLogger(t *testing.T) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
}

func TestAllowed(t *testing.T) {
	tests := []struct {
		name    string
		allowed []string
		ids     []string
		want    bool
	}{
		{"exact DNS", []string{"gfe-1.example"}, []string{"gfe-1.example"}, true},
		{"case-insensitive DNS", []string{"GFE-1.example"}, []string{"gfe-1.example"}, true},
		{"other name", []string{"gfe-1.example"}, []string{"gfe-2.example"}, false},
		{"wildcard one label", []string{"*.gfe.example"}, []string{"nyc-1.gfe.example"}, true},
		{"wildcard two labels", []string{"*.gfe.example"}, []string{"a.nyc.gfe.example"}, false},
		{"wildcard bare suffix", []string{"*.gfe.example"}, []string{"gfe.example"}, false},
		{"wildcard empty label", []string{"*.gfe.example"}, []string{".gfe.example"}, false},
		{"wildcard suffix lookalike", []string{"*.gfe.example"}, []string{"x.evilgfe.example"}, false},
		{"any", []string{"*"}, []string{"whatever"}, true},
		{"uri exact", []string{"spiffe://spillway/gfe/nyc-1"}, []string{"spiffe://spillway/gfe/nyc-1"}, true},
		{"uri case matters", []string{"spiffe://spillway/gfe/NYC-1"}, []string{"spiffe://spillway/gfe/nyc-1"}, false},
		{"second identity", []string{"cn-name"}, []string{"dns.example", "cn-name"}, true},
		{"nothing allowed", nil, []string{"gfe-1.example"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Allowed(tt.allowed, tt.ids); got != tt.want {
				t.Errorf("Allowed(%q, %q) = %v, want %v", tt.allowed, tt.ids, got, tt.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	files := Files{CA: "ca.crt", Cert: "s.crt", Key: "s.key"}
	server := []struct {
		name    string
		c       ServerConfig
		wantErr string // substring; "" for valid
	}{
		{"nothing set", ServerConfig{}, "no transport security configured: set --tls-ca"},
		{"plaintext", ServerConfig{InsecurePlaintext: true}, ""},
		{"plaintext and files", ServerConfig{Files: files, InsecurePlaintext: true}, "insecure-plaintext: cannot be combined"},
		{"tls", ServerConfig{Files: files, AllowedClients: []string{"*.gfe.example"}}, ""},
		{"no allow list", ServerConfig{Files: files}, "tls-allowed-clients: required with TLS"},
		{"missing key", ServerConfig{Files: Files{CA: "a", Cert: "b"}, AllowedClients: []string{"*"}}, "tls-key: required with TLS"},
		{"bad pattern", ServerConfig{Files: files, AllowedClients: []string{"gfe*"}}, `tls-allowed-clients[0]: "gfe*" is not a name`},
		{"bad wildcard", ServerConfig{Files: files, AllowedClients: []string{"*gfe.example"}}, `tls-allowed-clients[0]`},
	}
	for _, tt := range server {
		t.Run("server/"+tt.name, func(t *testing.T) {
			checkErr(t, tt.c.Validate(), tt.wantErr)
		})
	}
	client := []struct {
		name    string
		c       ClientConfig
		wantErr string
	}{
		{"nothing set", ClientConfig{}, "no transport security configured: set --tls-ca, --tls-cert and --tls-key"},
		{"plaintext", ClientConfig{InsecurePlaintext: true}, ""},
		{"plaintext and name", ClientConfig{InsecurePlaintext: true, ServerName: "cp"}, "cannot be combined"},
		{"tls", ClientConfig{Files: files}, ""},
		{"missing ca", ClientConfig{Files: Files{Cert: "b", Key: "c"}}, "tls-ca: required with TLS"},
	}
	for _, tt := range client {
		t.Run("client/"+tt.name, func(t *testing.T) {
			checkErr(t, tt.c.Validate(), tt.wantErr)
		})
	}
}

func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("Validate() = %v, want nil", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Errorf("Validate() = %v, want an error containing %q", err, want)
	}
}

// pki is a CA with the files of a server and of clients in a directory.
type pki struct {
	ca  *devpki.CA
	dir string
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	ca, err := devpki.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &pki{ca: ca, dir: t.TempDir()}
}

func (p *pki) issue(t *testing.T, base string, names ...string) devpki.Files {
	t.Helper()
	f, err := p.ca.IssueFiles(p.dir, base, devpki.Leaf{CommonName: base, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// server serves the gRPC health service with creds on loopback until the
// test ends.
func server(t *testing.T, creds credentials.TransportCredentials) (string, *grpchealth.Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(creds))
	h := grpchealth.NewServer()
	healthpb.RegisterHealthServer(srv, h)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), h
}

// check makes one health Check call over a new connection and returns the
// server certificate's serial seen, or the error.
func check(t *testing.T, addr string, creds credentials.TransportCredentials) (int64, error) {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	var p peer.Peer
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p)); err != nil {
		return 0, err
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return 0, nil
	}
	return info.State.PeerCertificates[0].SerialNumber.Int64(), nil
}

func newClientCreds(t *testing.T, f devpki.Files, serverName string) credentials.TransportCredentials {
	t.Helper()
	c, err := ClientCredentials(ClientConfig{Files: Files(f), ServerName: serverName}, Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestServerRefusesUnauthenticatedClients dials a mutual-TLS server as an
// attacker would: in clear text, with TLS but no certificate, with a
// certificate from another CA, with a valid certificate of an identity not
// on the allow list; only the allowed certificate gets an answer.
func TestServerRefusesUnauthenticatedClients(t *testing.T) {
	p := newPKI(t)
	sf := p.issue(t, "cp", "127.0.0.1", "cp.spillway.internal")
	screds, err := ServerCredentials(ServerConfig{Files: Files(sf), AllowedClients: []string{"*.gfe.spillway.internal"}}, Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := server(t, screds)

	other := newPKI(t)
	forged := other.issue(t, "forged", "nyc-1.gfe.spillway.internal")
	// The attacker's bundle trusts the real CA, so only its own
	// certificate is at fault.
	forged.CA = sf.CA
	tests := []struct {
		name  string
		creds credentials.TransportCredentials
		ok    bool
	}{
		{"plain text", insecure.NewCredentials(), false},
		{"TLS without a client certificate", credentials.NewTLS(tlsConfigNoCert(t, sf.CA)), false},
		{"certificate from another CA", newClientCreds(t, forged, ""), false},
		{"valid certificate, identity not allowed", newClientCreds(t, p.issue(t, "backend", "backend.spillway.internal"), ""), false},
		{"valid certificate, allowed identity", newClientCreds(t, p.issue(t, "gfe", "nyc-1.gfe.spillway.internal"), ""), true},
		{"allowed certificate, wrong server name expected", newClientCreds(t, p.issue(t, "gfe2", "nyc-2.gfe.spillway.internal"), "other.spillway.internal"), false},
		{"allowed certificate, server name from the certificate", newClientCreds(t, p.issue(t, "gfe3", "nyc-3.gfe.spillway.internal"), "cp.spillway.internal"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := check(t, addr, tt.creds)
			if (err == nil) != tt.ok {
				t.Errorf("Check() error = %v, want success %v", err, tt.ok)
			}
		})
	}
}

// tlsConfigNoCert is a TLS client that trusts the CA in caFile and has no
// certificate of its own.
func tlsConfigNoCert(t *testing.T, caFile string) *tls.Config {
	t.Helper()
	b, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(b)
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}
}

// TestRotationWithoutRestart replaces the server's and the client's
// certificates, then the CA, under a live server and an open stream: the
// stream keeps working, every new connection succeeds and presents the new
// certificate, and a half-written set of files is ignored until it is
// whole.
func TestRotationWithoutRestart(t *testing.T) {
	p := newPKI(t)
	sf := p.issue(t, "cp", "127.0.0.1")
	cf := p.issue(t, "gfe", "nyc-1.gfe.spillway.internal")
	screds, err := ServerCredentials(ServerConfig{Files: Files(sf), AllowedClients: []string{"*.gfe.spillway.internal"}}, Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	addr, h := server(t, screds)
	ccreds := newClientCreds(t, cf, "")

	// A long-lived stream, as a gfe's snapshot stream.
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(ccreds))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	h.SetServingStatus("svc", healthpb.HealthCheckResponse_SERVING)
	watch, err := healthpb.NewHealthClient(cc).Watch(ctx, &healthpb.HealthCheckRequest{Service: "svc"})
	if err != nil {
		t.Fatal(err)
	}
	expectStatus := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		m, err := watch.Recv()
		if err != nil || m.GetStatus() != want {
			t.Fatalf("stream Recv() = %v, %v; want %v", m, err, want)
		}
	}
	expectStatus(healthpb.HealthCheckResponse_SERVING)
	serial0, err := check(t, addr, ccreds)
	if err != nil {
		t.Fatalf("before rotation: %v", err)
	}

	// 1. New leaf certificates for both sides.
	sf2 := p.issue(t, "cp", "127.0.0.1")
	p.issue(t, "gfe", "nyc-1.gfe.spillway.internal")
	serial1, err := check(t, addr, ccreds)
	if err != nil || serial1 == serial0 {
		t.Fatalf("after rotating the leaves: serial %d (was %d), %v; want the new certificate and no error", serial1, serial0, err)
	}
	h.SetServingStatus("svc", healthpb.HealthCheckResponse_NOT_SERVING)
	expectStatus(healthpb.HealthCheckResponse_NOT_SERVING)

	// 2. A half-written set: a new certificate whose key is not there yet.
	is, err := p.ca.Issue(devpki.Leaf{CommonName: "cp", Names: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := devpki.WriteFileAtomic(sf2.Cert, is.CertPEM); err != nil {
		t.Fatal(err)
	}
	if s, err := check(t, addr, ccreds); err != nil || s != serial1 {
		t.Fatalf("with a certificate whose key is not written: serial %d, %v; want the last good one (%d)", s, err, serial1)
	}
	if err := devpki.WriteFileAtomic(sf2.Key, is.KeyPEM); err != nil {
		t.Fatal(err)
	}
	if s, err := check(t, addr, ccreds); err != nil || s != is.Cert.SerialNumber.Int64() {
		t.Fatalf("once the key is written: serial %d, %v; want %d", s, err, is.Cert.SerialNumber.Int64())
	}

	// 3. A new CA: both bundles trust both roots, then the server's
	// certificate comes from the new CA while the client's is still from
	// the old one.
	ca2, err := devpki.NewCA("test CA 2", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	bundle := append(append([]byte{}, p.ca.PEM...), ca2.PEM...)
	if err := devpki.WriteFileAtomic(sf.CA, bundle); err != nil { // shared by both sides here
		t.Fatal(err)
	}
	is2, err := ca2.Issue(devpki.Leaf{CommonName: "cp", Names: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := devpki.WriteFileAtomic(sf2.Key, is2.KeyPEM); err != nil {
		t.Fatal(err)
	}
	if err := devpki.WriteFileAtomic(sf2.Cert, is2.CertPEM); err != nil {
		t.Fatal(err)
	}
	if s, err := check(t, addr, ccreds); err != nil || s != is2.Cert.SerialNumber.Int64() {
		t.Fatalf("after moving the server to the new CA: serial %d, %v; want %d", s, err, is2.Cert.SerialNumber.Int64())
	}
	h.SetServingStatus("svc", healthpb.HealthCheckResponse_SERVING)
	expectStatus(healthpb.HealthCheckResponse_SERVING)
}

func TestCredentialsRefuseBadFilesAtStart(t *testing.T) {
	p := newPKI(t)
	sf := p.issue(t, "cp", "127.0.0.1")
	empty := filepath.Join(p.dir, "empty.pem")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		files   Files
		wantErr string
	}{
		{"missing CA", Files{CA: filepath.Join(p.dir, "nope.crt"), Cert: sf.Cert, Key: sf.Key}, "nope.crt"},
		{"empty CA", Files{CA: empty, Cert: sf.Cert, Key: sf.Key}, "no PEM certificate in the CA bundle"},
		{"key of another certificate", Files{CA: sf.CA, Cert: sf.Cert, Key: p.issue(t, "x").Key}, "cp.crt with"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ServerCredentials(ServerConfig{Files: tt.files, AllowedClients: []string{"*"}}, Options{Logger: testLogger(t)})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ServerCredentials() = %v, want an error containing %q", err, tt.wantErr)
			}
			_, err = ClientCredentials(ClientConfig{Files: tt.files}, Options{Logger: testLogger(t)})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ClientCredentials() = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}
