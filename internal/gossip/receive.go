package gossip

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"sort"
	"time"
	"weak"

	"github.com/hashicorp/memberlist"
)

// rebuildLocked records that the view changed and notifies Changes; the
// next Snapshot builds the new one. Building it is a copy of every visible
// state (O(N)), and a node that is joining, or that a thousand members
// greet, accepts states by the hundred between two reads: building once per
// read rather than once per state is what keeps forming a cluster of N
// from costing N³. Caller must hold n.mu.
func (n *Node) rebuildLocked() {
	n.seq++
	n.members.Store(int64(len(n.tab.members)))
	n.dirty.Store(true)
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
	var ws wireState
	if err == nil {
		ws, err = decodeWireState(frame, n.decodeCache)
	}
	if err != nil {
		n.invalid.Add(1)
		n.log.Warn().Err(err).Int("bytes", len(b)).Msg("dropped invalid state message")
		return
	}
	admitted := n.admit([]wireState{ws})
	if len(admitted) == 0 {
		return
	}
	v := n.offer(admitted)[0]
	if route == routeGossip && (v == verdictHidden || v == verdictVisible) {
		if len(b) <= n.budget {
			n.queue.QueueBroadcast(&broadcast{name: ws.state.Node, msg: bytes.Clone(b)})
			n.relayed.Add(1)
		}
	}
	if n.onVerdict != nil {
		n.onVerdict(admitted[0].state, v)
	}
}

// handlePushPull merges the full view another node sent over TCP.
func (n *Node) handlePushPull(buf []byte) {
	n.pushPull.Add(1)
	states, err := decodeWireStates(buf, n.decodeCache)
	if err != nil {
		n.invalid.Add(1)
		n.log.Warn().Err(err).Int("bytes", len(buf)).Msg("dropped invalid states in push/pull")
	}
	if states = n.admit(states); len(states) > 0 {
		n.offer(states)
	}
}

// admit returns the received states this node believes, as far as their
// seals go (see seal.go): sealed ones whose seal verifies, marked Sealed
// and with the chain in their wire form, and unsealed ones when this node
// verifies no seals or accepts unsealed states. Every other state is
// counted and logged. States that would be stale anyway are passed on
// unverified (offer drops them), so an old state costs no signature check.
// Not called with n.mu held: verifying takes tens of microseconds.
func (n *Node) admit(states []wireState) []wireState {
	if n.verifier == nil {
		return states // seals ignored: the wire forms still carry them on
	}
	now := n.clock.Now()
	out := states[:0]
	for _, ws := range states {
		n.mu.Lock()
		known := n.tab.known(ws.state.Node, ws.state.Version) ||
			(ws.state.Node == n.cfg.Name && ws.state.Version <= n.version)
		n.mu.Unlock()
		if known {
			out = append(out, ws) // stale, or an echo of ours: offer counts it
			continue
		}
		switch v, err := n.checkSeal(&ws, now); v {
		case sealOK:
			out = append(out, ws)
		case sealNone:
			if n.cfg.AcceptUnsealed {
				out = append(out, ws)
				continue
			}
			n.refused(ws.state, "unsealed")
			n.unsealed.Add(1)
			n.refusalLog.Warn().Str("from", ws.state.Node).Str("kind", string(ws.state.Kind)).Str("reason", "unsealed").
				Msg("refused a gossip state without a seal: its publisher cannot prove it is the node it names (an older version, a node without a TLS certificate, or an impostor)")
		case sealBad:
			n.refused(ws.state, "bad_seal")
			n.badSeals.Add(1)
			n.refusalLog.Warn().Err(err).Str("from", ws.state.Node).Str("kind", string(ws.state.Kind)).Str("reason", "bad_seal").
				Msg("refused a gossip state whose seal does not verify: a forgery, or a certificate the trusted roots do not vouch for or that does not name the node")
		case sealUnknownCert:
			n.refused(ws.state, "unknown_certificate")
			n.unknownCerts.Add(1)
			n.log.Debug().Str("from", ws.state.Node).Str("reason", "unknown_certificate").
				Msg("refused a gossip state sealed by a certificate not seen yet; the next push/pull brings it")
		case sealStale:
			n.refused(ws.state, "stale_seal")
			n.staleSeals.Add(1)
			n.refusalLog.Warn().Str("from", ws.state.Node).Time("published", time.Unix(0, int64(ws.state.Version))).
				Dur("max_age", n.cfg.SealMaxAge).Str("reason", "stale_seal").
				Msg("refused a sealed gossip state older than the seal's max age: a replay, or a publisher whose clock is behind")
		}
	}
	return out
}

// refused calls the onRefused test hook.
func (n *Node) refused(s NodeState, reason string) {
	if n.onRefused != nil {
		n.onRefused(s, reason)
	}
}

// checkSeal verifies ws's seal at now. On sealOK it marks the state Sealed
// and gives it a wire form with the chain.
func (n *Node) checkSeal(ws *wireState, now time.Time) (sealVerdict, error) {
	if ws.sealErr != nil {
		return sealBad, ws.sealErr
	}
	if ws.seal == nil {
		return sealNone, nil
	}
	if maxAge := n.cfg.SealMaxAge; maxAge > 0 {
		if floor := now.Add(-maxAge).UnixNano(); floor > 0 && ws.state.Version < uint64(floor) {
			return sealStale, nil
		}
	}
	chain := ws.seal.Chain
	if len(chain) == 0 {
		if chain = n.certs.get(ws.seal.Cert); chain == nil {
			return sealUnknownCert, nil
		}
	} else if fp := sha256.Sum256(chain[0]); !bytes.Equal(fp[:], ws.seal.Cert) {
		return sealBad, errors.New("the seal's cert is not the SHA-256 of its chain's leaf")
	}
	if err := n.verifier.Verify(ws.state.Node, chain, sealedMessage(ws.body), ws.seal.Sig); err != nil {
		return sealBad, err
	}
	n.certs.put(ws.seal.Cert, chain)
	if len(ws.seal.Chain) == 0 {
		build := func() ([]byte, error) {
			full := *ws.seal
			full.Chain = chain
			return spliceSeal(ws.body, full)
		}
		var wire []byte
		var err error
		if ws.cached != nil {
			wire, err = ws.cached.splicedWire(chain, build)
		} else {
			wire, err = build()
		}
		if err != nil {
			return sealBad, err
		}
		ws.wire = wire
	}
	ws.state.Sealed = true
	return sealOK, nil
}

// offer applies received states, updates the view and counters, and
// refutes a state that claims this node's name with a higher version.
func (n *Node) offer(states []wireState) []verdict {
	verdicts := make([]verdict, len(states))
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.clock.Now()
	changed := false
	for i, ws := range states {
		s := ws.state
		v := n.tab.applyWire(s, ws.wire, now)
		verdicts[i] = v
		switch v {
		case verdictVisible:
			changed = true
			n.accepted.Add(1)
		case verdictHidden:
			n.accepted.Add(1)
		case verdictStale:
			n.stale.Add(1)
		case verdictUnsealed:
			n.refused(s, "unsealed")
			n.unsealed.Add(1)
			n.refusalLog.Warn().Str("from", s.Node).Str("reason", "unsealed").
				Msg("refused an unsealed gossip state for a node whose states are sealed")
		case verdictSelf:
			n.stale.Add(1)
			// Only our own key can make a sealed state under our name (a
			// previous incarnation): anything else claiming it is not
			// worth raising our version for.
			if s.Version > n.version && s.Version < math.MaxUint64 && (n.sealer == nil || s.Sealed) {
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
	enc, err := n.encodeOwn(s)
	if err != nil {
		n.log.Error().Err(err).Msg("re-encoding own state")
		return
	}
	n.setOwnLocked(enc, n.clock.Now())
}

// localView is the push/pull payload: every visible state, sorted by node
// name, in the form it travels in (seals and their chains included),
// encoded once per Snapshot.
func (n *Node) localView() []byte {
	snap := n.Snapshot()
	if w := n.ppCache.Load(); w != nil {
		if c := w.Value(); c != nil && c.seq == snap.Seq {
			return c.buf
		}
	}
	names := make([]string, 0, len(snap.States))
	for name := range snap.States {
		names = append(names, name)
	}
	sort.Strings(names)
	// The list is written out rather than marshalled: json.Marshal
	// re-validates and compacts every state's JSON, which was a tenth of a
	// forming cluster's CPU at a few hundred members, and every raw form
	// is already compact JSON (this node's own encoding, or a state it
	// decoded, as received).
	size := len(`{"states":[]}`) + len(names)
	for _, name := range names {
		size += len(snap.wire[name])
	}
	js := make([]byte, 0, size)
	js = append(js, `{"states":[`...)
	first := true
	for _, name := range names {
		raw := snap.wire[name]
		if raw == nil {
			var err error
			if raw, err = json.Marshal(snap.States[name]); err != nil {
				// Cannot happen: every stored state was decoded from JSON.
				n.log.Error().Err(err).Str("state", name).Msg("encoding push/pull state")
				continue
			}
		}
		if !first {
			js = append(js, ',')
		}
		first = false
		js = append(js, raw...)
	}
	js = append(js, "]}"...)
	buf, err := encodeJSONFrame(js)
	if err != nil {
		n.log.Error().Err(err).Msg("encoding push/pull state")
		return nil
	}
	w := weak.Make(&encodedView{seq: snap.Seq, buf: buf})
	n.ppCache.Store(&w)
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
		// Greeted even when a fanout is due: the greeting carries the
		// seal's chain, which a member that just joined may not know.
		if n.greet == nil {
			n.greet = make(map[string]struct{})
		}
		n.greet[name] = struct{}{}
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
