package controlplane

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/devpki"
	"github.com/spillway-lb/spillway/internal/mtls"
	"github.com/spillway-lb/spillway/internal/quotaredis"
	"github.com/spillway-lb/spillway/internal/redisserver"
	"github.com/spillway-lb/spillway/internal/testkit"
	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

// TestAllocateQuotaRedisTLSAndPassword: a replica keeps its counters in a
// real redis-server that serves only mutual TLS and requires a password
// (docs/design.md §7, docs/quota.md): AllocateQuota charges there, counting
// right; then the password is changed in Redis and in the file, the replica's
// connections are dropped, and without a restart the replica charges again —
// after at most a few UNAVAILABLE answers (callers fail open).
func TestAllocateQuotaRedisTLSAndPassword(t *testing.T) {
	dir := t.TempDir()
	ca, err := devpki.NewCA("redis CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.IssueFiles(dir, "redis", devpki.Leaf{CommonName: "redis", Names: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := ca.IssueFiles(dir, "cp", devpki.Leaf{CommonName: "cp"})
	if err != nil {
		t.Fatal(err)
	}
	rs := testkit.StartRedisWith(t, redisserver.Options{Password: "first-secret",
		TLS: &redisserver.TLS{CA: srv.CA, Cert: srv.Cert, Key: srv.Key, AuthClients: true}})
	pw := filepath.Join(dir, "redis-password")
	if err := devpki.WriteFileAtomic(pw, []byte("first-secret\n")); err != nil {
		t.Fatal(err)
	}
	files := mtls.Files{CA: cli.CA, Cert: cli.Cert, Key: cli.Key}
	path := writeFile(t, t.TempDir(), "cp.yaml", quotaYAML())
	clk := clock.NewFake(time.Now().Truncate(time.Minute).Add(time.Second))
	qc, _ := quotaReplica(t, "cp-a", path, clk, func(c *Config) {
		c.QuotaRedis = quotaredis.Config{Addr: rs.Addr, PasswordFile: pw, TLS: files, Timeout: 2 * time.Second}
	})
	ctx := context.Background()
	allocate := func() error {
		_, err := qc.AllocateQuota(ctx, &pb.AllocateQuotaRequest{Consumer: "small", Values: calls(1), Mode: pb.QuotaMode_QUOTA_MODE_NORMAL})
		return err
	}
	for i := range 2 {
		if err := allocate(); err != nil {
			t.Fatalf("allocation %d over TLS: %v", i, err)
		}
	}

	// Rotate: Redis first, then the file.
	tc, err := mtls.NewTLSClient(files, "", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	admin := redis.NewClient(&redis.Options{Addr: rs.Addr, Password: "first-secret", TLSConfig: tc.Config(), MaxRetries: -1, DisableIdentity: true})
	defer admin.Close()
	if err := admin.ConfigSet(ctx, "requirepass", "second-secret").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	if err := allocate(); status.Code(err) != codes.Unavailable {
		t.Fatalf("old password in the file, connections dropped: AllocateQuota = %v, want UNAVAILABLE", err)
	}
	if err := devpki.WriteFileAtomic(pw, []byte("second-secret\n")); err != nil {
		t.Fatal(err)
	}
	// Within the breaker's OpenFor (250ms) of the file's change; the bound
	// is for a machine with both cores busy.
	deadline := time.Now().Add(5 * time.Second)
	unavailable := 0
	for {
		err := allocate()
		if err == nil {
			break
		}
		if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			t.Fatalf("after the new password reached the file: AllocateQuota = %v (%d UNAVAILABLE before)", err, unavailable)
		}
		unavailable++
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("after the rotation: %d UNAVAILABLE answers, then charged again", unavailable)
	// small's limit is 3: the third unit was just charged; the fourth is refused.
	if err := allocate(); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("the fourth unit of a limit of 3: AllocateQuota = %v, want RESOURCE_EXHAUSTED (one count across the rotation)", err)
	}
}
