package gossip

// Membership repair: which seeds a rejoin contacts, and the gaps (states
// held from nodes memberlist has not reported) that Run joins to heal a
// partition memberlist's own push/pull has not.

import (
	"context"
	"math"
	"net"
	"time"

	"github.com/spillway-lb/spillway/internal/backoff"
)

// rejoinTargets returns the seeds a rejoin contacts: those that are not
// the address of an alive member. Joining an alive member is one full
// push/pull (every state, both ways) that teaches neither side anything,
// and at a thousand members costs megabytes every RejoinInterval; a
// partition shows as seeds that are not alive members (declared dead on
// this side), and those are still joined. A seed given as a host name
// rather than an IP address cannot be matched and is always joined.
func (n *Node) rejoinTargets(seeds []string) []string {
	n.mu.Lock()
	alive := make(map[string]struct{}, len(n.addrs))
	for _, m := range n.addrs {
		alive[m.Address()] = struct{}{}
	}
	n.mu.Unlock()
	var out []string
	for _, s := range seeds {
		if _, ok := alive[normalizeAddr(s)]; !ok {
			out = append(out, s)
		}
	}
	return out
}

// normalizeAddr returns "ip:port" in memberlist.Node.Address's form for
// an IP literal with a port, and s unchanged otherwise.
func normalizeAddr(s string) string {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return s
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return s
	}
	return net.JoinHostPort(ip.String(), port)
}

// repairEvery is how often Run looks for membership gaps (see repairGaps).
func (n *Node) repairEvery() time.Duration { return 5 * n.cfg.GossipInterval }

// repairGrace is how long a state from a node memberlist has not reported
// is held before repairGaps joins that node: about as long as memberlist's
// own gossip of the node's alive message lives, after which it would only
// come with the next push/pull. Each node that holds a membership message
// gossips it RetransmitMult·ceil(log10(N+1)) times, one round per
// GossipInterval, and the message needs about log_GossipNodes(N) such
// relays to reach everyone, so the grace is their product, and at least
// 2·repairEvery: 1 s for a few members with the default timings, 2.4 s at
// 20, 6 s at 200, 11.2 s at 1,000. It is also at least a tenth of
// PushPullInterval (1 s by default, 30 s under ProfileLarge): a repair is
// a push/pull ahead of the periodic ones, and a profile that spaces those
// because full views are megabytes spaces repairs too. A fixed second was shorter than
// memberlist's spread at a few hundred members: every member that a new
// node's first state reached before its alive message joined it, a full
// push/pull each, N of them for every node that started.
func (n *Node) repairGrace() time.Duration {
	members := float64(max(1, n.members.Load()))
	limit := float64(n.cfg.RetransmitMult) * math.Ceil(math.Log10(members+1))
	hops := math.Ceil(math.Log(members) / math.Log(float64(max(2, n.cfg.GossipNodes))))
	return max(2*n.repairEvery(), n.cfg.PushPullInterval/10, time.Duration(hops*limit)*n.cfg.GossipInterval)
}

// repairGaps closes membership gaps: memberlist spreads a join by gossip,
// and a node can miss it (notably when two groups that joined different
// seeds merge) until the next push/pull, PushPullInterval later (20s at 50
// nodes). A state received from a node memberlist does not list, for
// longer than repairGrace, proves the gap, and carries the node's address:
// joining it (one push/pull) teaches both sides each other's members at
// once. It joins one such node (chosen at random among the gaps) per
// repairGrace: one push/pull brings every member the other side knows,
// which usually closes the other gaps too, and each costs two full views
// (megabytes at a thousand members), so that when memberlist's gossip is
// slow for everyone at once (hosts starved of CPU) the repairs do not add
// a push/pull per gap per member every round. A state version whose node
// was joined is not tried again; a join that failed (the node slow to
// answer on a loaded machine, say) is retried later until it works or the
// state is pruned. States of nodes memberlist reported dead are never
// tried.
func (n *Node) repairGaps() {
	g, ok := n.repairTarget()
	if !ok {
		return
	}
	if _, err := n.Join([]string{g.addr}); err != nil {
		n.repairErrs.Add(1)
		n.log.Info().Str("node", g.node).Err(err).Msg("joining a node known only from its state failed; retrying next round")
		return
	}
	n.repairs.Add(1)
	n.mu.Lock()
	n.repaired[g.node] = max(n.repaired[g.node], g.version)
	n.mu.Unlock()
	n.log.Info().Str("node", g.node).Msg("joined a node known only from its state")
}

// gap is a node repairGaps may join: its name, address and the version of
// its state that proved the gap.
type gap struct {
	node, addr string
	version    uint64
}

// repairTarget returns the gap this repair round joins, if any: none
// within repairGrace of the last round that returned one, and otherwise
// one of the states held for longer than repairGrace from nodes memberlist
// has not reported, with an address and a version not joined yet, at
// random. It is only called from Run's goroutine (it draws from n.rand).
func (n *Node) repairTarget() (gap, bool) {
	grace := n.repairGrace()
	now := n.clock.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	if now.Before(n.nextRepair) {
		return gap{}, false
	}
	var gaps []gap
	for _, s := range n.tab.gaps(now, grace) {
		if s.Addr == "" || n.repaired[s.Node] >= s.Version {
			continue
		}
		gaps = append(gaps, gap{s.Node, s.Addr, s.Version})
	}
	for node := range n.repaired {
		if _, held := n.tab.states[node]; !held {
			delete(n.repaired, node) // pruned from the table
		}
	}
	if len(gaps) == 0 {
		return gap{}, false
	}
	n.nextRepair = now.Add(grace)
	return gaps[n.rand()%uint64(len(gaps))], true
}

// joinWithBackoff joins seeds, retrying until one answers or ctx ends.
func (n *Node) joinWithBackoff(ctx context.Context, seeds []string) {
	for attempt := 0; ; attempt++ {
		k, err := n.Join(seeds)
		if err == nil {
			n.log.Info().Int("contacted", k).Int("members", n.Members()).Msg("joined cluster")
			return
		}
		d := backoff.Jittered(attempt, n.cfg.JoinBackoffMin, n.cfg.JoinBackoffMax, n.rand())
		n.log.Warn().Err(err).Int("attempt", attempt+1).Dur("retry_in", d).Msg("join failed")
		t := n.clock.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}
