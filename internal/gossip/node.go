package gossip

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/rs/zerolog"
)

// Sentinel errors callers branch on.
var (
	// ErrTooLarge is returned by Publish when the encoded state does not fit
	// one UDP gossip packet (Config.UDPBufferSize). The state is still
	// published: it is visible locally at once and reaches the other nodes
	// by push/pull sync within about PushPullInterval, not by broadcast.
	ErrTooLarge = errors.New("gossip: state too large to broadcast")
	// ErrNotRunning is returned by Join before Run has started memberlist.
	ErrNotRunning = errors.New("gossip: not running")
	// ErrAlreadyStarted is returned by a second call to Run.
	ErrAlreadyStarted = errors.New("gossip: Run called twice")
)

// Clock is the time source of a Node. Run's join backoff and rejoin timer
// and Publish's versions read it; memberlist's own timers use the real clock.
type Clock interface {
	Now() time.Time
	// After returns a channel that receives the time once d has passed.
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Options are a Node's dependencies. The zero value is usable.
type Options struct {
	// Logger receives the Node's logs and memberlist's (with
	// component=gossip). The zero Logger discards everything.
	Logger zerolog.Logger
	// Clock is the time source; nil means the real clock.
	Clock Clock
	// Rand returns uniform random numbers for join backoff jitter; nil
	// means math/rand/v2.Uint64. It is only called from Run's goroutine.
	Rand func() uint64
}

// Snapshot is one node's view of the cluster at an instant. A Snapshot is
// never modified after Node publishes it: callers may keep and read it
// from any goroutine, and must not modify it (use Node.States for a copy).
type Snapshot struct {
	// Seq increases by one with every change of this view (a newer state,
	// a member joining or leaving), so a reader can tell two views apart.
	Seq uint64
	// Members are the names of the alive members, self included, sorted.
	// memberlist's suspect members count as alive until declared dead.
	Members []string
	// States maps node name to that node's newest state, for alive members
	// that have published (self included once Publish was called).
	States map[string]NodeState
}

// Stats are counters since New. They only increase.
type Stats struct {
	// Received counts state broadcasts received over UDP gossip.
	Received uint64
	// Accepted counts received states (broadcast or push/pull) that were
	// newer than the held version and stored.
	Accepted uint64
	// Stale counts received states not newer than the held version (or
	// echoes of this node's own state), which were ignored.
	Stale uint64
	// Invalid counts frames and states that failed to decode or validate.
	Invalid uint64
	// Relayed counts accepted broadcasts queued for re-broadcast.
	Relayed uint64
	// PushPulls counts full-state syncs merged from other nodes.
	PushPulls uint64
	// TooLarge counts Publish calls that returned ErrTooLarge.
	TooLarge uint64
}

// Node is this process's member of the gossip cluster. It publishes this
// node's NodeState, keeps the newest state of every alive member, and drops
// a member's state when memberlist reports it dead or left.
//
// How states spread: Publish queues the state for UDP gossip (each node
// sends it RetransmitMult·ceil(log10(N+1)) times to random members); every
// node that receives a newer state queues it again (epidemic relay, as serf
// does for user events), so it reaches all N nodes in O(log N) gossip
// rounds. Queues hold at most one message per publisher (a newer version
// replaces the queued one), so memory stays bounded when publishing outruns
// gossip. Every PushPullInterval, and on join, nodes also exchange their full
// views over TCP, so a late joiner gets every state at once and a lost
// packet is repaired.
//
// All methods are safe for concurrent use. A Node must not be copied.
type Node struct {
	// Immutable after New.
	cfg     Config
	key     []byte
	budget  int
	log     zerolog.Logger
	clock   Clock
	rand    func() uint64
	queue   *memberlist.TransmitLimitedQueue
	changes chan struct{}
	ready   chan struct{}
	// onVerdict, when set (by tests, before Run), is called after each
	// received broadcast is classified.
	onVerdict func(NodeState, verdict)

	// Accessed atomically.
	started  atomic.Bool
	crashed  atomic.Bool // skip Leave on shutdown (tests simulate a crash)
	ml       atomic.Pointer[memberlist.Memberlist]
	snap     atomic.Pointer[Snapshot]
	ppCache  atomic.Pointer[encodedView]
	received atomic.Uint64
	accepted atomic.Uint64
	stale    atomic.Uint64
	invalid  atomic.Uint64
	relayed  atomic.Uint64
	pushPull atomic.Uint64
	tooLarge atomic.Uint64

	// Guarded by mu.
	mu  sync.Mutex
	tab *table
	// version is the last version this node used (or the floor raised by a
	// refutation); the next Publish uses a higher one.
	version uint64
	// own is the last published state (nil before the first Publish).
	own *NodeState
	seq uint64
}

// encodedView caches the push/pull payload for one Snapshot.Seq.
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
	key, _ := cfg.secretKey() // validated above
	n := &Node{
		cfg:     cfg,
		key:     key,
		budget:  cfg.broadcastBudget(),
		log:     opts.Logger.With().Str("component", "gossip").Str("node", cfg.Name).Logger(),
		clock:   opts.Clock,
		rand:    opts.Rand,
		changes: make(chan struct{}, 1),
		ready:   make(chan struct{}),
		tab:     newTable(cfg.Name, cfg.StateTTL),
	}
	if n.clock == nil {
		n.clock = realClock{}
	}
	if n.rand == nil {
		n.rand = rand.Uint64
	}
	n.queue = &memberlist.TransmitLimitedQueue{
		// The member count from our own view: reading it takes no
		// memberlist lock, and GetBroadcasts runs inside memberlist.
		NumNodes:       func() int { return max(1, len(n.snap.Load().Members)) },
		RetransmitMult: cfg.RetransmitMult,
	}
	n.mu.Lock()
	n.rebuildLocked()
	n.mu.Unlock()
	return n, nil
}

// Run starts memberlist, joins Config.Seeds (retrying with backoff until one
// answers or ctx ends), rejoins them every RejoinInterval, and on ctx done
// leaves the cluster (waiting up to LeaveTimeout) and shuts memberlist down.
// It returns nil after a clean stop, or an error if memberlist cannot start
// (for example, the port is taken). Run may be called once.
func (n *Node) Run(ctx context.Context) error {
	if !n.started.CompareAndSwap(false, true) {
		return ErrAlreadyStarted
	}
	mc := n.cfg.memberlistConfig(n.key, logWriter{log: n.log})
	mc.Delegate = delegate{n}
	mc.Events = delegate{n}
	ml, err := memberlist.Create(mc)
	if err != nil {
		return fmt.Errorf("gossip: start memberlist on %s:%d: %w", n.cfg.BindAddr, n.cfg.BindPort, err)
	}
	n.ml.Store(ml)
	close(n.ready)
	n.log.Info().Str("addr", ml.LocalNode().Address()).Bool("encrypted", n.key != nil).Msg("gossip started")

	seeds := n.cfg.Seeds
	if len(seeds) > 0 {
		n.joinWithBackoff(ctx, seeds)
	}
	var rejoin <-chan time.Time
	for {
		if n.cfg.RejoinInterval > 0 && len(seeds) > 0 {
			rejoin = n.clock.After(n.cfg.RejoinInterval)
		}
		select {
		case <-ctx.Done():
			return n.stop(ml)
		case <-rejoin:
			if _, err := n.Join(seeds); err != nil {
				n.log.Debug().Err(err).Msg("rejoin failed")
			}
		}
	}
}

// joinWithBackoff joins seeds, retrying until one answers or ctx ends.
func (n *Node) joinWithBackoff(ctx context.Context, seeds []string) {
	for attempt := 0; ; attempt++ {
		k, err := n.Join(seeds)
		if err == nil {
			n.log.Info().Int("contacted", k).Int("members", n.Members()).Msg("joined cluster")
			return
		}
		d := joinBackoff(attempt, n.cfg.JoinBackoffMin, n.cfg.JoinBackoffMax, n.rand())
		n.log.Warn().Err(err).Int("attempt", attempt+1).Dur("retry_in", d).Msg("join failed")
		select {
		case <-ctx.Done():
			return
		case <-n.clock.After(d):
		}
	}
}

// joinBackoff is the wait after failed attempt number attempt (from 0):
// min·2^attempt capped at max, then jittered uniformly into [d/2, d] by r.
func joinBackoff(attempt int, lo, hi time.Duration, r uint64) time.Duration {
	d := lo
	for i := 0; i < attempt && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	half := d / 2
	return half + time.Duration(r%uint64(d-half+1))
}

// stop leaves (unless a crash is being simulated) and shuts memberlist down.
func (n *Node) stop(ml *memberlist.Memberlist) error {
	if !n.crashed.Load() {
		if err := ml.Leave(n.cfg.LeaveTimeout); err != nil {
			n.log.Warn().Err(err).Msg("leave")
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
// after which Addr is known and Join works.
func (n *Node) Ready() <-chan struct{} { return n.ready }

// Addr returns the "ip:port" other nodes reach this node at (the seed to
// give them), or "" before Ready.
func (n *Node) Addr() string {
	ml := n.ml.Load()
	if ml == nil {
		return ""
	}
	return ml.LocalNode().Address()
}

// Publish makes s this node's state: it sets s.Node to Config.Name and
// s.Version to a version higher than any this node used, stores it (so
// States includes it at once), and queues it for broadcast. It returns the
// version assigned.
//
// Publish copies s; the caller may reuse its maps. It returns an error
// wrapping ErrInvalidState (nothing published) if a field is invalid, and
// one wrapping ErrTooLarge (published, but not broadcast) if the encoded
// state does not fit a UDP packet.
func (n *Node) Publish(s NodeState) (uint64, error) {
	s.Node = n.cfg.Name
	s.Version = 0
	if err := s.validate(); err != nil {
		return 0, fmt.Errorf("gossip: publish: %w", err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.clock.Now()
	s.Version = max(n.version+1, unixNanos(now))
	frame, stored, err := encodeOwn(s)
	if err != nil {
		return 0, fmt.Errorf("gossip: publish: %w", err)
	}
	n.version = s.Version
	n.own = &stored
	n.tab.setSelf(stored, now)
	n.rebuildLocked()
	if len(frame) > n.budget {
		n.tooLarge.Add(1)
		return s.Version, fmt.Errorf("%w: %d bytes encoded, %d fit a packet (raise gossip.udp_buffer_size or shrink the state)",
			ErrTooLarge, len(frame), n.budget)
	}
	n.queue.QueueBroadcast(&broadcast{name: s.Node, msg: frame})
	return s.Version, nil
}

// encodeOwn encodes s and decodes it back, so that the state this node
// stores is exactly what the others decode (and shares no maps with the
// caller's).
func encodeOwn(s NodeState) ([]byte, NodeState, error) {
	frame, err := encodeFrame(s)
	if err != nil {
		return nil, NodeState{}, err
	}
	var stored NodeState
	if err := decodeFrame(frame, &stored); err != nil {
		return nil, NodeState{}, err
	}
	return frame, stored, nil
}

func unixNanos(t time.Time) uint64 {
	if ns := t.UnixNano(); ns > 0 {
		return uint64(ns)
	}
	return 0
}

// Snapshot returns the current view. It never blocks on the network and
// does not copy: the returned Snapshot is shared and immutable.
func (n *Node) Snapshot() *Snapshot { return n.snap.Load() }

// States returns a deep copy of the states of the alive members (self
// included once published), keyed by node name. The caller owns it.
func (n *Node) States() map[string]NodeState {
	snap := n.snap.Load()
	out := make(map[string]NodeState, len(snap.States))
	for k, s := range snap.States {
		out[k] = s.Clone()
	}
	return out
}

// Members returns the number of alive members, self included.
func (n *Node) Members() int { return len(n.snap.Load().Members) }

// Changes returns a channel that receives a value after the view changes
// (a newer state, this node's own Publish, a member joining or leaving).
// Notifications coalesce: the channel holds at most one, and a burst of
// changes may yield one value, so a receiver should re-read Snapshot after
// each. Sends never block. The channel is shared: use one receiver.
func (n *Node) Changes() <-chan struct{} { return n.changes }

// Stats returns the counters.
func (n *Node) Stats() Stats {
	return Stats{
		Received:  n.received.Load(),
		Accepted:  n.accepted.Load(),
		Stale:     n.stale.Load(),
		Invalid:   n.invalid.Load(),
		Relayed:   n.relayed.Load(),
		PushPulls: n.pushPull.Load(),
		TooLarge:  n.tooLarge.Load(),
	}
}

// rebuildLocked publishes a new Snapshot and notifies Changes. Caller must
// hold n.mu.
func (n *Node) rebuildLocked() {
	n.seq++
	n.snap.Store(&Snapshot{Seq: n.seq, Members: n.tab.memberNames(), States: n.tab.visible()})
	select {
	case n.changes <- struct{}{}:
	default:
	}
}

// handleBroadcast processes one state broadcast received over gossip. b is
// only valid during the call.
func (n *Node) handleBroadcast(b []byte) {
	n.received.Add(1)
	s, err := decodeState(b)
	if err != nil {
		n.invalid.Add(1)
		n.log.Warn().Err(err).Int("bytes", len(b)).Msg("dropped invalid state broadcast")
		return
	}
	v := n.offer([]NodeState{s})[0]
	if v == verdictHidden || v == verdictVisible {
		if len(b) <= n.budget {
			n.queue.QueueBroadcast(&broadcast{name: s.Node, msg: bytes.Clone(b)})
			n.relayed.Add(1)
		}
	}
	if n.onVerdict != nil {
		n.onVerdict(s, v)
	}
}

// handlePushPull merges the full view another node sent over TCP.
func (n *Node) handlePushPull(buf []byte) {
	n.pushPull.Add(1)
	states, err := decodeStates(buf)
	if err != nil {
		n.invalid.Add(1)
		n.log.Warn().Err(err).Int("bytes", len(buf)).Msg("dropped invalid states in push/pull")
	}
	if len(states) > 0 {
		n.offer(states)
	}
}

// offer applies received states, updates the view and counters, and
// refutes a state that claims this node's name with a higher version.
func (n *Node) offer(states []NodeState) []verdict {
	verdicts := make([]verdict, len(states))
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.clock.Now()
	changed := false
	for i, s := range states {
		v := n.tab.apply(s, now)
		verdicts[i] = v
		switch v {
		case verdictVisible:
			changed = true
			n.accepted.Add(1)
		case verdictHidden:
			n.accepted.Add(1)
		case verdictStale:
			n.stale.Add(1)
		case verdictSelf:
			n.stale.Add(1)
			if s.Version > n.version {
				n.refuteLocked(s.Version)
			}
		}
	}
	if changed {
		n.rebuildLocked()
	}
	return verdicts
}

// refuteLocked handles a state published under this node's name with a
// version above ours (a previous incarnation whose clock ran ahead, or a
// name clash): it raises our version above it and re-publishes our state so
// that ours wins everywhere. Caller must hold n.mu.
func (n *Node) refuteLocked(theirs uint64) {
	n.log.Warn().Uint64("their_version", theirs).Uint64("our_version", n.version).
		Msg("another state carries this node's name and a newer version; refuting")
	n.version = theirs
	if n.own == nil {
		return // the next Publish will outrank it
	}
	s := *n.own
	s.Version = n.version + 1
	frame, stored, err := encodeOwn(s)
	if err != nil {
		n.log.Error().Err(err).Msg("re-encoding own state")
		return
	}
	n.version = s.Version
	n.own = &stored
	n.tab.setSelf(stored, n.clock.Now())
	n.rebuildLocked()
	if len(frame) <= n.budget {
		n.queue.QueueBroadcast(&broadcast{name: s.Node, msg: frame})
	}
}

// localView is the push/pull payload: every visible state, sorted by node
// name, encoded once per Snapshot.
func (n *Node) localView() []byte {
	snap := n.snap.Load()
	if c := n.ppCache.Load(); c != nil && c.seq == snap.Seq {
		return c.buf
	}
	l := stateList{States: make([]NodeState, 0, len(snap.States))}
	for _, s := range snap.States {
		l.States = append(l.States, s)
	}
	sort.Slice(l.States, func(i, j int) bool { return l.States[i].Node < l.States[j].Node })
	buf, err := encodeFrame(l)
	if err != nil {
		// Cannot happen: every stored state was decoded from JSON.
		n.log.Error().Err(err).Msg("encoding push/pull state")
		return nil
	}
	n.ppCache.Store(&encodedView{seq: snap.Seq, buf: buf})
	return buf
}

func (n *Node) memberJoined(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.tab.join(name, n.clock.Now()) {
		n.rebuildLocked()
		n.log.Info().Str("member", name).Msg("member joined")
	}
}

func (n *Node) memberLeft(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.tab.leave(name, n.clock.Now()) {
		n.rebuildLocked()
		n.log.Info().Str("member", name).Msg("member left or failed; state dropped")
	}
}
