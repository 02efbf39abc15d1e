package gossip

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/hashicorp/memberlist"
	"github.com/rs/zerolog"

	"github.com/spillway-lb/spillway/lb/clock"
)

// Sentinel errors callers branch on.
var (
	// ErrNotRunning is returned by Join before Run has started memberlist.
	ErrNotRunning = errors.New("gossip: not running")
	// ErrAlreadyStarted is returned by a second call to Run.
	ErrAlreadyStarted = errors.New("gossip: Run called twice")
)

// Options are a Node's dependencies. The zero value is usable.
type Options struct {
	// Logger receives the Node's logs and memberlist's (with
	// component=gossip). The zero Logger discards everything.
	Logger zerolog.Logger
	// Clock is the time source of Run's join backoff, rejoin and repair
	// timers, of Publish's versions and of state expiry; nil means the
	// real clock. memberlist's own timers always use the real clock.
	Clock clock.Clock
	// Rand returns uniform random numbers for join backoff jitter; nil
	// means math/rand/v2.Uint64. It is only called from Run's goroutine.
	Rand func() uint64
	// Sealer, when set, seals every state this node publishes with the
	// key of a certificate that names the node (see seal.go). Nil: states
	// go out unsealed, and nodes that verify seals refuse them unless they
	// accept unsealed states.
	Sealer Sealer
	// Verifier, when set, makes this node believe only states whose seal
	// it verifies (and, with Config.AcceptUnsealed, states without one);
	// the others are refused, counted in Stats and logged. Nil: seals are
	// not checked and every valid state is believed, as key holders alike.
	Verifier Verifier
	// Transport, when set, carries memberlist's packets and streams instead
	// of the UDP and TCP sockets on Config.BindAddr and BindPort, which are
	// then not bound (memberlist.Config.Transport). The gossip benchmark
	// (package gossipbench) runs many nodes in one process over an
	// in-memory one. Nil: real sockets, as the daemons use.
	Transport memberlist.Transport
	// DecodeCache, when set, is shared by the Nodes of one process that
	// receive the same states, so that each state is decoded and held
	// once rather than once per Node (see DecodeCache). Nil: this Node
	// decodes everything itself, as a daemon does.
	DecodeCache *DecodeCache
	// HandoffQueueDepth, when > 0, replaces memberlist's queue depth of
	// received messages awaiting its handler (memberlist's default 1,024,
	// what daemons run with). The gossip benchmark lowers it: a thousand
	// nodes in one process, starved of CPU while forming, each kept 1,024
	// messages of up to UDPBufferSize bytes waiting, gigabytes in all.
	HandoffQueueDepth int
}

// Snapshot is one node's view of the cluster at an instant. A Snapshot is
// never modified after Node publishes it: callers may keep and read it
// from any goroutine, and must not modify it (use Node.States for a copy).
type Snapshot struct {
	// Seq increases with every change of this view (a newer state, a
	// member joining or leaving; by the number of changes since the
	// previous Snapshot was built), so a reader can tell two views apart.
	Seq uint64
	// Members are the names of the alive members, self included, sorted.
	// memberlist's suspect members count as alive until declared dead.
	Members []string
	// States maps node name to that node's newest state, for alive members
	// that have published (self included once Publish was called).
	States map[string]NodeState

	// wire holds the JSON that push/pull sends for a state of States, when
	// it is not what encoding the NodeState gives (a seal, fields this
	// version does not know).
	wire map[string][]byte
}

// Unsealed returns the names of the states in s that are not Sealed,
// sorted: none but self's on a node that verifies seals and does not
// accept unsealed states.
func (s *Snapshot) Unsealed() []string {
	var out []string
	for name, st := range s.States {
		if !st.Sealed {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// Stats are counters since New. They only increase.
type Stats struct {
	// Received counts state messages received (direct or gossip).
	Received uint64
	// Accepted counts received states (message or push/pull) that were
	// newer than the held version and stored.
	Accepted uint64
	// Stale counts received states not newer than the held version (or
	// echoes of this node's own state), which were ignored.
	Stale uint64
	// Invalid counts frames and states that failed to decode or validate.
	Invalid uint64
	// Relayed counts accepted gossip messages queued for re-gossip.
	Relayed uint64
	// PushPulls counts full-state syncs merged from other nodes.
	PushPulls uint64
	// Sent counts this node's state sent straight to one member (UDP, or
	// TCP for a state too large for a packet).
	Sent uint64
	// SendErrors counts direct sends that failed (the member is gone, or
	// its TCP connection failed); gossip and push/pull still cover it.
	SendErrors uint64
	// StateBytes counts the bytes of this node's state messages handed to
	// memberlist: direct sends, gossip broadcasts (own and relayed) and the
	// push/pull payloads it served, before memberlist's framing and
	// encryption.
	StateBytes uint64
	// Repairs counts membership gaps closed by joining a node known only
	// from its state; RepairErrors the joins that failed (retried at the
	// next repair round).
	Repairs, RepairErrors uint64
	// Departures counts members that memberlist reported dead or left.
	Departures uint64
	// The states refused for their seal (see seal.go), by reason:
	// Unsealed (no seal, where one is required, or for a node whose held
	// state is sealed), BadSeals (a seal that does not verify),
	// UnknownCerts (a certificate fingerprint not seen yet) and StaleSeals
	// (older than Config.SealMaxAge). Zero without a Verifier.
	Unsealed, BadSeals, UnknownCerts, StaleSeals uint64
}

// Refused returns the seal refusals by reason, keyed as RefusalReasons.
func (s Stats) Refused() map[string]uint64 {
	return map[string]uint64{"unsealed": s.Unsealed, "bad_seal": s.BadSeals, "unknown_certificate": s.UnknownCerts, "stale_seal": s.StaleSeals}
}

// Node is this process's member of the gossip cluster. It publishes this
// node's NodeState, keeps the newest state of every alive member, and drops
// a member's state when memberlist reports it dead or left.
//
// How states spread, fastest first:
//   - Direct: after Publish, Run's sender sends the state straight to every
//     alive member, one UDP packet each (TCP when the state does not fit a
//     packet); and when a member joins (or comes back), each node sends it
//     its own state. On a LAN this delivers a change to every member within
//     milliseconds. Sends never happen inside memberlist's callbacks.
//   - Gossip: the state is also queued for memberlist's UDP gossip (each
//     node sends it StateRetransmitMult·ceil(log10(N+1)) times to random
//     members), and a node that learns a newer state from gossip (not from
//     the publisher directly) queues it again (epidemic relay, as serf does
//     for user events). This repairs lost packets and reaches members the
//     publisher cannot reach directly, without multiplying the traffic of
//     every change when direct delivery works.
//     Queues hold at most one state per publisher (a newer version replaces
//     the queued one), so memory stays bounded when publishing outruns the
//     gossip rate; the freshest states go first.
//   - Membership repair: memberlist spreads joins by gossip too, and a node
//     may miss one until the next push/pull; Run notices (a state from a
//     node memberlist does not list, for longer than memberlist's gossip
//     of its join takes: repairGrace) and joins that node's address
//     (NodeState.Addr), one such node per repairGrace, which fixes both
//     sides at once.
//   - Push/pull: every PushPullInterval (memberlist stretches it beyond 32
//     nodes), and on join, nodes exchange their full views over TCP, so a
//     late joiner gets every state during Join and anything lost is
//     eventually repaired.
//
// All methods are safe for concurrent use. A Node must not be copied.
type Node struct {
	// Immutable after New.
	cfg Config
	// keyring holds the gossip keys (nil: no encryption). memberlist uses
	// it directly; SetKeys changes it in place (Keyring is safe for
	// concurrent use).
	keyring *memberlist.Keyring
	budget  int
	log     zerolog.Logger
	clock   clock.Clock
	rand    func() uint64
	queue   *memberlist.TransmitLimitedQueue
	changes chan struct{}
	ready   chan struct{}
	// wake tells the sender there is work in the outbox (fanout, greet).
	wake chan struct{}
	// onVerdict, when set (by tests, before Run), is called after each
	// received message is classified.
	onVerdict func(NodeState, verdict)
	// onRefused, when set (by tests, before Run), is called with each
	// state refused for its seal and the reason (RefusalReasons).
	onRefused func(NodeState, string)
	// sealer and verifier are Options.Sealer and Options.Verifier; certs
	// the chains verified so far, by fingerprint.
	sealer      Sealer
	verifier    Verifier
	certs       certCache
	transport   memberlist.Transport
	decodeCache *DecodeCache
	handoff     int
	// refusalLog logs refused states, at most a few a minute (the
	// counters have them all).
	refusalLog zerolog.Logger

	// Accessed atomically.
	started atomic.Bool
	// advertise is memberlist's advertise address, set once by Run.
	advertise atomic.Pointer[string]
	crashed   atomic.Bool // skip Leave on shutdown (tests simulate a crash)
	ml        atomic.Pointer[memberlist.Memberlist]
	// snap is the last Snapshot built; dirty says the view changed since
	// (Snapshot builds the next one); members is the view's member count.
	snap         atomic.Pointer[Snapshot]
	dirty        atomic.Bool
	members      atomic.Int64
	ppCache      atomic.Pointer[weak.Pointer[encodedView]]
	received     atomic.Uint64
	accepted     atomic.Uint64
	stale        atomic.Uint64
	invalid      atomic.Uint64
	relayed      atomic.Uint64
	pushPull     atomic.Uint64
	sent         atomic.Uint64
	sendErrs     atomic.Uint64
	stateBytes   atomic.Uint64
	repairs      atomic.Uint64
	repairErrs   atomic.Uint64
	departures   atomic.Uint64
	unsealed     atomic.Uint64
	badSeals     atomic.Uint64
	unknownCerts atomic.Uint64
	staleSeals   atomic.Uint64

	// Guarded by mu.
	mu  sync.Mutex
	tab *table
	// version is the last version this node used (or the floor raised by a
	// refutation); the next Publish uses a higher one.
	version uint64
	// own is the last published state (nil before the first Publish)
	// and enc its encodings.
	own *NodeState
	enc ownEncoding
	seq uint64
	// The sender's outbox: fanout asks to send the state to every member
	// (with its seal's chain when fullFanout: the certificate changed),
	// greet to the listed members (those that joined since), with the
	// chain.
	fanout     bool
	fullFanout bool
	greet      map[string]struct{}
	// repaired maps a node to the state version for which repairGaps
	// last joined it.
	repaired map[string]uint64
	// nextRepair is when repairGaps may join a gap again.
	nextRepair time.Time
	// addrs holds copies of the alive members' memberlist.Node, taken in
	// the event callbacks (where memberlist holds its lock). The sender
	// uses them: the *Node values memberlist.Members returns are updated
	// by memberlist without synchronization.
	addrs map[string]memberlist.Node
}

// encodedView caches the push/pull payload for one Snapshot.Seq. The
// cache holds it weakly (until the next garbage collection, if nothing
// else does): at a thousand members the view is megabytes and the
// snapshot changes many times a second, so a strong cache would mostly
// hold a stale view.
type encodedView struct {
	seq uint64
	buf []byte
}

// New checks cfg and returns a Node that is not yet connected; Run starts
// it. Publish may be called before Run: the state is served once running.
func New(cfg Config, opts Options) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("gossip: invalid config: %w", err)
	}
	keys, _ := cfg.keys() // validated above
	var keyring *memberlist.Keyring
	if len(keys) > 0 {
		var err error
		if keyring, err = memberlist.NewKeyring(keys, keys[0]); err != nil {
			return nil, fmt.Errorf("gossip: keyring: %w", err)
		}
	}
	n := &Node{
		cfg:      cfg,
		keyring:  keyring,
		budget:   cfg.broadcastBudget(),
		log:      opts.Logger.With().Str("component", "gossip").Str("node", cfg.Name).Logger(),
		clock:    clock.OrReal(opts.Clock),
		rand:     opts.Rand,
		changes:  make(chan struct{}, 1),
		ready:    make(chan struct{}),
		wake:     make(chan struct{}, 1),
		tab:      newTable(cfg.Name, cfg.StateTTL),
		addrs:    make(map[string]memberlist.Node),
		repaired: make(map[string]uint64),
		sealer:   opts.Sealer,
		verifier: opts.Verifier,

		transport:   opts.Transport,
		decodeCache: opts.DecodeCache,
		handoff:     opts.HandoffQueueDepth,
	}
	n.refusalLog = n.log.Sample(&zerolog.BurstSampler{Burst: 10, Period: time.Minute})
	if n.rand == nil {
		n.rand = rand.Uint64
	}
	n.queue = &memberlist.TransmitLimitedQueue{
		// The member count from our own view: reading it takes no
		// memberlist lock, and GetBroadcasts runs inside memberlist.
		NumNodes:       func() int { return max(1, int(n.members.Load())) },
		RetransmitMult: cfg.StateRetransmitMult,
	}
	n.snap.Store(&Snapshot{Members: []string{cfg.Name}, States: map[string]NodeState{}})
	n.members.Store(1)
	return n, nil
}

// Run starts memberlist and the sender (see Node), joins Config.Seeds
// (retrying with backoff until one answers or ctx ends), rejoins them every
// RejoinInterval, and on ctx done stops the sender, leaves the cluster
// (waiting up to LeaveTimeout) and shuts memberlist down. It returns nil
// after a clean stop, or an error if memberlist cannot start (for example,
// the port is taken). Run may be called once.
func (n *Node) Run(ctx context.Context) error {
	if !n.started.CompareAndSwap(false, true) {
		return ErrAlreadyStarted
	}
	mc := n.cfg.memberlistConfig(n.keyring, logWriter{log: n.log})
	mc.Delegate = delegate{n}
	mc.Events = delegate{n}
	if n.transport != nil {
		mc.Transport = n.transport
	}
	if n.handoff > 0 {
		mc.HandoffQueueDepth = n.handoff
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		return fmt.Errorf("gossip: start memberlist on %s:%d: %w", n.cfg.BindAddr, n.cfg.BindPort, err)
	}
	addr := ml.LocalNode().Address()
	n.advertise.Store(&addr)
	n.ml.Store(ml)
	n.stampAddr(addr)
	close(n.ready)
	n.log.Info().Str("addr", addr).Bool("encrypted", n.keyring != nil).Msg("gossip started")
	switch {
	case n.verifier == nil:
		n.log.Warn().Bool("sealed", n.sealer != nil).
			Msg("gossip states are believed without seals (no TLS CA to verify them): every key holder can publish under any node's name")
	case n.cfg.AcceptUnsealed:
		n.log.Warn().Bool("sealed", n.sealer != nil).
			Msg("gossip accepts unsealed states (accept_unsealed, for a rolling upgrade): a key holder can publish under any name whose states were never sealed")
	}
	if n.keyring == nil && !IsLoopback(n.cfg.BindAddr) {
		n.log.Error().Str("bind_addr", n.cfg.BindAddr).
			Msg("GOSSIP IS NEITHER ENCRYPTED NOR AUTHENTICATED (insecure mode): anyone who reaches this port can join " +
				"the cluster and publish demand, RTT and health; set a gossip key for any network you do not fully trust")
	}

	sendCtx, stopSender := context.WithCancel(ctx)
	senderDone := make(chan struct{})
	go func() {
		defer close(senderDone)
		n.sendLoop(sendCtx, ml)
	}()
	n.signalSender() // a state published before Run goes out to the seeds' cluster

	seeds := n.cfg.Seeds
	if len(seeds) > 0 {
		n.joinWithBackoff(ctx, seeds)
	}
	var rejoin <-chan time.Time
	if n.cfg.RejoinInterval > 0 && len(seeds) > 0 {
		t := n.clock.NewTicker(n.cfg.RejoinInterval)
		defer t.Stop()
		rejoin = t.C()
	}
	repair := n.clock.NewTicker(n.repairEvery())
	defer repair.Stop()
	for {
		select {
		case <-ctx.Done():
			stopSender()
			<-senderDone
			return n.stop(ml)
		case <-rejoin:
			if targets := n.rejoinTargets(seeds); len(targets) > 0 {
				if _, err := n.Join(targets); err != nil {
					n.log.Debug().Err(err).Msg("rejoin failed")
				}
			}
		case <-repair.C():
			n.repairGaps()
			n.refreshSeal()
		}
	}
}

// stop leaves (unless a crash is being simulated) and shuts memberlist down.
func (n *Node) stop(ml *memberlist.Memberlist) error {
	if !n.crashed.Load() {
		if err := ml.Leave(n.cfg.LeaveTimeout); err != nil {
			// Usual when the whole cluster stops at once: the others
			// are gone and will not relay the leave message.
			n.log.Info().Err(err).Msg("leave not confirmed; others will detect the failure instead")
		}
	}
	if err := ml.Shutdown(); err != nil {
		return fmt.Errorf("gossip: shutdown: %w", err)
	}
	n.log.Info().Msg("gossip stopped")
	return nil
}

// simulateCrash closes memberlist's sockets without leaving, as a crash
// would; Run then returns without sending a leave message once ctx ends.
func (n *Node) simulateCrash() {
	n.crashed.Store(true)
	if ml := n.ml.Load(); ml != nil {
		_ = ml.Shutdown() // never fails: transport errors are only logged
	}
}

// Join contacts the given "host:port" addresses and syncs full state with
// each (push/pull). It returns how many answered, and an error if none did.
// When Join returns, the states of the joined cluster are visible.
func (n *Node) Join(addrs []string) (int, error) {
	ml := n.ml.Load()
	if ml == nil {
		return 0, ErrNotRunning
	}
	k, err := ml.Join(addrs)
	if err != nil {
		return k, fmt.Errorf("gossip: join %v: %w", addrs, err)
	}
	return k, nil
}

// Ready returns a channel that is closed once Run has started memberlist,
// after which Addr is known, Join works, and a state published before Run
// carries the address (which other nodes join it by to repair a gap).
func (n *Node) Ready() <-chan struct{} { return n.ready }

// Addr returns the "ip:port" other nodes reach this node at (the seed to
// give them), or "" before Ready.
func (n *Node) Addr() string {
	if a := n.advertise.Load(); a != nil {
		return *a
	}
	return ""
}

// Snapshot returns the current view. It never blocks on the network. The
// first call after a change builds the new view (a map of the visible
// states, which it does not deep-copy); later calls return the same one:
// the returned Snapshot is shared and immutable.
func (n *Node) Snapshot() *Snapshot {
	if !n.dirty.Load() {
		return n.snap.Load()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.dirty.Load() {
		n.snap.Store(&Snapshot{Seq: n.seq, Members: n.tab.memberNames(), States: n.tab.visible(), wire: n.tab.visibleWires()})
		n.dirty.Store(false)
	}
	return n.snap.Load()
}

// States returns a deep copy of the states of the alive members (self
// included once published), keyed by node name. The caller owns it.
func (n *Node) States() map[string]NodeState {
	snap := n.Snapshot()
	out := make(map[string]NodeState, len(snap.States))
	for k, s := range snap.States {
		out[k] = s.Clone()
	}
	return out
}

// Members returns the number of alive members, self included.
func (n *Node) Members() int { return int(n.members.Load()) }

// Changes returns a channel that receives a value after the view changes
// (a newer state, this node's own Publish, a member joining or leaving).
// Notifications coalesce: the channel holds at most one, and a burst of
// changes may yield one value, so a receiver should re-read Snapshot after
// each. Sends never block. The channel is shared: use one receiver.
func (n *Node) Changes() <-chan struct{} { return n.changes }

// Stats returns the counters.
func (n *Node) Stats() Stats {
	return Stats{
		Received:   n.received.Load(),
		Accepted:   n.accepted.Load(),
		Stale:      n.stale.Load(),
		Invalid:    n.invalid.Load(),
		Relayed:    n.relayed.Load(),
		PushPulls:  n.pushPull.Load(),
		Sent:       n.sent.Load(),
		SendErrors: n.sendErrs.Load(),
		StateBytes: n.stateBytes.Load(),

		Repairs:      n.repairs.Load(),
		RepairErrors: n.repairErrs.Load(),
		Departures:   n.departures.Load(),

		Unsealed:     n.unsealed.Load(),
		BadSeals:     n.badSeals.Load(),
		UnknownCerts: n.unknownCerts.Load(),
		StaleSeals:   n.staleSeals.Load(),
	}
}

// StateFrameSize returns the size in bytes of this node's state as a
// direct send or gossip carries it (the frame, with the seal but not its
// chain), or 0 before the first Publish.
func (n *Node) StateFrameSize() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.enc.lean)
}

// ViewSize returns the size in bytes of this node's push/pull payload:
// every state it holds, with the seals' chains, as one frame.
func (n *Node) ViewSize() int { return len(n.localView()) }

// QueuedBroadcasts returns how many states (own and relayed) wait in the
// gossip queue for more transmissions.
func (n *Node) QueuedBroadcasts() int { return n.queue.NumQueued() }
