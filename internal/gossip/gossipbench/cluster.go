package gossipbench

// Forming a cluster: starting the nodes in batches, waiting until every node
// holds every member and state, and healing a forming that stalls.

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/spillway-lb/spillway/internal/daemonflags"
	"github.com/spillway-lb/spillway/internal/devpki"
	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/internal/mtls"
)

// cluster is the running nodes.
type cluster struct {
	members []*member
	cancel  context.CancelFunc
	cfg     gossip.Config
	formed  time.Duration
	dir     string
	// healJoins counts the joins waitFormed made for members that nodes
	// lacked when forming stalled.
	healJoins int
}

// newCluster starts o.Nodes nodes, each joining a random earlier one, and
// waits until every node holds every member and state. On error the
// returned cluster (if any) must still be stopped.
func newCluster(ctx context.Context, o Options, r *mrand.Rand, progress func(string, ...any)) (*cluster, error) {
	netw := newNetwork()
	runCtx, cancel := context.WithCancel(context.Background())
	c := &cluster{cancel: cancel}
	var key string
	if !o.Unencrypted {
		k := make([]byte, 32)
		_, _ = rand.Read(k)
		key = base64.StdEncoding.EncodeToString(k)
	}
	quiet := o.Log
	var ca *devpki.CA
	var caPath string
	var verifier gossip.Verifier
	var decoded *gossip.DecodeCache
	if !o.Unshared {
		// Two generations of 4N entries: every state of the cluster and
		// a few newer versions of each.
		decoded = gossip.NewDecodeCache(4 * o.Nodes)
	}
	if !o.Unsealed {
		var err error
		if c.dir, err = os.MkdirTemp("", "gossipbench-"); err != nil {
			return c, fmt.Errorf("gossipbench: %w", err)
		}
		if ca, err = devpki.NewCA("gossipbench", 24*time.Hour); err != nil {
			return c, fmt.Errorf("gossipbench: CA: %w", err)
		}
		if caPath, err = ca.WriteCA(c.dir); err != nil {
			return c, fmt.Errorf("gossipbench: CA: %w", err)
		}
		if !o.Unshared && !o.Unverified {
			v, err := mtls.NewGossipVerifier(caPath, quiet)
			if err != nil {
				return c, fmt.Errorf("gossipbench: verifier: %w", err)
			}
			verifier = v
		}
	}
	start := time.Now()
	for i := range o.Nodes {
		if err := ctx.Err(); err != nil {
			return c, fmt.Errorf("gossipbench: %d of %d nodes started: %w", i, o.Nodes, err)
		}
		name := fmt.Sprintf("gfe-%04d", i)
		join := ""
		if i > 0 && !o.isolated {
			join = c.members[r.IntN(i)].node.Addr()
		}
		cfg, _, err := daemonflags.Gossip(daemonflags.GossipSettings{Name: name, Addr: "127.0.0.1:0", Join: join, Key: key, Profile: o.Profile})
		if err != nil {
			return c, fmt.Errorf("gossipbench: %s: %w", name, err)
		}
		c.cfg = cfg
		tr := netw.newTransport()
		opts := gossip.Options{Logger: quiet, Transport: tr, DecodeCache: decoded, HandoffQueueDepth: handoffDepth}
		if ca != nil {
			files, err := ca.IssueFiles(c.dir, name, devpki.Leaf{CommonName: name, Names: []string{name}})
			if err != nil {
				return c, fmt.Errorf("gossipbench: certificate of %s: %w", name, err)
			}
			s, v, err := mtls.GossipSeals(mtls.Files{CA: files.CA, Cert: files.Cert, Key: files.Key}, caPath, name, quiet)
			if err != nil || s == nil {
				return c, fmt.Errorf("gossipbench: seals of %s: %w", name, errors.Join(err, errors.New("no sealer")))
			}
			opts.Sealer = s
			switch {
			case o.Unverified:
			case verifier != nil:
				opts.Verifier = verifier
			default:
				opts.Verifier = v
			}
		}
		n, err := gossip.New(cfg, opts)
		if err != nil {
			return c, fmt.Errorf("gossipbench: %w", err)
		}
		m := &member{name: name, node: n, tr: tr, state: o.World.gfeState(i, r), done: make(chan error, 1)}
		if _, err := n.Publish(m.state); err != nil {
			return c, fmt.Errorf("gossipbench: %s: %w", name, err)
		}
		go func() { m.done <- n.Run(runCtx) }()
		select {
		case <-n.Ready():
		case err := <-m.done:
			return c, fmt.Errorf("gossipbench: %s: %w", name, err)
		case <-ctx.Done():
			return c, fmt.Errorf("gossipbench: starting %s: %w", name, ctx.Err())
		}
		c.members = append(c.members, m)
		if o.isolated {
			continue
		}
		if (i+1)%startBatch == 0 || i+1 == o.Nodes {
			// Let each batch join before the next starts: a thousand
			// nodes joining at once is a storm of full-state syncs no
			// deployment sees (gfes start a site or a few at a time).
			c.waitMembers(ctx, 30*time.Second)
			repairs, pushPulls := c.repairs()
			progress("%d nodes started (%v; %d repairs, %d push/pulls)", i+1, time.Since(start).Round(time.Second), repairs, pushPulls)
		}
	}
	if o.isolated {
		return c, nil
	}
	if err := c.waitFormed(ctx, progress); err != nil {
		return c, err
	}
	c.formed = time.Since(start)
	c.waitQuiet(ctx, time.Minute)
	return c, nil
}

// handoffDepth is memberlist's handler queue per node in the benchmark
// (gossip.Options.HandoffQueueDepth; daemons keep memberlist's 1,024): at
// 1,024 a thousand starved nodes held gigabytes of received packets, and
// the process stalled in garbage collection. A node whose queue is full
// drops what arrives, as a daemon on a host that cannot keep up does.
const handoffDepth = 128

// startBatch is how many nodes start before the benchmark waits for them
// to join.
const startBatch = 50

// waitMembers waits up to d until every node lists every started node but
// at most 1% (a member falsely declared dead while the cluster forms may
// stay so until waitFormed heals it; waiting the whole d for it at every
// batch made forming a thousand nodes ten minutes longer). It
// reads the member counts (Node.Members), not the Snapshots: building a
// snapshot copies every state a node holds, and while a cluster forms
// every node's view changes between two polls, so polling N Snapshots
// costs N² map entries each time.
func (c *cluster) waitMembers(ctx context.Context, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		all := true
		for _, m := range c.members {
			if m.node.Members() < len(c.members)-len(c.members)/100 {
				all = false
				break
			}
		}
		if all {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitQuiet waits up to d until no node has states queued for gossip, so
// that the relays of the states exchanged while forming do not count in
// the steady window.
func (c *cluster) waitQuiet(ctx context.Context, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		queued := 0
		for _, m := range c.members {
			queued += m.node.QueuedBroadcasts()
		}
		if queued == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitFormed waits until every node lists every member and holds every
// state. When that has not improved for stallAfter, heal has a node that
// lacks each missing member join it (Node.Join, a push/pull): what brings back
// a member falsely declared dead that missed the news (and so did not
// refute it) is otherwise the next push/pull, up to 30 minutes away under
// the large profile at 1,000 members. The joins are counted
// (c.healJoins); the false deaths themselves are counted as ever.
func (c *cluster) waitFormed(ctx context.Context, progress func(string, ...any)) error {
	want := len(c.members)
	last := time.Now()
	best, bestAt := -1, time.Now()
	for {
		ready, members, states := 0, 0, 0
		var refused, stale uint64
		for _, m := range c.members {
			members += m.node.Members()
			if m.node.Members() != want && time.Since(last) < 10*time.Second {
				continue // not formed; Snapshot only for the progress line
			}
			s := m.node.Snapshot()
			if len(s.Members) == want && len(s.States) == want {
				ready++
			}
			states += len(s.States)
			st := m.node.Stats()
			refused += st.UnknownCerts + st.BadSeals + st.StaleSeals + st.Unsealed
			stale += st.Stale
		}
		if ready == want {
			return nil
		}
		progressed := ready + members
		if progressed > best {
			best, bestAt = progressed, time.Now()
		} else if time.Since(bestAt) > stallAfter {
			progress("forming stalled for %v: nodes that lack members join them", stallAfter)
			c.heal(ctx)
			bestAt = time.Now()
		}
		if time.Since(last) > 10*time.Second {
			repairs, pushPulls := c.repairs()
			progress("%d of %d nodes hold every member and state (%.1f members, %.1f states each on average; %d refused, %d stale; %d repairs, %d push/pulls, %d heal joins)",
				ready, want, float64(members)/float64(want), float64(states)/float64(want), refused, stale, repairs, pushPulls, c.healJoins)
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gossipbench: %d of %d nodes hold every member and state: %w", ready, want, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// stallAfter is how long forming may make no progress before waitFormed
// has nodes join the members they lack.
const stallAfter = 30 * time.Second

// healJoinsPerRound bounds the joins of one heal: each is a push/pull of
// two full views (1.8 MB each at 1,000 members).
const healJoinsPerRound = 64

// heal has, for each member some node does not list, one node that lacks
// it join it: the push/pull tells the member it is thought dead, it
// refutes, and its refutation reaches every node by gossip, so one join
// per lacking member is enough (a join per lacking pair, N times more, held
// a 1,000-node run for half an hour). At most healJoinsPerRound joins per
// call; returns early when ctx ends.
func (c *cluster) heal(ctx context.Context) {
	joined := make(map[string]bool)
	for _, m := range c.members {
		if m.node.Members() == len(c.members) {
			continue
		}
		listed := m.node.Snapshot().Members
		for _, o := range c.members {
			if len(joined) >= healJoinsPerRound || ctx.Err() != nil {
				return
			}
			if o == m || joined[o.name] {
				continue
			}
			if _, ok := slices.BinarySearch(listed, o.name); ok {
				continue
			}
			joined[o.name] = true
			_, _ = m.node.Join([]string{o.node.Addr()})
			c.healJoins++
		}
	}
}

// stop shuts every node down: the network first (so that the leave
// messages of a thousand nodes stopping at once go nowhere), then Run.
func (c *cluster) stop() {
	for _, m := range c.members {
		m.tr.kill()
	}
	c.cancel()
	for _, m := range c.members {
		<-m.done
	}
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
}
