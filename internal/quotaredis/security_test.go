package quotaredis

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/spillway-lb/spillway/internal/devpki"
	"github.com/spillway-lb/spillway/internal/mtls"
	"github.com/spillway-lb/spillway/internal/redisserver"
	"github.com/spillway-lb/spillway/internal/testkit"
	"github.com/spillway-lb/spillway/lb/quota"
)

// TestStoreTLS: a real redis-server serving TLS only, with and without
// client authentication. A Store with the CA (and, where Redis asks for
// one, a client certificate) allocates; one without TLS, with the wrong
// CA, or without the certificate Redis requires fails (ErrUnavailable).
func TestStoreTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := devpki.NewCA("redis test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.IssueFiles(dir, "redis", devpki.Leaf{CommonName: "redis", Names: []string{"127.0.0.1", "redis.example"}})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := ca.IssueFiles(dir, "cp", devpki.Leaf{CommonName: "cp"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := devpki.NewCA("other CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := other.WriteCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mutual := testkit.StartRedisWith(t, redisserver.Options{TLS: &redisserver.TLS{CA: srv.CA, Cert: srv.Cert, Key: srv.Key, AuthClients: true}})
	serverOnly := testkit.StartRedisWith(t, redisserver.Options{TLS: &redisserver.TLS{CA: srv.CA, Cert: srv.Cert, Key: srv.Key}})
	for _, tt := range []struct {
		name       string
		addr       string
		tls        mtls.Files
		serverName string
		wantErr    error
	}{
		{"mutual TLS", mutual.Addr, mtls.Files{CA: cli.CA, Cert: cli.Cert, Key: cli.Key}, "", nil},
		{"mutual TLS, server name", mutual.Addr, mtls.Files{CA: cli.CA, Cert: cli.Cert, Key: cli.Key}, "redis.example", nil},
		{"mutual TLS, wrong server name", mutual.Addr, mtls.Files{CA: cli.CA, Cert: cli.Cert, Key: cli.Key}, "other.example", ErrUnavailable},
		{"no client certificate, Redis requires one", mutual.Addr, mtls.Files{CA: cli.CA}, "", ErrUnavailable},
		{"CA only, Redis asks no certificate", serverOnly.Addr, mtls.Files{CA: cli.CA}, "", nil},
		{"wrong CA", serverOnly.Addr, mtls.Files{CA: otherCA}, "", ErrUnavailable},
		{"no TLS", serverOnly.Addr, mtls.Files{}, "", ErrUnavailable},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, Config{Addr: tt.addr, TLS: tt.tls, TLSServerName: tt.serverName, Timeout: 2 * time.Second}, nil)
			res, err := s.Allocate(context.Background(), time.Now(), quota.Request{Consumer: "small", Values: []quota.MetricValue{{Metric: "calls", Value: 1}}})
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("Allocate = %+v, %v; want error %v", res, err, tt.wantErr)
			}
			if err == nil && (res.Exhausted || res.Allocated[0].Value != 1) {
				t.Errorf("Allocate = %+v, want 1 call allocated", res)
			}
		})
	}
}

// TestConfigValidateTLS: the TLS flags' mistakes, each naming its flag.
func TestConfigValidateTLS(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"ok", Config{Addr: "r:6379", TLS: mtls.Files{CA: "ca", Cert: "c", Key: "k"}}, ""},
		{"CA only", Config{Addr: "r:6379", TLS: mtls.Files{CA: "ca"}}, ""},
		{"no redis", Config{TLS: mtls.Files{CA: "ca"}}, "quota-redis-tls-ca: TLS flags set without --quota-redis"},
		{"cert without CA", Config{Addr: "r:6379", TLS: mtls.Files{Cert: "c", Key: "k"}}, "quota-redis-tls-ca: required"},
		{"server name without CA", Config{Addr: "r:6379", TLSServerName: "r"}, "quota-redis-tls-ca: required"},
		{"cert without key", Config{Addr: "r:6379", TLS: mtls.Files{CA: "ca", Cert: "c"}}, "quota-redis-tls-cert, quota-redis-tls-key: set both or neither"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("Validate() = %v, want %q", err, tt.want)
			}
		})
	}
}

// TestStorePasswordRotation: Redis's password changes (CONFIG SET
// requirepass) under a running Store, which is not restarted, and its
// connections are killed: new ones fail AUTH (ErrUnavailable:
// gfes fail open) until the password file holds the new password, and
// then succeed: the file is read again for every new connection.
func TestStorePasswordRotation(t *testing.T) {
	r := testkit.StartRedis(t, "old-secret")
	pw := filepath.Join(t.TempDir(), "redis-password")
	if err := devpki.WriteFileAtomic(pw, []byte("old-secret\n")); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, Config{Addr: r.Addr, PasswordFile: pw, Timeout: 2 * time.Second}, nil)
	ctx := context.Background()
	one := quota.Request{Consumer: "big", Values: []quota.MetricValue{{Metric: "calls", Value: 1}}}
	if _, err := s.Allocate(ctx, time.Now(), one); err != nil {
		t.Fatalf("before the change: %v", err)
	}
	admin := redis.NewClient(&redis.Options{Addr: r.Addr, Password: "old-secret", MaxRetries: -1, DisableIdentity: true})
	defer admin.Close()
	if err := admin.ConfigSet(ctx, "requirepass", "new-secret").Err(); err != nil {
		t.Fatal(err)
	}
	// Drop the Store's connections (open ones stay authenticated; which
	// one the pool hands out is not ours to choose): new ones must AUTH.
	if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	failed := 0
	for range 4 { // the killed connection, then AUTHs with the old password
		if _, err := s.Allocate(ctx, time.Now(), one); errors.Is(err, ErrUnavailable) {
			failed++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if failed != 4 {
		t.Fatalf("with the old password in the file: %d of 4 allocations failed, want 4", failed)
	}
	if got := testutilCount(s, resultError); got < 3 {
		t.Errorf("%v calls counted as errors, want >= 3 (AUTH refused)", got)
	}
	if err := devpki.WriteFileAtomic(pw, []byte("new-secret\n")); err != nil {
		t.Fatal(err)
	}
	// The breaker may have opened (5 failures): within its OpenFor.
	waitAllocates(t, s, "after the password file changed", 5*time.Second)
	// An empty or missing file keeps the last good password.
	if err := devpki.WriteFileAtomic(pw, nil); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	waitAllocates(t, s, "with an empty password file (the last good password)", 5*time.Second)
}

// testutilCount returns the calls counted with result.
func testutilCount(s *Store, result string) float64 {
	return testutil.ToFloat64(s.calls.WithLabelValues(result))
}
