package gfetest

import (
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// waitAcked waits, until deadline, for every byte written on c to have
// been sent and acknowledged by the peer (TCP_INFO: nothing unsent,
// nothing unacknowledged).
func waitAcked(c net.Conn, deadline time.Time) error {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return fmt.Errorf("waitAcked: %T is not a TCP connection", c)
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return fmt.Errorf("waitAcked: %w", err)
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		var info *unix.TCPInfo
		var ierr error
		if err := rc.Control(func(fd uintptr) { info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil {
			return fmt.Errorf("waitAcked: %w", err)
		}
		if ierr != nil {
			return fmt.Errorf("waitAcked: TCP_INFO: %w", ierr)
		}
		if info.Unacked == 0 && info.Notsent_bytes == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waitAcked: %d segments unacknowledged, %d bytes unsent at the deadline", info.Unacked, info.Notsent_bytes)
		}
		<-tick.C
	}
}
