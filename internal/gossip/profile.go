package gossip

import (
	"fmt"
	"time"
)

// Profiles name sets of timings for a cluster size, as memberlist's
// DefaultLANConfig and DefaultWANConfig do for a network. A daemon picks
// one with --gossip-profile; Config.WithProfile applies it.
const (
	// ProfileLAN is DefaultConfig's timings: a LAN or loopback cluster of
	// up to a couple of hundred members, where full-state syncs are cheap
	// and a crashed node is dropped about 2.5 s after it stops answering.
	ProfileLAN = "lan"
	// ProfileLarge is for hundreds to thousands of members (measured at
	// 1,000 with `lbsim gossip --nodes 1000 --profile large`, BENCHMARKS.md
	// §8 "Gossip at 1,000 nodes"). What a node sends by itself (without
	// publishing) has parts that grow with the cluster: push/pull (every
	// state of every member, both ways) and seal refreshes (every member
	// receives each node's state every SealMaxAge/3). At 1,000 gfes of 20
	// services and 40 regions a sealed full view is about 1.9 MB, so the
	// LAN timings (push/pull every 60 s at that size, a refresh every
	// 20 s) cost about 150 kB/s per node. (Rejoins, a push/pull per seed
	// every RejoinInterval, cost as much again before they skipped seeds
	// that are alive members; now they cost nothing while the seeds are
	// up, in either profile.) Large spaces the rest:
	//   - PushPullInterval 5m, which memberlist stretches to 30m at 1,000
	//     members: push/pull is the last-resort repair, behind the direct
	//     send of every state to every member and its gossip. It is also
	//     what brings back a member falsely declared dead that missed the
	//     news (and so did not refute it), which therefore takes up to
	//     that long;
	//   - SealMaxAge 15m (a refresh every 5 minutes; the replay window of
	//     a sealed state grows to match, docs/security/gossip.md) and
	//     StateTTL 45m, beyond the stretched push/pull interval;
	//   - StateRetransmitMult 1: states reach every member by direct
	//     send, and gossip only repairs losses, so each node gossips each
	//     state 4 times at 1,000 members rather than 16;
	//   - ProbeTimeout 400ms, so that a member on a busy host, slow to
	//     answer a probe, is not suspected as readily (failure detection
	//     is otherwise unchanged: a crashed member of 1,000 is dropped by
	//     every other within about 6 s).
	//   - through PushPullInterval, membership repairs (a join of a node
	//     known only from its state, see Node) wait 30 s rather than
	//     memberlist's gossip time (11 s at 1,000) and are made one per
	//     30 s per node: each is a push/pull of two full views.
	// Changes still reach every member within a second: Publish sends to
	// each at once, whatever the profile.
	ProfileLarge = "large"
)

// Profiles lists the profile names WithProfile accepts.
func Profiles() []string { return []string{ProfileLAN, ProfileLarge} }

// WithProfile returns c with the timings of the named profile ("" means
// ProfileLAN, which is DefaultConfig's). Fields a profile does not name
// are kept.
func (c Config) WithProfile(name string) (Config, error) {
	d := DefaultConfig()
	switch name {
	case "", ProfileLAN:
		c.PushPullInterval = d.PushPullInterval
		c.SealMaxAge, c.StateTTL = d.SealMaxAge, d.StateTTL
		c.StateRetransmitMult, c.ProbeTimeout = d.StateRetransmitMult, d.ProbeTimeout
	case ProfileLarge:
		c.PushPullInterval = 5 * time.Minute
		c.SealMaxAge = 15 * time.Minute
		c.StateTTL = 45 * time.Minute
		c.StateRetransmitMult = 1
		c.ProbeTimeout = 400 * time.Millisecond
	default:
		return c, fmt.Errorf("gossip profile %q: must be one of %v", name, Profiles())
	}
	return c, nil
}
