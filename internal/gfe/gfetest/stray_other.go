//go:build !linux

package gfetest

import (
	"errors"
	"net"
	"time"
)

// waitAcked needs Linux's TCP_INFO.
func waitAcked(net.Conn, time.Time) error {
	return errors.New("waitAcked: needs Linux (TCP_INFO)")
}
