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
	if err := EnsureTools(redisserver.Tools); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s, err := redisserver.Start(context.Background(), redisserver.Options{Addr: addr, Dir: t.TempDir(), Password: password})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}
