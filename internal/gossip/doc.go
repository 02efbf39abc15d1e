// Package gossip shares live state between Spillway nodes over
// hashicorp/memberlist (DESIGN.md §5 "Gossip"; it feeds the planner's
// inputs, §3).
//
// Model. Every node (gfe or control plane) owns one NodeState and publishes
// a complete new one whenever its numbers change: a gfe its site, demand,
// RTT vector, load and in-flight per group; a control plane the capacity and
// health of the groups it checks. Every node keeps the newest state of every
// alive member and hands it out as an immutable Snapshot; the gfe builds its
// planner input (waterfall.World) from it, so that all gfes plan over the
// same data without a central scheduler.
//
// Guarantees:
//   - Newest wins. States of one node are ordered by Version, which only the
//     owner sets (Publish). A receiver replaces its copy only with a strictly
//     higher version, so reordered or duplicated broadcasts and push/pull
//     syncs never roll a node back.
//   - Only alive members. When memberlist reports a member dead or left, its
//     state is dropped at once (and Changes fires); its last version is kept
//     for Config.StateTTL, so its broadcasts still in flight are ignored. A
//     state that arrives before its publisher's alive message is held back
//     and appears when the publisher joins.
//   - Eventually everywhere. Broadcasts are relayed by every receiver
//     (epidemic gossip) and every node syncs its full view with a random
//     member every PushPullInterval, so every alive member converges to
//     every other's newest state; a joining node gets all states during
//     Join.
//   - No blocking. memberlist's callbacks only decode, take one mutex for
//     an in-memory merge, and send a non-blocking notification.
//
// Freshness (measured on loopback with DefaultConfig, see TestPropagation50
// and BenchmarkPropagation50): a state published on one node of 50 is seen
// by all 50 in well under a second; a crashed node is dropped by the others
// within about 2–4 s (TestCrashedNodeDropped).
//
// Wire format: see codec.go. States are JSON, DEFLATE-compressed when that
// helps, behind a one-byte codec tag. A state must fit one UDP packet to be
// broadcast (Config.UDPBufferSize); a larger one is spread by push/pull
// only, and Publish says so with ErrTooLarge.
//
// Security: without Config.SecretKey, anyone who can reach the gossip port
// can join and publish any state; set a key (AES-GCM) on untrusted networks.
package gossip
