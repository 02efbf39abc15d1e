// Package gossipbench measures the gossip layer (package gossip) at scale:
// N real memberlist nodes in one process, each a gossip.Node with the
// daemons' own configuration (daemonflags.Gossip), state codec and seals,
// talking over an in-memory network that counts every byte sent. It is
// what `lbsim gossip` runs.
//
// Run starts the nodes (each publishing a gfe's state for a World), waits
// until every node holds every member and every state, and then measures,
// in a steady window:
//   - spread: the time from Publish on one node until each other node's
//     Snapshot holds the new version, over several changes;
//   - bytes sent per node per second at the transport (memberlist's
//     probes, gossip, push/pull and our direct sends, after encryption),
//     and the part that is state messages (gossip.Stats.StateBytes);
//   - false deaths: members declared dead while none was;
//
// and then kills one node (its network goes silent, as a crash would) and
// measures the time until each other node's membership drops it.
//
// One process simulates all N nodes on this machine's cores, so every
// figure is for N nodes sharing them: a real node has its own CPU, and
// spreads and failure detection in a real deployment are no slower than
// here (network latency aside: the in-memory network has none).
package gossipbench

import (
	"context"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/spillway-lb/spillway/internal/gossip"
)

// Options say what to run. Zero fields take the defaults named on each.
type Options struct {
	// Nodes is the cluster size (required, at least 3).
	Nodes int
	// World is what each node's state describes. Zero: DefaultWorld.
	World World
	// Unsealed turns seals off. By default every node seals its states
	// with its own certificate and verifies the others' seals, as daemons
	// with TLS files do (mtls.GossipSeals; certificates from a throwaway
	// CA, internal/devpki).
	Unsealed bool
	// Unverified keeps the seals on the wire but makes no node verify
	// them (gossip.Options.Verifier nil): bytes are those of a sealed
	// cluster, while the CPU of N² signature checks, which one process
	// simulating every node cannot afford at a thousand nodes, is not
	// spent. A state received without its chain is then held and
	// re-sent without it, so push/pull payloads are somewhat smaller
	// than a verifying cluster's.
	Unverified bool
	// Unshared gives every node its own decoded states and its own
	// verifier's cache of parsed certificates, as N processes would have.
	// By default the nodes, being in one process, share both: a state
	// received byte for byte alike by every node is decoded once
	// (gossip.DecodeCache) and a certificate chain verified once per
	// minute rather than once per node (one mtls.GossipVerifier, whose
	// roots every node shares anyway). Either way every node checks every
	// seal's signature itself. Shared, 1,000 nodes fit in a few GB;
	// unshared, the heap holds N² decoded states (about 20 kB each for
	// the default world), which is what one daemon holds per peer.
	Unshared bool
	// Unencrypted turns the gossip key off. By default the cluster shares
	// one AES-256 key, as any deployment beyond loopback must.
	Unencrypted bool
	// Profile is the gossip.Config profile; empty means what the
	// daemons' configuration selects.
	Profile string
	// Changes is how many changes are published (one at a time, each at
	// a random node) to measure the spread. Default 10.
	Changes int
	// PublishInterval, when > 0, makes every node publish a drifted
	// state every PublishInterval during the window (spread evenly), the
	// background traffic of gfes re-publishing their numbers. Zero: only
	// the measured changes and what the gossip layer sends by itself
	// (membership, seal refreshes, push/pull).
	PublishInterval time.Duration
	// Window is the steady-state window over which bytes are counted
	// (the changes are published in it). Default 60s.
	Window time.Duration
	// BusyCores, when > 0, runs that many busy loops in child processes
	// for the whole run, taking cores away from the nodes.
	BusyCores int
	// Timeout bounds the whole run. Default 20 minutes.
	Timeout time.Duration
	// Seed seeds the states and the choice of publishers and victim.
	Seed uint64
	// HeapProfile, when set, receives a heap profile (runtime/pprof
	// "heap") taken once the cluster formed and went quiet, after a
	// garbage collection: what N nodes hold in steady state.
	HeapProfile io.Writer
	// Progress, when set, receives a line per phase.
	Progress io.Writer
	// Log receives the nodes' logs (gossip's and memberlist's); the zero
	// Logger discards them.
	Log zerolog.Logger

	// isolated (tests only) starts every node without a seed to join and
	// returns the cluster unformed, for heal to join.
	isolated bool
}

// member is one node of the benchmark.
type member struct {
	name  string
	node  *gossip.Node
	tr    *transport
	state gossip.NodeState
	done  chan error
}

// Run runs the benchmark. It returns an error if the cluster does not
// form within the timeout; figures it could not measure completely are
// reported as missed or undetected rather than as an error.
func Run(ctx context.Context, o Options) (Result, error) {
	if o.Nodes < 3 {
		return Result{}, fmt.Errorf("gossipbench: nodes must be at least 3, got %d", o.Nodes)
	}
	if o.World == (World{}) {
		o.World = DefaultWorld()
	}
	if err := o.World.validate(); err != nil {
		return Result{}, err
	}
	o.Changes = cmpOr(o.Changes, 10)
	o.Window = cmpOr(o.Window, time.Minute)
	o.Timeout = cmpOr(o.Timeout, 20*time.Minute)
	progress := func(format string, args ...any) {
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "gossipbench: "+format+"\n", args...)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if o.BusyCores > 0 {
		stop, err := busy(o.BusyCores)
		if err != nil {
			return Result{}, err
		}
		defer stop()
	}
	r := mrand.New(mrand.NewPCG(o.Seed, 0x9e3779b97f4a7c15))

	c, err := newCluster(ctx, o, r, progress)
	if c != nil {
		defer c.stop()
	}
	if err != nil {
		return Result{}, err
	}
	res := Result{
		Nodes: o.Nodes, Sealed: !o.Unsealed, Verified: !o.Unsealed && !o.Unverified, Encrypted: !o.Unencrypted, Profile: o.Profile,
		Services: o.World.Services, Regions: o.World.Regions, LoadedGroups: o.World.LoadedGroups,
		PublishInterval: o.PublishInterval.Seconds(), BusyCores: o.BusyCores, Config: timings(c.cfg),
		StartupS: c.formed.Seconds(), StartupFalseDeaths: c.departures(),
	}
	res.StartupRepairs, res.StartupPushPulls = c.repairs()
	res.StartupHealJoins = c.healJoins
	// The heap before sizes(), which encodes a full view.
	res.HeapBytes = heapInUse()
	res.HeapBytesPerPair = float64(res.HeapBytes) / float64(o.Nodes*(o.Nodes-1))
	if o.HeapProfile != nil {
		if err := pprof.Lookup("heap").WriteTo(o.HeapProfile, 0); err != nil {
			return res, fmt.Errorf("gossipbench: heap profile: %w", err)
		}
	}
	res.StateFrameBytes, res.PushPullBytes = c.sizes()

	// The steady window: background publishing, the measured changes,
	// bytes and departures counted from its start.
	progress("cluster of %d formed in %v; steady window of %v", o.Nodes, c.formed.Round(time.Millisecond), o.Window)
	depBefore := c.departures()
	sentBefore, stateBefore := c.sent()
	start := time.Now()
	winCtx, endWindow := context.WithTimeout(ctx, o.Window)
	var bg sync.WaitGroup
	if o.PublishInterval > 0 {
		bg.Go(func() { c.background(winCtx, o.PublishInterval, mrand.New(mrand.NewPCG(o.Seed, 1))) })
	}
	var lats []time.Duration
	for i := range o.Changes {
		if winCtx.Err() != nil {
			break
		}
		pub := c.members[r.IntN(len(c.members))]
		l, missed := c.measureChange(winCtx, pub, r)
		lats = append(lats, l...)
		res.SpreadMissed += missed
		progress("change %d/%d at %s: reached %d of %d nodes, slowest %v", i+1, o.Changes, pub.name,
			len(l), len(c.members)-1, maxDur(l).Round(time.Millisecond))
		// A pause between changes, so that each starts from a quiet
		// cluster (and the window is not only changes).
		select {
		case <-winCtx.Done():
		case <-time.After(time.Second):
		}
	}
	<-winCtx.Done()
	endWindow()
	bg.Wait()
	elapsed := time.Since(start)
	sentAfter, stateAfter := c.sent()
	res.WindowS = elapsed.Seconds()
	perNodeS := float64(o.Nodes) * elapsed.Seconds()
	res.BytesPerNodePerS = float64(sentAfter-sentBefore) / perNodeS
	res.StateBytesPerNodePerS = float64(stateAfter-stateBefore) / perNodeS
	res.FalseDeaths = c.departures() - depBefore
	slices.Sort(lats)
	res.SpreadSamples = len(lats) + res.SpreadMissed
	res.SpreadP50, res.SpreadP99 = seconds(quantile(lats, 0.5)), seconds(quantile(lats, 0.99))
	res.SpreadP9999, res.SpreadMax = seconds(quantile(lats, 0.9999)), seconds(maxDur(lats))
	if ctx.Err() != nil {
		return res, fmt.Errorf("gossipbench: timed out in the steady window: %w", ctx.Err())
	}

	// Failure detection.
	victim := c.members[1+r.IntN(len(c.members)-1)]
	progress("killing %s", victim.name)
	dead, undetected := c.measureDeath(ctx, victim)
	slices.Sort(dead)
	res.DeadUndetected = undetected
	res.DeadDetectedP50, res.DeadDetectedP99 = seconds(quantile(dead, 0.5)), seconds(quantile(dead, 0.99))
	res.DeadDetectedMax = seconds(maxDur(dead))
	res.DroppedPackets = c.dropped()
	progress("%s dropped by %d of %d nodes, slowest after %v", victim.name, len(dead), len(c.members)-1,
		maxDur(dead).Round(time.Millisecond))
	return res, nil
}

// measureChange publishes a changed state at pub and returns how long
// each other node took to hold it, and how many had not when ctx ended.
func (c *cluster) measureChange(ctx context.Context, pub *member, r *mrand.Rand) ([]time.Duration, int) {
	s := pub.state.Clone()
	svc := fmt.Sprintf("service-%02d", r.IntN(len(s.Demand)))
	s.Demand[svc] *= 1.5 // a surge at one service
	for _, m := range c.members {
		drainChanges(m.node)
	}
	start := time.Now()
	v, err := pub.node.Publish(s)
	if err != nil {
		return nil, len(c.members) - 1
	}
	pub.state = s
	return c.waitAll(ctx, pub, func(snap *gossip.Snapshot) bool {
		got, ok := snap.States[pub.name]
		return ok && got.Version >= v
	}, start)
}

// measureDeath kills victim and returns how long each other node took to
// drop it from its membership, and how many had not when ctx ended.
func (c *cluster) measureDeath(ctx context.Context, victim *member) ([]time.Duration, int) {
	for _, m := range c.members {
		drainChanges(m.node)
	}
	start := time.Now()
	victim.tr.kill()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return c.waitAll(ctx, victim, func(snap *gossip.Snapshot) bool {
		_, listed := slices.BinarySearch(snap.Members, victim.name)
		return !listed
	}, start)
}

// waitAll waits until done holds for the Snapshot of every member but
// except, and returns the times from start, and how many were still
// waiting when ctx ended.
func (c *cluster) waitAll(ctx context.Context, except *member, done func(*gossip.Snapshot) bool, start time.Time) ([]time.Duration, int) {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		lats = make([]time.Duration, 0, len(c.members))
	)
	for _, m := range c.members {
		if m == except {
			continue
		}
		wg.Go(func() {
			for {
				if done(m.node.Snapshot()) {
					d := time.Since(start)
					mu.Lock()
					lats = append(lats, d)
					mu.Unlock()
					return
				}
				select {
				case <-m.node.Changes():
				case <-ctx.Done():
					return
				}
			}
		})
	}
	wg.Wait()
	return lats, len(c.members) - 1 - len(lats)
}

// background makes every node publish a drifted state every interval,
// spread evenly over it, until ctx ends.
func (c *cluster) background(ctx context.Context, interval time.Duration, r *mrand.Rand) {
	t := time.NewTicker(max(interval/time.Duration(len(c.members)), time.Microsecond))
	defer t.Stop()
	for i := 0; ; i = (i + 1) % len(c.members) {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m := c.members[i]
		s := drift(m.state, r)
		if _, err := m.node.Publish(s); err == nil {
			m.state = s
		}
	}
}

// sent returns the bytes every node sent, at the transport and as state
// messages.
func (c *cluster) sent() (total, state uint64) {
	for _, m := range c.members {
		total += m.tr.sent.Load()
		state += m.node.Stats().StateBytes
	}
	return total, state
}

// repairs returns the membership repairs and the push/pulls merged, over
// every node.
func (c *cluster) repairs() (repairs, pushPulls uint64) {
	for _, m := range c.members {
		st := m.node.Stats()
		repairs += st.Repairs
		pushPulls += st.PushPulls
	}
	return repairs, pushPulls
}

func (c *cluster) departures() uint64 {
	var d uint64
	for _, m := range c.members {
		d += m.node.Stats().Departures
	}
	return d
}

func (c *cluster) dropped() uint64 {
	var d uint64
	for _, m := range c.members {
		d += m.tr.dropped.Load()
	}
	return d
}

// sizes returns the size of node 0's state as a direct send carries it
// and of its full view.
func (c *cluster) sizes() (frame, view int) {
	n := c.members[0].node
	return n.StateFrameSize(), n.ViewSize()
}

// heapInUse returns the bytes of the heap's spans in use after a garbage
// collection: what the process holds live, plus fragmentation.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// busy starts k busy loops, each its own process, and returns the function
// that ends them.
func busy(k int) (func(), error) {
	var cmds []*exec.Cmd
	stop := func() {
		for _, cmd := range cmds {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}
	for range k {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			stop()
			return nil, fmt.Errorf("gossipbench: busy loop: %w", err)
		}
		cmds = append(cmds, cmd)
	}
	return stop, nil
}

func drainChanges(n *gossip.Node) {
	select {
	case <-n.Changes():
	default:
	}
}

// quantile returns the q-quantile (nearest rank) of sorted ds.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(q*float64(len(ds))+0.5) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

func maxDur(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

func seconds(d time.Duration) float64 { return d.Seconds() }

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
