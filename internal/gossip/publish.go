package gossip

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hashicorp/memberlist"
)

// This node's own state: publishing it (Publish, and the re-publishes of
// stampAddr, refreshSeal and refuteLocked), encoding and sealing it
// (encodeOwn), and the sender that delivers it straight to members.

// stampAddr re-publishes a state published before Run with the node's
// gossip address, which other nodes use to repair membership gaps.
func (n *Node) stampAddr(addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.own == nil || n.own.Addr == addr {
		return
	}
	s := *n.own
	s.Addr = addr
	s.Version = max(n.version+1, unixNanos(n.clock.Now()))
	enc, err := n.encodeOwn(s)
	if err != nil {
		n.log.Error().Err(err).Msg("re-encoding own state")
		return
	}
	n.setOwnLocked(enc, n.clock.Now())
}

// refreshSeal re-publishes this node's sealed state under a new version
// once it is a third of Config.SealMaxAge old, so that the state every
// member holds, and hands a joiner, is always fresh enough to be believed:
// receivers refuse sealed states older than SealMaxAge (replays).
func (n *Node) refreshSeal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.own == nil || !n.own.Sealed || n.cfg.SealMaxAge <= 0 {
		return
	}
	now := n.clock.Now()
	if due := n.version + uint64(n.cfg.SealMaxAge/3); unixNanos(now) < due {
		return
	}
	s := *n.own
	s.Version = max(n.version+1, unixNanos(now))
	enc, err := n.encodeOwn(s)
	if err != nil {
		n.log.Error().Err(err).Msg("re-encoding own state")
		return
	}
	n.setOwnLocked(enc, now)
}

// Publish makes s this node's state: it sets s.Node to Config.Name and
// s.Version to a version higher than any this node used, stores it (so
// States includes it at once), and hands it to the sender and to gossip. It
// returns the version assigned. Publish does no I/O and does not wait for
// delivery; publishing again before the last state went out sends only the
// newer one.
//
// Publish copies s; the caller may reuse its maps. It returns an error
// wrapping ErrInvalidState, and publishes nothing, if a field is invalid.
//
// A state whose encoding does not fit a UDP packet (about
// Config.UDPBufferSize - 50 bytes after compression) is sent to each member
// over TCP and is not gossiped; that costs one TCP connection per member
// per Publish, so keep states small or raise UDPBufferSize.
func (n *Node) Publish(s NodeState) (uint64, error) {
	s.Node = n.cfg.Name
	s.Version = 0
	s.Addr = n.Addr()
	if err := s.validate(); err != nil {
		return 0, fmt.Errorf("gossip: publish: %w", err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.clock.Now()
	s.Version = max(n.version+1, unixNanos(now))
	enc, err := n.encodeOwn(s)
	if err != nil {
		return 0, fmt.Errorf("gossip: publish: %w", err)
	}
	n.setOwnLocked(enc, now)
	return s.Version, nil
}

// setOwnLocked makes enc this node's state: visible, queued for gossip if
// it fits a packet, and sent to every member by the sender. Caller must
// hold n.mu.
func (n *Node) setOwnLocked(enc ownEncoding, now time.Time) {
	if len(enc.lean)+1 > n.budget && (n.enc.lean == nil || len(n.enc.lean)+1 <= n.budget) {
		n.log.Warn().Int("bytes", len(enc.lean)).Int("packet_budget", n.budget).
			Msg("state too large for a gossip packet; sending it to each member over TCP")
	}
	stored := enc.stored
	if enc.stored.Sealed && enc.cert != n.enc.cert {
		n.fullFanout = true // receivers do not know this certificate yet
	}
	n.version = stored.Version
	n.own = &stored
	n.enc = enc
	n.tab.setSelfWire(stored, enc.wire, now)
	n.rebuildLocked()
	if len(enc.lean)+1 <= n.budget {
		n.queue.QueueBroadcast(&broadcast{name: stored.Node, msg: withRoute(routeGossip, enc.lean)})
	}
	n.fanout = true
	n.signalSender()
}

// signalSender wakes the sender without blocking.
func (n *Node) signalSender() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// sendLoop is the sender: it delivers this node's state straight to members
// (all of them after a Publish, the new ones after a join, these with the
// seal's chain), outside memberlist's callbacks. It returns when ctx ends.
func (n *Node) sendLoop(ctx context.Context, ml *memberlist.Memberlist) {
	type target struct {
		m   memberlist.Node
		msg []byte
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.wake:
		}
		n.mu.Lock()
		enc, all, full, greet := n.enc, n.fanout, n.fullFanout, n.greet
		n.fanout, n.fullFanout, n.greet = false, false, nil
		var targets []target
		if enc.lean != nil {
			lean, chained := withRoute(routeDirect, enc.lean), withRoute(routeDirect, enc.full)
			if full {
				lean = chained
			}
			for name, m := range n.addrs {
				if _, ok := greet[name]; ok {
					targets = append(targets, target{m, chained})
				} else if all {
					targets = append(targets, target{m, lean})
				}
			}
		}
		n.mu.Unlock()
		for i := range targets {
			if ctx.Err() != nil {
				return
			}
			n.sendTo(ml, &targets[i].m, targets[i].msg)
		}
	}
}

// sendTo sends msg to one member: one UDP packet, or a TCP message when it
// does not fit (which may block up to TCPTimeout).
func (n *Node) sendTo(ml *memberlist.Memberlist, m *memberlist.Node, msg []byte) {
	var err error
	if len(msg) <= n.budget {
		err = ml.SendBestEffort(m, msg)
	} else {
		err = ml.SendReliable(m, msg)
	}
	if err != nil {
		n.sendErrs.Add(1)
		n.log.Debug().Err(err).Str("member", m.Name).Msg("direct send failed")
		return
	}
	n.sent.Add(1)
	n.stateBytes.Add(uint64(len(msg)))
}

// ownEncoding is this node's state in every form it is sent in.
type ownEncoding struct {
	// stored is the state as the others decode it (Sealed when sealed).
	stored NodeState
	// lean is its frame for direct sends and gossip: with the seal, but
	// without the certificate chain. full is the frame with the chain,
	// for members that may not know the certificate; wire is full's JSON,
	// for push/pull. For an unsealed state all three are the same JSON.
	lean, full, wire []byte
	// cert is the seal's certificate fingerprint (zero when unsealed).
	cert [sha256.Size]byte
}

// encodeOwn encodes s, seals it when this node has a Sealer, and decodes
// it back, so that the state this node stores is exactly what the others
// decode (and shares no maps with the caller's). A state the Sealer fails
// to seal goes out unsealed, logged: peers that verify seals refuse it,
// and count it, rather than this node stopping to publish.
func (n *Node) encodeOwn(s NodeState) (ownEncoding, error) {
	body, err := json.Marshal(s)
	if err != nil {
		return ownEncoding{}, fmt.Errorf("gossip: encode: %w", err)
	}
	if err := fitsReceivers(body); err != nil {
		return ownEncoding{}, err
	}
	var enc ownEncoding
	if err := json.Unmarshal(body, &enc.stored); err != nil {
		return ownEncoding{}, fmt.Errorf("gossip: encode: %w", err)
	}
	enc.wire = body
	if n.sealer != nil {
		if chain, sig, err := n.sealer.Seal(sealedMessage(body)); err != nil || len(chain) == 0 {
			n.refusalLog.Error().Err(err).Msg("sealing this node's state failed; publishing it unsealed, which peers that verify seals refuse")
		} else {
			enc.cert = sha256.Sum256(chain[0])
			lean, err := spliceSeal(body, sealWire{Cert: enc.cert[:], Sig: sig})
			if err != nil {
				return ownEncoding{}, err
			}
			full, err := spliceSeal(body, sealWire{Cert: enc.cert[:], Sig: sig, Chain: chain})
			if err != nil {
				return ownEncoding{}, err
			}
			if err := fitsReceivers(full); err != nil {
				return ownEncoding{}, err
			}
			if enc.full, err = encodeJSONFrame(full); err != nil {
				return ownEncoding{}, err
			}
			if enc.lean, err = encodeJSONFrame(lean); err != nil {
				return ownEncoding{}, err
			}
			enc.wire, enc.stored.Sealed = full, true
			return enc, nil
		}
	}
	if enc.lean, err = encodeJSONFrame(body); err != nil {
		return ownEncoding{}, err
	}
	enc.full = enc.lean
	return enc, nil
}

// fitsReceivers refuses a state whose JSON is larger than any receiver
// decodes (maxDecodedBytes): published, every peer would refuse it, and
// with it whatever else the state carries (a replica's health verdicts and
// lease renewals). Refused here, the caller keeps its last state and can
// publish a smaller one.
func fitsReceivers(json []byte) error {
	if len(json) > maxDecodedBytes {
		return fmt.Errorf("gossip: encode: %w: the state inflates to more than %d bytes (%d)", errMalformed, maxDecodedBytes, len(json))
	}
	return nil
}

func unixNanos(t time.Time) uint64 {
	if ns := t.UnixNano(); ns > 0 {
		return uint64(ns)
	}
	return 0
}
