package gossip

import (
	"sort"
	"time"
)

// verdict is what the table did with one received state.
type verdict uint8

const (
	// verdictStale: the version is not higher than the one held for that
	// node (visible, or hidden since the node left). Dropped.
	verdictStale verdict = iota + 1
	// verdictHidden: newer and kept, but memberlist does not (yet) list the
	// node as alive, so it is not visible. This happens when a state
	// outruns the node's own alive message; the state becomes visible when
	// the node joins, and is forgotten after the table's ttl otherwise.
	verdictHidden
	// verdictVisible: newer, kept and visible: the view changed.
	verdictVisible
	// verdictSelf: a state that claims to be this node's (an echo of our
	// own broadcast, or one from a previous incarnation). Never stored.
	verdictSelf
	// verdictUnsealed: an unsealed state for a node whose held state is
	// sealed. Dropped: with Config.AcceptUnsealed, unsealed states are
	// believed only for nodes that never proved an identity, so a key
	// holder cannot replace a sealed node's state with its own.
	verdictUnsealed
)

func (v verdict) String() string {
	switch v {
	case verdictStale:
		return "stale"
	case verdictHidden:
		return "hidden"
	case verdictVisible:
		return "visible"
	case verdictSelf:
		return "self"
	case verdictUnsealed:
		return "unsealed"
	}
	return "unknown"
}

// table is the merge rule, with no I/O, locks or clock: the newest state per
// node and the set of alive members. Node serializes calls with its mutex and
// passes the time in.
//
// Invariants, after any sequence of calls:
//   - visible() holds exactly the newest state received for each node that is
//     currently a member (self is always a member);
//   - a state is stored only if its Version is higher than the one held for
//     that node, so a stale broadcast or push/pull never rolls a node back
//     (or, at the same Version, if it is sealed and the held one is not);
//   - an unsealed state never replaces a sealed one;
//   - when a member leaves, its state is hidden, not forgotten: its in-flight
//     broadcasts cannot bring an older version back, and if the node returns
//     (a false failure detection, a healed partition) its last state is
//     visible again at once;
//   - states of non-members are dropped ttl after they were stored or their
//     node left, so the table's size is bounded by the members plus the
//     nodes that departed within ttl.
type table struct {
	self string
	ttl  time.Duration

	members map[string]struct{}
	states  map[string]held
	// outside holds the nodes of states that are not members (not yet
	// reported, or departed), so that gaps looks at those alone rather
	// than at every state: a node runs it twice a second, and at a
	// thousand members a scan of every state each time was a tenth of a
	// forming cluster's CPU.
	outside map[string]struct{}
	// nextPrune is when prune next scans states (at most every ttl/4, so
	// that frequent calls stay O(1) amortized).
	nextPrune time.Time
}

// held is a stored state and when it was stored, or, for a non-member, when
// it was stored or its node left, whichever is later.
type held struct {
	state NodeState
	// wire is the state's JSON as push/pull sends it (nil: encode state).
	wire []byte
	at   time.Time
	// departed is set while the node is not a member because memberlist
	// reported it dead or left (rather than not reported it yet).
	departed bool
}

func newTable(self string, ttl time.Duration) *table {
	return &table{
		self:    self,
		ttl:     ttl,
		members: map[string]struct{}{self: {}},
		states:  make(map[string]held),
		outside: make(map[string]struct{}),
	}
}

// apply offers a received state to the table. s must be valid
// (NodeState.validateRemote) and is stored as is, so the caller must not
// change it afterwards.
func (t *table) apply(s NodeState, now time.Time) verdict { return t.applyWire(s, nil, now) }

// applyWire is apply for a state whose JSON as it travels is wire (nil:
// encode s when it is sent on), which the table keeps.
func (t *table) applyWire(s NodeState, wire []byte, now time.Time) verdict {
	if s.Node == t.self {
		return verdictSelf
	}
	t.prune(now)
	h, ok := t.states[s.Node]
	if ok {
		if t.stale(h, s.Version, s.Sealed) {
			return verdictStale
		}
		if h.state.Sealed && !s.Sealed {
			return verdictUnsealed
		}
	}
	t.states[s.Node] = held{state: s, wire: wire, at: now, departed: h.departed}
	if _, ok := t.members[s.Node]; ok {
		return verdictVisible
	}
	t.outside[s.Node] = struct{}{}
	return verdictHidden
}

// stale reports whether a state of version v (sealed or not) is no news
// next to h.
func (t *table) stale(h held, v uint64, sealed bool) bool {
	return v < h.state.Version || (v == h.state.Version && (h.state.Sealed || !sealed))
}

// known reports whether a state of another node with version v would be
// stale even if sealed: what a receiver checks before it spends a
// signature verification.
func (t *table) known(node string, v uint64) bool {
	h, ok := t.states[node]
	return node != t.self && ok && t.stale(h, v, true)
}

// setSelf stores this node's own state. The caller guarantees it is newer.
func (t *table) setSelf(s NodeState, now time.Time) { t.setSelfWire(s, nil, now) }

// setSelfWire is setSelf with the state's JSON as push/pull sends it.
func (t *table) setSelfWire(s NodeState, wire []byte, now time.Time) {
	t.states[t.self] = held{state: s, wire: wire, at: now}
}

// join records that memberlist reports node alive. It returns false if node
// was already a member (or is self).
func (t *table) join(node string, now time.Time) bool {
	if _, ok := t.members[node]; ok {
		return false
	}
	t.prune(now)
	t.members[node] = struct{}{}
	delete(t.outside, node)
	if h, ok := t.states[node]; ok && h.departed {
		h.departed = false
		t.states[node] = h
	}
	return true
}

// leave records that memberlist reports node dead or left: its state stops
// being visible and is kept hidden for ttl. It returns false if node was not
// a member. Self never leaves the table.
func (t *table) leave(node string, now time.Time) bool {
	if node == t.self {
		return false
	}
	if _, ok := t.members[node]; !ok {
		return false
	}
	t.prune(now)
	delete(t.members, node)
	if h, ok := t.states[node]; ok {
		h.at = now
		h.departed = true
		t.states[node] = h
		t.outside[node] = struct{}{}
	}
	return true
}

// gaps returns the states of nodes that memberlist has never reported (or
// not since they came back) although their state has been held for at
// least grace: evidence of a membership message this node missed. Sorted
// by node name.
func (t *table) gaps(now time.Time, grace time.Duration) []NodeState {
	var out []NodeState
	for node := range t.outside {
		h := t.states[node]
		if h.departed || now.Sub(h.at) < grace {
			continue
		}
		out = append(out, h.state)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// prune drops the states of non-members that are older than ttl.
func (t *table) prune(now time.Time) {
	if now.Before(t.nextPrune) {
		return
	}
	t.nextPrune = now.Add(t.ttl / 4)
	for node := range t.outside {
		if now.Sub(t.states[node].at) > t.ttl {
			delete(t.states, node)
			delete(t.outside, node)
		}
	}
}

// visible returns a new map of the states of current members.
func (t *table) visible() map[string]NodeState {
	out := make(map[string]NodeState, len(t.members))
	for node := range t.members {
		if h, ok := t.states[node]; ok {
			out[node] = h.state
		}
	}
	return out
}

// visibleWires returns the JSON forms held for the states visible() returns
// (only those that have one).
func (t *table) visibleWires() map[string][]byte {
	out := make(map[string][]byte, len(t.members))
	for node := range t.members {
		if h, ok := t.states[node]; ok && h.wire != nil {
			out[node] = h.wire
		}
	}
	return out
}

// memberNames returns the sorted names of the current members, self included.
func (t *table) memberNames() []string {
	out := make([]string, 0, len(t.members))
	for node := range t.members {
		out = append(out, node)
	}
	sort.Strings(out)
	return out
}
