package deploy

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/spillway-lb/spillway/internal/mtls"
)

const handshakeTimeout = 20 * time.Second

// mkcerts runs deploy/mkcerts.sh with backend in dir.
func mkcerts(t *testing.T, backend, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{"mkcerts.sh", "--dir", dir}, args...)...)
	cmd.Env = append(os.Environ(), "MKCERTS_BACKEND="+backend)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mkcerts.sh %q: %v\n%s", args, err, out)
	}
}

// files names a host's PEM files in dir, as the daemons' --tls-* flags do.
func files(dir, host string) mtls.Files {
	return mtls.Files{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, host+".crt"), Key: filepath.Join(dir, host+".key")}
}

// serve serves the gRPC health service over internal/mtls server
// credentials (a control plane's) on loopback until the test ends.
func serve(t *testing.T, f mtls.Files, allowed ...string) string {
	t.Helper()
	creds, err := mtls.ServerCredentials(mtls.ServerConfig{Files: f, AllowedClients: allowed}, mtls.Options{Logger: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatalf("ServerCredentials(%s): %v", f.Cert, err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(creds))
	healthpb.RegisterHealthServer(srv, grpchealth.NewServer())
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// call makes one health call to addr over a new connection with a gfe's
// client credentials, and returns the identities of the server's
// certificate it verified, or the error.
func call(t *testing.T, addr string, f mtls.Files, serverName string) ([]string, error) {
	t.Helper()
	creds, err := mtls.ClientCredentials(mtls.ClientConfig{Files: f, ServerName: serverName}, mtls.Options{Logger: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatalf("ClientCredentials(%s): %v", f.Cert, err)
	}
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	defer cancel()
	var p peerInfo
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p.Peer)); err != nil {
		return nil, err
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		t.Fatalf("call(%s): no verified TLS peer", addr)
	}
	return mtls.Identities(info.State.PeerCertificates[0]), nil
}

// TestMkcertsMutualTLS makes a CA and the certificates of two control
// planes and two gfes with deploy/mkcerts.sh (with openssl, and with its
// devpki fallback), and checks them with internal/mtls as the daemons use
// it: a gfe completes a real mutual-TLS handshake with a control plane that
// allows "*.gfe.spillway.internal", whether it dials the control plane's
// IP or its name; everything else is refused — a wrong server name, a
// control plane's certificate presented as a client, a certificate from
// another CA, and (openssl: key usages) a gfe's certificate presented as a
// server. Running the script again keeps the CA, so a host added later is
// accepted by the files already deployed.
func TestMkcertsMutualTLS(t *testing.T) {
	needTool(t, "openssl")
	for _, backend := range []string{"openssl", "devpki"} {
		t.Run(backend, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "pki")
			mkcerts(t, backend, dir, "cp/cp-1=127.0.0.1", "cp/cp-2", "gfe/gfe-nyc-1", "gfe/gfe-lon-1")
			other := filepath.Join(t.TempDir(), "other")
			mkcerts(t, backend, other, "gfe/gfe-nyc-1")

			for _, name := range []string{"ca", "cp-1", "cp-2", "gfe-nyc-1", "gfe-lon-1"} {
				st, err := os.Stat(filepath.Join(dir, name+".key"))
				if err != nil {
					t.Fatal(err)
				}
				if st.Mode().Perm() != 0o600 {
					t.Errorf("%s.key mode %v, want 0600", name, st.Mode().Perm())
				}
			}
			wantIDs := map[string][]string{
				"cp-1":      {"cp-1.cp.spillway.internal", "cp-1"},
				"gfe-nyc-1": {"gfe-nyc-1.gfe.spillway.internal", "gfe-nyc-1"},
			}
			for host, want := range wantIDs {
				if got := identities(t, filepath.Join(dir, host+".crt")); !slices.Equal(got, want) {
					t.Errorf("%s.crt identities %q, want %q", host, got, want)
				}
			}

			cp := serve(t, files(dir, "cp-1"), "*.gfe.spillway.internal")
			foreign := files(other, "gfe-nyc-1")
			foreign.CA = files(dir, "").CA // trusts the real CA: only its own certificate is at fault
			tests := []struct {
				name       string
				addr       string
				client     mtls.Files
				serverName string
				ok         bool
			}{
				{name: "gfe dials the control plane's IP", addr: cp, client: files(dir, "gfe-nyc-1"), ok: true},
				{name: "gfe dials the control plane's name", addr: cp, client: files(dir, "gfe-lon-1"), serverName: "cp-1.cp.spillway.internal", ok: true},
				{name: "another control plane's name expected", addr: cp, client: files(dir, "gfe-nyc-1"), serverName: "cp-2.cp.spillway.internal"},
				{name: "a control plane's certificate as a client", addr: cp, client: files(dir, "cp-2")},
				{name: "a gfe certificate from another CA", addr: cp, client: foreign},
			}
			if backend == "openssl" {
				// A stolen gfe key cannot pose as a control plane, even to
				// a client that expects the gfe's own name.
				gfeAsServer := serve(t, files(dir, "gfe-nyc-1"), "*")
				tests = append(tests, struct {
					name       string
					addr       string
					client     mtls.Files
					serverName string
					ok         bool
				}{name: "a gfe certificate as a server", addr: gfeAsServer, client: files(dir, "gfe-lon-1"), serverName: "gfe-nyc-1.gfe.spillway.internal"})
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					ids, err := call(t, tt.addr, tt.client, tt.serverName)
					if (err == nil) != tt.ok {
						t.Fatalf("handshake error = %v, want success %v", err, tt.ok)
					}
					if tt.ok && !slices.Contains(ids, "cp-1.cp.spillway.internal") {
						t.Errorf("server identities %q, want cp-1.cp.spillway.internal", ids)
					}
				})
			}

			// A later run adds a host with the same CA.
			ca, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
			if err != nil {
				t.Fatal(err)
			}
			mkcerts(t, backend, dir, "gfe/gfe-tokyo-1")
			if again, _ := os.ReadFile(filepath.Join(dir, "ca.crt")); !bytes.Equal(ca, again) {
				t.Fatal("a second run replaced ca.crt; want it kept")
			}
			if _, err := call(t, cp, files(dir, "gfe-tokyo-1"), ""); err != nil {
				t.Errorf("gfe-tokyo-1, made by a later run: %v, want accepted", err)
			}
		})
	}
}

// identities returns the internal/mtls identities of the certificate in
// path.
func identities(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return mtls.Identities(c)
}

// peerInfo wraps the peer a call was answered by.
type peerInfo struct{ peer.Peer }
