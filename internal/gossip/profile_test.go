package gossip

import (
	"net"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// TestWithProfile checks that each profile gives a valid Config with its
// documented timings, that lan is DefaultConfig's, and that an unknown
// name is refused.
func TestWithProfile(t *testing.T) {
	base := testConfig("a")
	for _, tc := range []struct {
		profile                      string
		pushPull, rejoin, sealMaxAge time.Duration
		stateTTL, probeTimeout       time.Duration
		stateRetransmit              int
	}{
		{"", 10 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute, 200 * time.Millisecond, 4},
		{ProfileLAN, 10 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute, 200 * time.Millisecond, 4},
		{ProfileLarge, 5 * time.Minute, 30 * time.Second, 15 * time.Minute, 45 * time.Minute, 400 * time.Millisecond, 1},
	} {
		c, err := base.WithProfile(tc.profile)
		if err != nil {
			t.Fatalf("%q: %v", tc.profile, err)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("%q: invalid: %v", tc.profile, err)
		}
		got := []time.Duration{c.PushPullInterval, c.RejoinInterval, c.SealMaxAge, c.StateTTL, c.ProbeTimeout}
		want := []time.Duration{tc.pushPull, tc.rejoin, tc.sealMaxAge, tc.stateTTL, tc.probeTimeout}
		if !slices.Equal(got, want) || c.StateRetransmitMult != tc.stateRetransmit {
			t.Errorf("%q: timings %v retransmit %d, want %v retransmit %d", tc.profile, got, c.StateRetransmitMult, want, tc.stateRetransmit)
		}
		if c.Name != "a" || c.ProbeInterval != base.ProbeInterval {
			t.Errorf("%q: changed fields it does not name: %+v", tc.profile, c)
		}
	}
	// A profile applied over another gives the same as applied alone.
	large, _ := base.WithProfile(ProfileLarge)
	back, _ := large.WithProfile(ProfileLAN)
	if back.PushPullInterval != base.PushPullInterval || back.SealMaxAge != base.SealMaxAge || back.ProbeTimeout != base.ProbeTimeout {
		t.Errorf("large then lan: %+v, want lan's timings", back)
	}
	if _, err := base.WithProfile("huge"); err == nil {
		t.Error(`profile "huge" accepted`)
	}
}

// TestRejoinTargets checks that a rejoin contacts only the seeds that are
// not alive members: joining an alive member is a full push/pull that
// teaches nothing (megabytes at a thousand members).
func TestRejoinTargets(t *testing.T) {
	n := newOfflineNode(t, "self", newFakeClock())
	n.memberJoined(&memberlist.Node{Name: "a", Addr: net.ParseIP("10.0.0.1"), Port: 7946})
	n.memberJoined(&memberlist.Node{Name: "b", Addr: net.ParseIP("10.0.0.2"), Port: 7946})
	n.memberJoined(&memberlist.Node{Name: "v6", Addr: net.ParseIP("fd00::1"), Port: 7946})
	n.memberLeft("b") // declared dead: a partition, which rejoining heals
	seeds := []string{"10.0.0.1:7946", "10.0.0.2:7946", "10.0.0.1:7947", "[fd00:0::1]:7946", "seed.example:7946"}
	got := n.rejoinTargets(seeds)
	want := []string{"10.0.0.2:7946", "10.0.0.1:7947", "seed.example:7946"}
	if !slices.Equal(got, want) {
		t.Errorf("rejoin targets %v, want %v", got, want)
	}
}
