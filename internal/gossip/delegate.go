package gossip

import "github.com/hashicorp/memberlist"

// delegate adapts Node to memberlist's Delegate and EventDelegate, keeping
// those methods off Node's API. memberlist calls them from its own
// goroutines, concurrently (Delegate) or in order (EventDelegate, with its
// node lock held). None of them blocks on I/O or calls back into
// memberlist; each takes Node.mu only for the in-memory merge.
type delegate struct{ n *Node }

var (
	_ memberlist.Delegate      = delegate{}
	_ memberlist.EventDelegate = delegate{}
)

// NodeMeta is unused: states travel as user messages, not node metadata,
// which is limited to 512 bytes and only refreshed with alive messages.
func (delegate) NodeMeta(int) []byte { return nil }

// NotifyMsg receives a state message (gossip, or a direct send over UDP or
// TCP). handleMessage copies what it keeps.
func (d delegate) NotifyMsg(b []byte) { d.n.handleMessage(b) }

// GetBroadcasts hands queued states (own and relayed) to a gossip round.
func (d delegate) GetBroadcasts(overhead, limit int) [][]byte {
	out := d.n.queue.GetBroadcasts(overhead, limit)
	for _, b := range out {
		d.n.stateBytes.Add(uint64(len(b)))
	}
	return out
}

// LocalState is this node's full view, sent on join and push/pull.
func (d delegate) LocalState(bool) []byte {
	b := d.n.localView()
	d.n.stateBytes.Add(uint64(len(b)))
	return b
}

// MergeRemoteState merges another node's full view. memberlist merges the
// membership first, so the sender's alive members are already known.
func (d delegate) MergeRemoteState(buf []byte, _ bool) { d.n.handlePushPull(buf) }

// NotifyJoin: a member is alive (new, or back from dead).
func (d delegate) NotifyJoin(node *memberlist.Node) { d.n.memberJoined(node) }

// NotifyLeave: a member left or was declared dead; its state is dropped.
func (d delegate) NotifyLeave(node *memberlist.Node) { d.n.memberLeft(node.Name) }

// NotifyUpdate: a member's address or metadata changed.
func (d delegate) NotifyUpdate(node *memberlist.Node) { d.n.memberUpdated(node) }

// broadcast is one queued state frame. It is named by the publishing node,
// so queueing a newer state of a node replaces the older one in the
// TransmitLimitedQueue: the queue holds at most one frame per node.
type broadcast struct {
	name string
	msg  []byte
}

var _ memberlist.NamedBroadcast = (*broadcast)(nil)

func (b *broadcast) Invalidates(other memberlist.Broadcast) bool {
	nb, ok := other.(memberlist.NamedBroadcast)
	return ok && nb.Name() == b.name
}
func (b *broadcast) Name() string    { return b.name }
func (b *broadcast) Message() []byte { return b.msg }
func (b *broadcast) Finished()       {}
