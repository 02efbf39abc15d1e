package gossip

import (
	"bytes"
	"slices"
	"sort"

	"github.com/hashicorp/memberlist"
)

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

// handleMessage processes one state message, received directly or by
// gossip. b is only valid during the call.
func (n *Node) handleMessage(b []byte) {
	n.received.Add(1)
	route, frame, err := splitRoute(b)
	var s NodeState
	if err == nil {
		s, err = decodeState(frame)
	}
	if err != nil {
		n.invalid.Add(1)
		n.log.Warn().Err(err).Int("bytes", len(b)).Msg("dropped invalid state message")
		return
	}
	v := n.offer([]NodeState{s})[0]
	if route == routeGossip && (v == verdictHidden || v == verdictVisible) {
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
	n.setOwnLocked(stored, frame, n.clock.Now())
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

// memberJoined records a member memberlist reports alive. node is only
// valid during the call.
func (n *Node) memberJoined(node *memberlist.Node) {
	name := node.Name
	n.mu.Lock()
	defer n.mu.Unlock()
	if name != n.cfg.Name {
		n.addrs[name] = copyNode(node)
		delete(n.repaired, name)
	}
	if n.tab.join(name, n.clock.Now()) {
		n.rebuildLocked()
		n.log.Info().Str("member", name).Msg("member joined")
		if !n.fanout {
			if n.greet == nil {
				n.greet = make(map[string]struct{})
			}
			n.greet[name] = struct{}{}
		}
		n.signalSender()
	}
}

// memberUpdated records a member's new address or metadata.
func (n *Node) memberUpdated(node *memberlist.Node) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.addrs[node.Name]; ok {
		n.addrs[node.Name] = copyNode(node)
	}
}

// member returns the address book entry of an alive member.
func (n *Node) member(name string) (memberlist.Node, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	m, ok := n.addrs[name]
	return m, ok
}

func copyNode(node *memberlist.Node) memberlist.Node {
	c := *node
	c.Addr = slices.Clone(node.Addr)
	c.Meta = slices.Clone(node.Meta)
	return c
}

func (n *Node) memberLeft(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.addrs, name)
	if n.tab.leave(name, n.clock.Now()) {
		n.departures.Add(1)
		n.rebuildLocked()
		n.log.Info().Str("member", name).Msg("member left or failed; its state is no longer visible")
	}
}
