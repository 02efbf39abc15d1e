package gossipbench

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// network is an in-memory stand-in for the UDP and TCP sockets of many
// memberlist nodes in one process. memberlist's own MockNetwork (v0.7.0)
// blocks a sender until the receiver reads each packet and keeps
// delivering to a node that shut down, which would stall everyone that
// probes a dead member; this one behaves like a LAN: packets go into a
// bounded queue and are dropped when it is full or the receiver is dead,
// and dialing a dead node fails. Every transport counts the bytes it
// sends (packets and stream writes), which is what the benchmark reports.
type network struct {
	mu     sync.RWMutex
	byAddr map[string]*transport
	next   int
}

// queueDepth is how many packets a node's receive queue holds, as a
// socket's receive buffer would: 212 KiB of default Linux rmem holds
// about 90 full 1400-byte packets and about 280 small ones (each counts
// its buffer's true size, 2.3 KiB or 768 B). It was 1,024, which a node
// starved of CPU filled with copies of packets, megabytes per node.
const queueDepth = 256

var errUnreachable = errors.New("gossipbench: no route to host")

func newNetwork() *network { return &network{byAddr: make(map[string]*transport)} }

// newTransport returns the transport of a new node, with a unique
// address on 127.0.0.1 (never bound: nothing leaves the process).
func (n *network) newTransport() *transport {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.next++
	port := 10000 + n.next
	t := &transport{
		net:     n,
		ip:      net.IPv4(127, 0, 0, 1),
		port:    port,
		addr:    fmt.Sprintf("127.0.0.1:%d", port),
		packets: make(chan *memberlist.Packet, queueDepth),
		streams: make(chan net.Conn),
		done:    make(chan struct{}),
	}
	n.byAddr[t.addr] = t
	return t
}

func (n *network) lookup(addr string) *transport {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.byAddr[addr]
}

// transport is one node's memberlist.Transport on a network.
type transport struct {
	net     *network
	ip      net.IP
	port    int
	addr    string
	packets chan *memberlist.Packet
	streams chan net.Conn
	done    chan struct{}
	once    sync.Once

	// dead: the node crashed (kill) or shut down; it sends and receives
	// nothing more.
	dead atomic.Bool
	// sent counts the bytes this node wrote: packets and stream writes.
	sent atomic.Uint64
	// dropped counts packets to this node lost to a full queue.
	dropped atomic.Uint64
}

var _ memberlist.Transport = (*transport)(nil)

func (t *transport) FinalAdvertiseAddr(string, int) (net.IP, int, error) { return t.ip, t.port, nil }

// WriteTo delivers a copy of b to addr's queue, or drops it (the
// receiver is dead, unknown or its queue is full), as UDP would.
func (t *transport) WriteTo(b []byte, addr string) (time.Time, error) {
	now := time.Now()
	if t.dead.Load() {
		return now, nil
	}
	t.sent.Add(uint64(len(b)))
	dst := t.net.lookup(addr)
	if dst == nil || dst.dead.Load() {
		return now, nil
	}
	p := &memberlist.Packet{Buf: append([]byte(nil), b...), From: &net.UDPAddr{IP: t.ip, Port: t.port}, Timestamp: now}
	select {
	case dst.packets <- p:
	default:
		dst.dropped.Add(1)
	}
	return now, nil
}

func (t *transport) PacketCh() <-chan *memberlist.Packet { return t.packets }

// DialTimeout connects to addr with an in-memory pipe whose two ends count
// their writes to their own node.
func (t *transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	dst := t.net.lookup(addr)
	if t.dead.Load() || dst == nil || dst.dead.Load() {
		return nil, fmt.Errorf("gossipbench: dial %s: %w", addr, errUnreachable)
	}
	ours, theirs := net.Pipe()
	local := &net.TCPAddr{IP: t.ip, Port: t.port}
	remote := &net.TCPAddr{IP: dst.ip, Port: dst.port}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case dst.streams <- &countingConn{Conn: theirs, owner: dst, local: remote, remote: local}:
		return &countingConn{Conn: ours, owner: t, local: local, remote: remote}, nil
	case <-dst.done:
	case <-timer.C:
	}
	_ = ours.Close()
	_ = theirs.Close()
	return nil, fmt.Errorf("gossipbench: dial %s: %w", addr, errUnreachable)
}

func (t *transport) StreamCh() <-chan net.Conn { return t.streams }

// Shutdown marks the node dead; memberlist stops reading its channels.
func (t *transport) Shutdown() error {
	t.kill()
	return nil
}

// kill makes the node unreachable at once, as a crash or a pulled cable
// would: its memberlist keeps running but nothing gets in or out.
func (t *transport) kill() {
	t.dead.Store(true)
	t.once.Do(func() { close(t.done) })
}

// countingConn is one end of a stream, counting what it writes to its
// node, and failing once the node is dead.
type countingConn struct {
	net.Conn
	owner         *transport
	local, remote net.Addr
}

func (c *countingConn) Write(b []byte) (int, error) {
	if c.owner.dead.Load() {
		_ = c.Conn.Close()
		return 0, fmt.Errorf("gossipbench: write: %w", errUnreachable)
	}
	n, err := c.Conn.Write(b)
	c.owner.sent.Add(uint64(n))
	return n, err
}

func (c *countingConn) LocalAddr() net.Addr  { return c.local }
func (c *countingConn) RemoteAddr() net.Addr { return c.remote }
