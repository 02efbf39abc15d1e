package gossip

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func st(node string, version uint64) NodeState {
	return NodeState{Node: node, Kind: KindGFE, Site: "site-" + node, Version: version}
}

// tableOp is one call on a table: exactly one of apply, join and leave is set.
type tableOp struct {
	at    time.Duration // since the test's start
	apply *NodeState
	join  string
	leave string
	// want is the verdict of apply, or for join/leave whether membership
	// changed (verdictVisible) or not (verdictStale).
	want verdict
}

func applyOp(s NodeState, at time.Duration, want verdict) tableOp {
	return tableOp{at: at, apply: &s, want: want}
}

func TestTableMerge(t *testing.T) {
	const ttl = time.Minute
	tests := []struct {
		name string
		ops  []tableOp
		// want maps each visible node to its visible version.
		want        map[string]uint64
		wantMembers []string
		// wantHeld counts states kept, visible or hidden.
		wantHeld int
	}{
		{
			name:        "first state of a member is visible",
			ops:         []tableOp{{join: "a", want: verdictVisible}, applyOp(st("a", 5), 0, verdictVisible)},
			want:        map[string]uint64{"a": 5},
			wantMembers: []string{"a", "self"},
			wantHeld:    1,
		},
		{
			name: "newer replaces older",
			ops: []tableOp{
				{join: "a", want: verdictVisible},
				applyOp(st("a", 5), 0, verdictVisible),
				applyOp(st("a", 6), 0, verdictVisible),
			},
			want:        map[string]uint64{"a": 6},
			wantMembers: []string{"a", "self"},
			wantHeld:    1,
		},
		{
			name: "equal and lower versions are stale",
			ops: []tableOp{
				{join: "a", want: verdictVisible},
				applyOp(st("a", 5), 0, verdictVisible),
				applyOp(st("a", 5), 0, verdictStale),
				applyOp(st("a", 4), 0, verdictStale),
			},
			want:        map[string]uint64{"a": 5},
			wantMembers: []string{"a", "self"},
			wantHeld:    1,
		},
		{
			name: "state before join is hidden, then visible on join",
			ops: []tableOp{
				applyOp(st("a", 5), 0, verdictHidden),
				{join: "a", want: verdictVisible},
			},
			want:        map[string]uint64{"a": 5},
			wantMembers: []string{"a", "self"},
			wantHeld:    1,
		},
		{
			name: "leave hides the state and stale copies cannot bring it back",
			ops: []tableOp{
				{join: "a", want: verdictVisible},
				applyOp(st("a", 5), 0, verdictVisible),
				{leave: "a", want: verdictVisible},
				applyOp(st("a", 5), 0, verdictStale),
				applyOp(st("a", 3), 0, verdictStale),
			},
			want:        map[string]uint64{},
			wantMembers: []string{"self"},
			wantHeld:    1,
		},
		{
			name: "a node that comes back shows its last state at once",
			ops: []tableOp{
				{join: "a", want: verdictVisible},
				applyOp(st("a", 5), 0, verdictVisible),
				{leave: "a", want: verdictVisible},
				{join: "a", want: verdictVisible},
			},
			want:        map[string]uint64{"a": 5},
			wantMembers: []string{"a", "self"},
			wantHeld:    1,
		},
		{
			name: "after a rejoin, only newer versions replace the last state",
			ops: []tableOp{
				{join: "a", want: verdictVisible},
				applyOp(st("a", 5), 0, verdictVisible),
				{leave: "a", want: verdictVisible},
				{join: "a", want: verdictVisible},
				applyOp(st("a", 4), 0, verdictStale),
				applyOp(st("a", 9), 0, verdictVisible),
			},
			want:        map[string]uint64{"a": 9},
			wantMembers: []string{"a", "self"},
			wantHeld:    1,
		},
		{
			name: "newer state of a departed node stays hidden",
			ops: []tableOp{
				{join: "a", want: verdictVisible},
				applyOp(st("a", 5), 0, verdictVisible),
				{leave: "a", want: verdictVisible},
				applyOp(st("a", 6), 0, verdictHidden),
			},
			want:        map[string]uint64{},
			wantMembers: []string{"self"},
			wantHeld:    1,
		},
		{
			name: "states of non-members expire ttl after they were stored or their node left",
			ops: []tableOp{
				{join: "a", want: verdictVisible},
				applyOp(st("a", 5), 0, verdictVisible),
				{leave: "a", want: verdictVisible},
				applyOp(st("b", 1), 0, verdictHidden),
				// a's last state is gone: an old version is taken (hidden,
				// since a is not a member).
				applyOp(st("a", 2), ttl+time.Second, verdictHidden),
				applyOp(st("c", 1), 2*ttl+2*time.Second, verdictHidden),
			},
			want:        map[string]uint64{},
			wantMembers: []string{"self"},
			wantHeld:    1, // only c: a's and b's hidden states expired
		},
		{
			name: "member states never expire",
			ops: []tableOp{
				{join: "a", want: verdictVisible},
				applyOp(st("a", 5), 0, verdictVisible),
				applyOp(st("b", 1), 10*ttl, verdictHidden),
			},
			want:        map[string]uint64{"a": 5},
			wantMembers: []string{"a", "self"},
			wantHeld:    2,
		},
		{
			name: "a state claiming to be self is never stored",
			ops: []tableOp{
				applyOp(st("self", 100), 0, verdictSelf),
			},
			want:        map[string]uint64{},
			wantMembers: []string{"self"},
		},
		{
			name: "duplicate join and unknown or self leave change nothing",
			ops: []tableOp{
				{join: "a", want: verdictVisible},
				{join: "a", want: verdictStale},
				{join: "self", want: verdictStale},
				{leave: "b", want: verdictStale},
				{leave: "self", want: verdictStale},
			},
			want:        map[string]uint64{},
			wantMembers: []string{"a", "self"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t0 := time.Unix(1_700_000_000, 0)
			tab := newTable("self", ttl)
			for i, op := range tt.ops {
				now := t0.Add(op.at)
				var got verdict
				switch {
				case op.apply != nil:
					got = tab.apply(*op.apply, now)
				case op.join != "":
					got = boolVerdict(tab.join(op.join, now))
				default:
					got = boolVerdict(tab.leave(op.leave, now))
				}
				if got != op.want {
					t.Errorf("op %d (%+v) = %v, want %v", i, op, got, op.want)
				}
			}
			gotVisible := map[string]uint64{}
			for node, s := range tab.visible() {
				gotVisible[node] = s.Version
			}
			if diff := cmp.Diff(tt.want, gotVisible); diff != "" {
				t.Errorf("visible versions (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantMembers, tab.memberNames()); diff != "" {
				t.Errorf("members (-want +got):\n%s", diff)
			}
			if got := len(tab.states); got != tt.wantHeld {
				t.Errorf("held states = %d, want %d", got, tt.wantHeld)
			}
		})
	}
}

func boolVerdict(changed bool) verdict {
	if changed {
		return verdictVisible
	}
	return verdictStale
}

func TestTableSelfIsVisibleOncePublished(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	tab := newTable("self", time.Minute)
	if got := len(tab.visible()); got != 0 {
		t.Fatalf("visible before setSelf = %d states, want 0", got)
	}
	tab.setSelf(st("self", 3), now)
	want := map[string]NodeState{"self": st("self", 3)}
	if diff := cmp.Diff(want, tab.visible()); diff != "" {
		t.Errorf("visible (-want +got):\n%s", diff)
	}
}

func TestTableGaps(t *testing.T) {
	const grace = time.Second
	t0 := time.Unix(1_700_000_000, 0)
	tab := newTable("self", time.Minute)
	tab.join("member", t0)
	tab.apply(st("member", 1), t0)           // a member: no gap
	tab.apply(st("fresh", 1), t0.Add(grace)) // held for less than grace
	tab.apply(st("gap-b", 1), t0)
	tab.apply(st("gap-a", 1), t0)
	tab.join("gone", t0)
	tab.apply(st("gone", 1), t0)
	tab.leave("gone", t0) // memberlist said dead: not a gap

	var got []string
	for _, s := range tab.gaps(t0.Add(grace+time.Millisecond), grace) {
		got = append(got, s.Node)
	}
	if diff := cmp.Diff([]string{"gap-a", "gap-b"}, got); diff != "" {
		t.Errorf("gaps (-want +got):\n%s", diff)
	}
	// A departed node that comes back and leaves nothing behind is no gap;
	// one that comes back is a member again.
	tab.join("gone", t0.Add(2*grace))
	tab.join("gap-a", t0.Add(2*grace))
	got = nil
	for _, s := range tab.gaps(t0.Add(3*grace), grace) {
		got = append(got, s.Node)
	}
	if diff := cmp.Diff([]string{"fresh", "gap-b"}, got); diff != "" {
		t.Errorf("gaps after joins (-want +got):\n%s", diff)
	}
}
