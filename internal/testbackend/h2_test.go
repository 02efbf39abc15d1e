package testbackend

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// tlsClient returns a client that trusts exactly cert and offers protos by
// ALPN.
func tlsClient(t *testing.T, cert *x509.Certificate, protos ...string) *http.Client {
	t.Helper()
	if cert == nil {
		t.Fatal("no certificate")
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	p := new(http.Protocols)
	for _, proto := range protos {
		switch proto {
		case "h2":
			p.SetHTTP2(true)
		case "http/1.1":
			p.SetHTTP1(true)
		}
	}
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, NextProtos: protos},
		Protocols:       p,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: defaultTestTimeout}
}

// TestH2 checks that an h2 instance negotiates h2 (or http/1.1) by ALPN
// with its self-signed certificate and serves the routes and identity
// headers of the http protocol.
func TestH2(t *testing.T) {
	s := startServer(t, Config{Instances: []InstanceConfig{
		{Name: "h", Addr: "127.0.0.1:0", Region: "eu-west", Zone: "eu-west-b", Proto: ProtoH2, Capacity: DefaultCapacity()},
	}}, nil)
	base := "https://" + s.Addr("h")
	cert := s.Certificate("h")
	tests := []struct {
		name      string
		alpn      []string
		wantALPN  string
		wantProto string
	}{
		{name: "h2", alpn: []string{"h2", "http/1.1"}, wantALPN: "h2", wantProto: "HTTP/2.0"},
		{name: "http/1.1", alpn: []string{"http/1.1"}, wantALPN: "http/1.1", wantProto: "HTTP/1.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tlsClient(t, cert, tt.alpn...)
			resp, err := c.Get(base + "/api/items")
			if err != nil {
				t.Fatalf("GET /api/items: %v", err)
			}
			var got Reply
			err = json.NewDecoder(resp.Body).Decode(&got)
			resp.Body.Close()
			if err != nil {
				t.Fatalf("GET /api/items: body: %v", err)
			}
			if resp.StatusCode != http.StatusOK || resp.Proto != tt.wantProto || resp.TLS == nil || resp.TLS.NegotiatedProtocol != tt.wantALPN {
				t.Errorf("GET /api/items = %d over %s with ALPN %q, want 200 over %s with ALPN %q",
					resp.StatusCode, resp.Proto, resp.TLS.NegotiatedProtocol, tt.wantProto, tt.wantALPN)
			}
			for h, want := range map[string]string{HeaderBackend: "h", HeaderRegion: "eu-west", HeaderZone: "eu-west-b"} {
				if got := resp.Header.Get(h); got != want {
					t.Errorf("header %s = %q, want %q", h, got, want)
				}
			}
			got.Source = ""
			if diff := cmp.Diff(Reply{Instance: "h", Region: "eu-west", Zone: "eu-west-b", Method: "GET", Path: "/api/items"}, got); diff != "" {
				t.Errorf("Reply mismatch (-want +got):\n%s", diff)
			}
		})
	}

	// The per-instance admin routes work over TLS too.
	c := tlsClient(t, cert, "h2")
	steps := []struct {
		method, path string
		wantStatus   int
	}{
		{http.MethodGet, "/healthz", http.StatusOK},
		{http.MethodPost, "/admin/health?healthy=false", http.StatusOK},
		{http.MethodGet, "/healthz", http.StatusServiceUnavailable},
		{http.MethodGet, "/rtt", http.StatusNoContent},
	}
	for _, st := range steps {
		if r := mustDo(t, c, st.method, base+st.path); r.status != st.wantStatus || r.proto != "HTTP/2.0" {
			t.Errorf("%s %s = %d over %s, want %d over HTTP/2.0", st.method, st.path, r.status, r.proto, st.wantStatus)
		}
	}
	st := getStats(t, c, base)
	if st.Served != 2 || st.Probes != 3 || st.Healthy || st.Proto != ProtoH2 || st.Conns != 3 {
		t.Errorf("stats: served %d probes %d healthy %v proto %s conns %d; want 2, 3, false, h2, 3 (one per client)",
			st.Served, st.Probes, st.Healthy, st.Proto, st.Conns)
	}
	if s.Certificate("nope") != nil {
		t.Errorf("Certificate(nope) is not nil")
	}
}

// TestH2CertFiles checks that an h2 instance given cert and key files
// presents that certificate.
func TestH2CertFiles(t *testing.T) {
	gen, err := selfSignedCertificate("files", "127.0.0.1:0", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(gen.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: gen.Certificate[0]}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, Config{Instances: []InstanceConfig{
		{Name: "h", Addr: "127.0.0.1:0", Region: "r", Zone: "z", Proto: ProtoH2, CertFile: certFile, KeyFile: keyFile, Capacity: DefaultCapacity()},
	}}, nil)
	if got := s.Certificate("h"); got == nil || !bytes.Equal(got.Raw, gen.Certificate[0]) {
		t.Fatalf("Certificate(h) is not the certificate of %s", certFile)
	}
	resp, err := tlsClient(t, gen.Leaf, "h2").Get("https://" + s.Addr("h") + "/")
	if err != nil {
		t.Fatalf("GET / trusting only the file's certificate: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Equal(resp.TLS.PeerCertificates[0].Raw, gen.Certificate[0]) {
		t.Errorf("GET / = %d, want 200 with the file's certificate", resp.StatusCode)
	}

	_, err = New(Config{Instances: []InstanceConfig{
		{Name: "h", Addr: "127.0.0.1:0", Region: "r", Zone: "z", Proto: ProtoH2, CertFile: keyFile, KeyFile: keyFile},
	}}, Options{})
	if want := "testbackend: instance h: load certificate:"; err == nil || !bytes.Contains([]byte(err.Error()), []byte(want)) {
		t.Errorf("New with a key as certificate: error %v, want it to contain %q", err, want)
	}
}
