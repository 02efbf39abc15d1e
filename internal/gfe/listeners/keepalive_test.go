//go:build linux

package listeners

import (
	"bufio"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// serverSocket returns the descriptor, in this process, of the accepted
// end of client connection c: the socket whose local address is c's
// remote one and whose peer is c's local one.
func serverSocket(t *testing.T, c net.Conn) int {
	t.Helper()
	local, remote := c.LocalAddr().(*net.TCPAddr), c.RemoteAddr().(*net.TCPAddr)
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		sa, err := unix.Getsockname(fd)
		if err != nil {
			continue
		}
		pa, err := unix.Getpeername(fd)
		if err != nil {
			continue
		}
		s, ok1 := sa.(*unix.SockaddrInet4)
		p, ok2 := pa.(*unix.SockaddrInet4)
		if ok1 && ok2 && s.Port == remote.Port && p.Port == local.Port {
			return fd
		}
	}
	t.Fatalf("no socket of this process accepted %v", local)
	return -1
}

// TestKeepAliveAfterIdleTimeout: a client connection accepted by an http
// listener (fast path or net/http) probes TCP keep-alive only after its
// listener's idle_timeout and one probe interval of silence (real
// sockets, read back with getsockopt), so that a kept-alive connection
// idle_timeout closes is never probed. Go's listener default probed every
// idle connection after 15 s and every 15 s after: 15,000 idle clients
// were 1,000 probes a second, in bursts as they had connected.
func TestKeepAliveAfterIdleTimeout(t *testing.T) {
	tests := []struct {
		name string
		fast bool
		idle time.Duration
	}{
		{"fast path, default idle_timeout", true, 0},
		{"fast path, idle_timeout 30s", true, 30 * time.Second},
		{"net/http, idle_timeout 40s", false, 40 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := fastListener()
			l.FastPath = tt.fast
			if tt.idle != 0 {
				l.IdleTimeout = tt.idle
			}
			_, addr := fastManager(t, &fakeFast{}, l)
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			want := "fast"
			if !tt.fast {
				want = "slow"
			}
			if _, body := roundTrip(t, c, bufio.NewReader(c), "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"); body != want {
				t.Fatalf("body %q, want %q", body, want)
			}
			fd := serverSocket(t, c)
			on, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE)
			if err != nil {
				t.Fatal(err)
			}
			idle, err := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
			if err != nil {
				t.Fatal(err)
			}
			intvl, err := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPINTVL)
			if err != nil {
				t.Fatal(err)
			}
			wantIdle := int((l.IdleTimeout + keepAliveInterval) / time.Second)
			if on != 1 || idle != wantIdle || intvl != int(keepAliveInterval/time.Second) {
				t.Errorf("accepted socket: SO_KEEPALIVE %d, TCP_KEEPIDLE %ds, TCP_KEEPINTVL %ds; want 1, %ds (idle_timeout %v + %v), %v",
					on, idle, intvl, wantIdle, l.IdleTimeout, keepAliveInterval, keepAliveInterval)
			}
		})
	}
}
