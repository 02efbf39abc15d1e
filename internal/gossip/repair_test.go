package gossip

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// withMembers makes an offline node see members-1 other alive members.
func withMembers(n *Node, members int) {
	for i := 1; i < members; i++ {
		n.memberJoined(&memberlist.Node{Name: fmt.Sprintf("m-%04d", i), Addr: net.IPv4(127, 0, 0, 1), Port: uint16(10000 + i)})
	}
}

// TestRepairGraceScalesWithMembers: a state from a node memberlist has not
// reported is only a gap once memberlist's gossip of the node's alive
// message would have reached this node: a second at a few members, about
// 11 s at a thousand, where a fixed second made every member that a new
// node's state reached first join it (a full push/pull each).
func TestRepairGraceScalesWithMembers(t *testing.T) {
	for _, tt := range []struct {
		profile string
		members int
		want    time.Duration
	}{
		{ProfileLAN, 1, time.Second},
		{ProfileLAN, 3, time.Second},
		{ProfileLAN, 20, 2400 * time.Millisecond},
		{ProfileLAN, 200, 6 * time.Second},
		{ProfileLAN, 1000, 11200 * time.Millisecond},
		{ProfileLarge, 3, 30 * time.Second},
		{ProfileLarge, 1000, 30 * time.Second},
	} {
		cfg, err := DefaultConfig().WithProfile(tt.profile)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Name = "a"
		n, err := New(cfg, Options{Clock: newFakeClock()})
		if err != nil {
			t.Fatal(err)
		}
		withMembers(n, tt.members)
		if got := n.repairGrace(); got != tt.want {
			t.Errorf("repairGrace under %s at %d members = %v, want %v", tt.profile, tt.members, got, tt.want)
		}
	}
}

// TestRepairJoinsOneGapPerGrace: a node holding states of several nodes
// memberlist has not reported joins one of them per repairGrace, not every
// gap every round: each join is a push/pull of two full views, and when
// memberlist's gossip is slow everywhere at once, joining every gap every
// half second multiplied the load that made it slow.
func TestRepairJoinsOneGapPerGrace(t *testing.T) {
	clk := newFakeClock()
	n := newOfflineNode(t, "a", clk)
	withMembers(n, 1000)
	grace := n.repairGrace()
	for i := range 5 {
		s := gfeFor(fmt.Sprintf("ghost-%d", i), 1)
		s.Node, s.Addr, s.Version = fmt.Sprintf("ghost-%d", i), fmt.Sprintf("127.0.0.2:%d", 7000+i), uint64(clk.Now().UnixNano())
		n.handleMessage(directMsg(t, s))
	}
	rounds := func() (targets int) {
		for range int(grace / n.repairEvery()) {
			if _, ok := n.repairTarget(); ok {
				targets++
			}
			clk.Advance(n.repairEvery())
		}
		return targets
	}
	// The first grace: memberlist's gossip may still bring the alive
	// messages, so no gap is joined (a fixed second would have joined all
	// five from the third round on).
	if got := rounds(); got != 0 {
		t.Fatalf("%d repair joins within the first repairGrace (%v) at 1,000 members, want 0", got, grace)
	}
	// From then on every round finds five gaps (the joins are not made
	// here, so none closes), and one is joined per grace.
	for g := range 3 {
		if got := rounds(); got != 1 {
			t.Errorf("grace %d after the states arrived: %d repair joins, want 1", g+2, got)
		}
	}
}
