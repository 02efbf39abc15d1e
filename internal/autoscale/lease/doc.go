// Package lease decides which control-plane replica runs the autoscaler of
// each instance group (docs/design.md §6: "the autoscaler runs in one control-plane
// replica at a time (a lease another replica takes over)"). An Elector holds
// one lease per name (the controller names one per autoscaled group); the
// holder of a lease is the replica that acts on its group, renews its claim
// while it lives, and another replica takes the lease over when the claim
// lapses.
//
// # The medium: gossip, not Redis
//
// Claims travel in the control planes' gossip (GossipMedium: the Leases of
// each replica's gossip.NodeState). The other candidate was Redis, which
// control planes share when they keep quota counters there
// (internal/quotaredis); a SET NX PX key per lease would give a
// linearizable lease. Gossip was chosen because:
//
//   - Every control plane has gossip; Redis is optional (quota only) and
//     would become a dependency of autoscaling, and a single point whose
//     outage stops every group from scaling. With gossip the autoscaler
//     keeps running as long as any replica does.
//   - It follows the way replicas already share work: health checks of a
//     group are run by the Maglev owner of the group's name among the alive
//     control planes (internal/controlplane). A lease's candidate is picked
//     the same way over the same members and key, so the replica that
//     scales a group is the one that checks its health, and leases spread
//     over replicas, moving only the dead one's when a replica dies.
//   - What a double holder costs is bounded and self-correcting. The
//     controller reconciles towards a recommended count (it never "adds N"
//     blindly), so two holders for a moment start at most the difference
//     twice and scale the surplus down at the next decision. Each lease has
//     a term that grows with every change of holder, for an actuator that
//     can fence.
//
// The price is the guarantee: gossip gives no consensus, so during a
// network partition each side's candidate holds the lease (split brain),
// until the partition heals and the lower term gives way. Deployments that
// cannot accept that should put a Redis-backed Medium behind the same
// Elector (not built yet).
//
// # Rules
//
// Each replica applies them, on its own clock, every Config.RenewEvery and
// whenever its view changes:
//
//  1. Candidate. The candidate for lease L is the Maglev pick (lb/hashing)
//     of hashing.String(L) over the alive replicas in the view.
//  2. Claim. A replica holds L by listing it, with its term, in the state
//     it publishes; it renews every claim it holds each RenewEvery by
//     publishing a newer version.
//  3. Lapse. A claim seen from another replica runs until TTL after this
//     replica last saw its holder publish a newer version (the local time
//     of the sighting, so clocks need not agree). It runs on after its
//     holder leaves the view, since a holder cut off by a partition or
//     stalled may still act; a claim its holder drops from a newer state
//     ends at once (a clean handover).
//  4. Acquire. The candidate claims L when no other claim on L runs and it
//     has watched for at least TTL since it started (so that it has seen
//     the claims made before it came), with term = the highest term seen
//     for L + 1. The claim is pending for RenewEvery, time for it to reach
//     the others, and held (Holds) after that if no stronger claim (see
//     Release) appeared meanwhile. A claim that no other replica has seen
//     protects nothing: a holder that dies before its claim got out is
//     succeeded at once, possibly with the same term, so the fencing token
//     is the pair (term, holder), which is unique.
//  5. Release. A holder releases L (stops acting first, then publishes
//     its claims without L) when it is no longer L's candidate (a replica
//     joined and took L's slot), when L is no longer wanted (SetNames),
//     when another claim on L with a higher term (or the same term and a
//     higher name) runs, and when it stops (Run returns). A pending claim
//     is dropped for the same reasons.
//
// Claims count only from the replicas the medium vouches for: in gossip,
// the states sealed by the listed replicas' own certificates (package
// internal/gossip, seal.go), so no other gossip-key holder can claim a
// lease. A claim whose term is above MaxTerm is ignored (and logged): no
// real sequence of holders reaches it, and believing one would make every
// later term overflow.
//
// So when a holder dies, the survivors agree on one new candidate as soon
// as memberlist drops the dead one (about 2.5s on a LAN) and that
// candidate claims the lease TTL after it last saw the dead holder's
// renewal and holds it RenewEvery later (at most TTL + 2 RenewEvery after
// the death, plus a step); when a holder stops cleanly the handover takes
// one gossip round plus RenewEvery.
package lease
