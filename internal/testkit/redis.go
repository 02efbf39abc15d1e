package testkit

import (
	"context"
	"net"
	"testing"

	"github.com/spillway-lb/spillway/internal/redisserver"
)

// StartRedis starts a real redis-server (installing Debian's package
// when missing, as EnsureTools does) on a free 127.0.0.1 port, requiring
// password unless it is empty, and stops it when the test ends.
func StartRedis(t testing.TB, password string) *redisserver.Server {
	t.Helper()
	return StartRedisWith(t, redisserver.Options{Password: password})
}

// StartRedisWith is StartRedis with opts (a password, TLS), on a free
// 127.0.0.1 port and in a temporary directory unless opts names them.
func StartRedisWith(t testing.TB, opts redisserver.Options) *redisserver.Server {
	t.Helper()
	if err := EnsureTools(redisserver.Tools); err != nil {
		t.Fatal(err)
	}
	if opts.Addr == "" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		opts.Addr = l.Addr().String()
		l.Close()
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	s, err := redisserver.Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}
