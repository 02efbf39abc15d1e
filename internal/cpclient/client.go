package cpclient

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/backoff"
	"github.com/spillway-lb/spillway/internal/mtls"
	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/lb/clock"
	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

// Config is what an operator sets for a gfe's control-plane connection.
// Start from DefaultConfig; the zero value is not valid.
type Config struct {
	// Addresses are the control-plane replicas, as gRPC targets
	// ("127.0.0.1:7000", "dns:///cp.example:7000"). Required, at least one.
	// The client starts at a random one and moves to the next after each
	// failure, so any replica can serve any gfe.
	Addresses []string
	// Node is this gfe's id, the name it uses in gossip. Required.
	Node string
	// Site is this gfe's site. Required.
	Site string
	// BuildVersion is reported to the control plane, which shows it per
	// gfe on its /status (which gfes run which release). Optional.
	BuildVersion string
	// Fields is the configuration schema this gfe reads (config.Fields,
	// DefaultConfig's value), stated to the control plane in every stream
	// request (Node.config_fields) so that it leaves out of the snapshot
	// every field this gfe cannot read. Empty: the control plane assumes
	// release the baseline's schema.
	Fields []string
	// TLS authenticates both ends with mutual TLS (package mtls): the
	// client presents its certificate and takes snapshots only from a
	// control plane whose certificate the CA bundle vouches for under
	// TLS.ServerName (or the host of the address dialled). Required: set
	// the files, or TLS.InsecurePlaintext to take snapshots in clear text
	// from whoever answers. The files are re-read at each handshake.
	TLS mtls.ClientConfig
	// BackoffMin and BackoffMax bound the wait before reconnecting after a
	// failed or ended stream: BackoffMin doubles with every failure in a row
	// up to BackoffMax, and each wait is drawn uniformly from [d/2, d] so
	// that gfes do not reconnect in lockstep. The count restarts after a
	// stream that delivered a snapshot or stayed up for BackoffMax.
	// Defaults 200ms and 10s. A shorter maximum finds a returning control
	// plane sooner at the cost of more connection attempts while none is
	// up.
	BackoffMin time.Duration
	BackoffMax time.Duration
	// KeepaliveTime is how long a connection may be idle before the client
	// pings the control plane; KeepaliveTimeout is how long it waits for the
	// answer before declaring the connection dead and reconnecting. Defaults
	// 10s and 5s: a control plane that vanishes without closing its
	// connections is noticed within about 15s. The control plane must allow
	// pings this often (its KeepaliveMinTime, 5s by default).
	KeepaliveTime    time.Duration
	KeepaliveTimeout time.Duration
}

// DefaultConfig returns a Config with every default set, Fields this
// build's schema; Addresses, Node and Site are left empty.
func DefaultConfig() Config {
	return Config{
		Fields:           config.Fields(),
		BackoffMin:       200 * time.Millisecond,
		BackoffMax:       10 * time.Second,
		KeepaliveTime:    10 * time.Second,
		KeepaliveTimeout: 5 * time.Second,
	}
}

// Validate reports every invalid field at once.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(c.Addresses) == 0 {
		bad("control_planes: at least one address is required")
	}
	for i, a := range c.Addresses {
		if a == "" {
			bad("control_planes[%d]: empty address", i)
		}
	}
	if c.Node == "" {
		bad("node: required")
	}
	if c.Site == "" {
		bad("site: required")
	}
	if c.BackoffMin <= 0 {
		bad("backoff_min: must be > 0, got %v", c.BackoffMin)
	}
	if c.BackoffMax < c.BackoffMin {
		bad("backoff_max: must be >= backoff_min (%v), got %v", c.BackoffMin, c.BackoffMax)
	}
	if c.KeepaliveTime <= 0 {
		bad("keepalive_time: must be > 0, got %v", c.KeepaliveTime)
	}
	if c.KeepaliveTimeout <= 0 {
		bad("keepalive_timeout: must be > 0, got %v", c.KeepaliveTimeout)
	}
	if err := c.TLS.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Options holds the Client's dependencies. The zero value is usable.
type Options struct {
	// Clock times the reconnect backoff. Nil means the real clock.
	Clock clock.Clock
	// Logger receives connection changes (info), rejected snapshots and
	// stream failures (warn). The zero Logger discards everything.
	Logger zerolog.Logger
	// Rand returns uniform random 64-bit values for the first address and
	// backoff jitter. Called only from Run's goroutine. Nil means
	// math/rand/v2.Uint64.
	Rand func() uint64
	// Apply validates a pushed snapshot and makes it live, or returns why
	// it cannot (the snapshot is then NACKed with that error and the last
	// good one stays). Nil accepts every snapshot that FromProto accepts.
	// See Client for the threading contract.
	Apply func(*snapshot.Snapshot) error
	// DialOptions are appended to the client's own (the transport
	// credentials of Config.TLS, and keepalive), so a
	// grpc.WithContextDialer here dials in memory (tests).
	DialOptions []grpc.DialOption
}

// ErrRunTwice is returned by a second call to Run.
var ErrRunTwice = errors.New("cpclient: Run called twice")

// Status is a point-in-time view of the Client, for status pages and tests.
type Status struct {
	// Connected is the address of the control plane whose stream is open,
	// or "" while none is.
	Connected string
	// Version is the version of Current ("" before the first snapshot).
	Version string
	// Pushes, Acks and Nacks count snapshots received, accepted and
	// rejected since New; Connects counts streams opened and Failures
	// streams or attempts that ended in an error.
	Pushes, Acks, Nacks, Connects, Failures uint64
	// LastError is the last stream error or rejection ("" if none).
	LastError string
	// NacksInARow counts the snapshots rejected since the last one
	// accepted (or since New): above 0, the node serves an older snapshot
	// than the control plane's latest and does not follow its health
	// changes until it accepts one again. LastNack is the last
	// rejection's error and LastNackAt when it was sent; they are kept
	// after an ACK, for the record.
	NacksInARow uint64
	LastNack    string
	LastNackAt  time.Time
}

// Client is a gfe's connection to the control plane: it keeps one snapshot
// stream open to one replica at a time, validates and applies every pushed
// snapshot, ACKs or NACKs it, and reconnects (to the next replica, with
// backoff and jitter) whenever the stream ends.
//
// Guarantees:
//   - Static stability: Current only ever changes to a snapshot that
//     FromProto and Apply accepted. A rejected push, a dead stream, or every
//     control plane being gone leaves it as it was; Run keeps retrying, and
//     the first push from a replica that comes back is applied.
//   - On reconnect the client sends the version it serves, so a replica
//     serving the same content need not push it again.
//
// Threading contract:
//   - Apply is called only from Run's goroutine, one call at a time, in
//     the order snapshots arrive; it may block (the stream waits, and the
//     control plane may supersede the push meanwhile) and must not call
//     Run. It should build everything the new snapshot needs and swap it
//     in (STYLE §4): when it returns nil, the snapshot is live.
//   - Current, Changes and Status are safe to call from any goroutine at
//     any time.
//   - Changes receives a value after Current changed, coalesced (the
//     channel holds at most one value), and is never closed; re-read
//     Current after each receive. Sends never block.
//
// A Client must not be copied.
type Client struct {
	// Immutable after New.
	cfg      Config
	clock    clock.Clock
	log      zerolog.Logger
	rand     func() uint64
	apply    func(*snapshot.Snapshot) error
	dialOpts []grpc.DialOption
	changes  chan struct{}

	// Accessed atomically.
	started  atomic.Bool
	cur      atomic.Pointer[snapshot.Snapshot]
	conn     atomic.Pointer[grpc.ClientConn] // of the open session, nil between sessions
	pushes   atomic.Uint64
	acks     atomic.Uint64
	nacks    atomic.Uint64
	connects atomic.Uint64
	failures atomic.Uint64

	mu sync.Mutex
	// Guarded by mu.
	connected   string
	lastErr     string
	nacksInARow uint64
	lastNack    string
	lastNackAt  time.Time
}

// New checks cfg and returns a Client that is not yet connected; Run
// connects.
func New(cfg Config, opts Options) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("cpclient: invalid config: %w", err)
	}
	c := &Client{
		cfg:     cfg,
		clock:   clock.OrReal(opts.Clock),
		log:     opts.Logger.With().Str("component", "cpclient").Logger(),
		rand:    opts.Rand,
		apply:   opts.Apply,
		changes: make(chan struct{}, 1),
	}
	if c.rand == nil {
		c.rand = rand.Uint64
	}
	creds, err := mtls.ClientCredentials(cfg.TLS, mtls.Options{Logger: c.log})
	if err != nil {
		return nil, fmt.Errorf("cpclient: %w", err)
	}
	c.dialOpts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time: cfg.KeepaliveTime, Timeout: cfg.KeepaliveTimeout, PermitWithoutStream: true,
		}),
	}, opts.DialOptions...)
	return c, nil
}

// Conn returns the connection of the open stream to a control plane, for
// other calls to the same replica over the same mutually authenticated
// connection (the Quota service), or nil when no stream is open. The
// connection may close at any time; calls on it then fail. It never blocks.
func (c *Client) Conn() *grpc.ClientConn { return c.conn.Load() }

// Current returns the snapshot being served: the last one Apply accepted, or
// nil before the first. It never blocks.
func (c *Client) Current() *snapshot.Snapshot { return c.cur.Load() }

// Changes returns the channel that receives a value after Current changes
// (see Client for its contract).
func (c *Client) Changes() <-chan struct{} { return c.changes }

// Status returns the client's counters and connection.
func (c *Client) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Status{
		Connected:   c.connected,
		Pushes:      c.pushes.Load(),
		Acks:        c.acks.Load(),
		Nacks:       c.nacks.Load(),
		Connects:    c.connects.Load(),
		Failures:    c.failures.Load(),
		LastError:   c.lastErr,
		NacksInARow: c.nacksInARow,
		LastNack:    c.lastNack,
		LastNackAt:  c.lastNackAt,
	}
	if cur := c.cur.Load(); cur != nil {
		s.Version = cur.Version
	}
	return s
}

// Run keeps a snapshot stream open until ctx is done, then returns nil. It
// returns ErrRunTwice if called again.
func (c *Client) Run(ctx context.Context) error {
	if !c.started.CompareAndSwap(false, true) {
		return ErrRunTwice
	}
	n := len(c.cfg.Addresses)
	idx := int(c.rand() % uint64(n))
	fails := 0
	for {
		addr := c.cfg.Addresses[idx]
		healthy, err := c.session(ctx, addr)
		if ctx.Err() != nil {
			return nil
		}
		if healthy {
			fails = 0
		}
		c.failures.Add(1)
		c.setLastErr(err)
		d := backoff.Jittered(fails, c.cfg.BackoffMin, c.cfg.BackoffMax, c.rand())
		fails++
		idx = (idx + 1) % n
		c.log.Warn().Err(err).Str("control_plane", addr).Str("next", c.cfg.Addresses[idx]).
			Dur("retry_in", d).Msg("control-plane stream ended; serving the last good snapshot")
		t := c.clock.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
	}
}

// session runs one stream to addr until it fails. healthy reports whether
// it worked well enough to reset the backoff: it delivered a snapshot or
// stayed open for BackoffMax.
func (c *Client) session(ctx context.Context, addr string) (healthy bool, err error) {
	conn, err := grpc.NewClient(addr, c.dialOpts...)
	if err != nil {
		return false, fmt.Errorf("dial %s: %w", addr, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := pb.NewControlPlaneClient(conn).StreamSnapshots(ctx)
	if err != nil {
		return false, fmt.Errorf("open stream to %s: %w", addr, err)
	}
	hello := &pb.SnapshotRequest{
		Node:        &pb.Node{Id: c.cfg.Node, Site: c.cfg.Site, BuildVersion: c.cfg.BuildVersion, ConfigFields: c.cfg.Fields},
		VersionInfo: c.version(),
	}
	if err := stream.Send(hello); err != nil {
		// Send reports io.EOF for a broken stream; Recv has the cause.
		_, rerr := stream.Recv()
		return false, fmt.Errorf("stream to %s: %w", addr, errors.Join(err, rerr))
	}
	start := c.clock.Now()
	c.connects.Add(1)
	c.setConnected(addr)
	defer c.setConnected("")
	c.conn.Store(conn)
	defer c.conn.Store(nil)
	c.log.Info().Str("control_plane", addr).Str("serving", hello.VersionInfo).Msg("control-plane stream open")
	for {
		m, err := stream.Recv()
		if err != nil {
			return healthy || c.clock.Since(start) >= c.cfg.BackoffMax, fmt.Errorf("stream to %s: %w", addr, err)
		}
		healthy = true
		if err := stream.Send(c.handle(m)); err != nil {
			_, rerr := stream.Recv()
			return true, fmt.Errorf("answer to %s: %w", addr, errors.Join(err, rerr))
		}
	}
}

// handle validates and applies one push and returns its ACK or NACK.
func (c *Client) handle(m *pb.Snapshot) *pb.SnapshotRequest {
	c.pushes.Add(1)
	if cur := c.cur.Load(); cur != nil && m.GetVersion() == cur.Version && m.GetNonce() != "" {
		// Same content as what is live (a replica that did not skip the
		// push on reconnect): nothing to apply.
		c.acks.Add(1)
		c.setNacked(nil)
		return &pb.SnapshotRequest{VersionInfo: cur.Version, ResponseNonce: m.GetNonce()}
	}
	snap, err := snapshot.FromProto(m)
	if err == nil && m.GetNonce() == "" {
		err = errors.New("snapshot.nonce: required")
	}
	if err == nil && c.apply != nil {
		if aerr := c.apply(snap); aerr != nil {
			err = fmt.Errorf("apply snapshot %s: %w", m.GetVersion(), aerr)
		}
	}
	if err != nil {
		c.nacks.Add(1)
		c.setLastErr(err)
		c.setNacked(err)
		c.log.Warn().Err(err).Str("version", m.GetVersion()).Str("serving", c.version()).
			Msg("rejected snapshot (NACK); keeping the last good one")
		return &pb.SnapshotRequest{
			VersionInfo:   c.version(),
			ResponseNonce: m.GetNonce(),
			ErrorDetail:   &spb.Status{Code: int32(codes.InvalidArgument), Message: err.Error()},
		}
	}
	c.cur.Store(snap)
	select {
	case c.changes <- struct{}{}:
	default:
	}
	c.acks.Add(1)
	c.setNacked(nil)
	if len(snap.UnknownFields) > 0 {
		// Once per snapshot: a push of the same version is not applied
		// again (above).
		c.log.Warn().Str("version", snap.Version).Strs("unknown_fields", snap.UnknownFields).
			Msg("snapshot applied without the fields this build does not know (a newer control plane); upgrade this gfe to honour them")
	}
	c.log.Info().Str("version", snap.Version).Str("control_plane", snap.ControlPlane).Msg("snapshot applied")
	return &pb.SnapshotRequest{VersionInfo: snap.Version, ResponseNonce: m.GetNonce()}
}

// version returns Current's version, or "".
func (c *Client) version() string {
	if cur := c.cur.Load(); cur != nil {
		return cur.Version
	}
	return ""
}

func (c *Client) setConnected(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.connected = addr
}

// setNacked records an answer: a NACK with err, or an ACK (nil).
func (c *Client) setNacked(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		c.nacksInARow = 0
		return
	}
	c.nacksInARow++
	c.lastNack, c.lastNackAt = err.Error(), c.clock.Now()
}

func (c *Client) setLastErr(err error) {
	if err == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastErr = err.Error()
}
