// Package gossip shares live state between Spillway nodes over
// hashicorp/memberlist (docs/design.md §5 "Gossip"; it feeds the planner's
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
//     state disappears from the view at once (and Changes fires). It is kept
//     hidden for Config.StateTTL, so its messages still in flight cannot
//     bring an older version back, and a node that returns (a false failure
//     detection, a healed partition) reappears with its last state. A state
//     that arrives before its publisher's alive message is held back and
//     appears when the publisher joins.
//   - Eventually everywhere. The publisher sends each new state straight to
//     every member (and its current state to every member that joins);
//     gossip relays repair lost packets and unreachable paths; every node
//     syncs its full view with a random member every PushPullInterval, and
//     a joining node gets all states during Join. So every alive member
//     converges to every other's newest state.
//   - No blocking. memberlist's callbacks only decode, take one mutex for
//     an in-memory merge, and send non-blocking notifications; network
//     sends happen on Run's goroutines.
//
// Freshness (measured on loopback, see TestPropagation50 and
// BenchmarkPropagation50): a state published on one node of 50 is seen by
// all 50 within tens of milliseconds (the direct sends), and within about
// a second even with 50 nodes in one -race process on an overloaded 2-core
// machine. A crashed node is dropped by the others about 2.5 s after it
// stops answering (TestCrashedNodeDropped); one that leaves is dropped at
// once.
//
// Scale: the timings come in profiles (profile.go, Config.WithProfile):
// ProfileLAN, DefaultConfig's, for up to a couple of hundred members, and
// ProfileLarge for hundreds to thousands, which spaces out the traffic that
// grows with the cluster (push/pull of every state, seal refreshes).
// Package gossipbench (`lbsim gossip`) measures spread, bytes per node and
// failure detection with N real nodes in one process.
//
// Wire format: see codec.go. States are JSON, DEFLATE-compressed when that
// helps, behind a codec byte. A state that does not fit one UDP packet
// (Config.UDPBufferSize) is sent to each member over TCP and not gossiped.
//
// Security: with a key (Config.SecretKey or the keyring Config.Keys),
// memberlist encrypts and authenticates every packet and stream with
// AES-GCM and drops anything it cannot decrypt, so only key holders can
// join or publish. Without one, anyone who reaches the gossip port can join
// and publish any state, so Config.Validate refuses a non-loopback BindAddr
// without a key unless Config.Insecure is set. Node.SetKeys replaces the
// keyring of a running node, which lets a cluster rotate its key without
// downtime (TestKeyRotation). The key proves membership, not identity:
// every gfe host holds it. Seals (seal.go: Options.Sealer and
// Options.Verifier) give states per-node identities: a node that verifies
// seals believes a state only if it is signed by the key of a certificate
// that its CA bundle vouches for and that names the state's node, so a key
// holder can publish only under the names of its own certificates
// (TestImpersonatedReplicaRefused). Consumers still bound what one honest
// name may say (the gfe's routing.Bounds, the control plane's list of
// replicas).
package gossip
