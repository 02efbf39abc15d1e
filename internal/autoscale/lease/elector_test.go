package lease

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/lb/hashing"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// memberlist.Shutdown does not wait for a probe in flight (see
		// internal/gossip's TestMain).
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"),
	)
}

// fakeNet is an in-memory medium shared by Electors: each replica's last
// published claims and version, and which replicas are alive (in the
// view).
type fakeNet struct {
	mu       sync.Mutex
	alive    map[string]bool
	claims   map[string]map[string]uint64
	versions map[string]uint64
}

func newFakeNet(names ...string) *fakeNet {
	n := &fakeNet{alive: map[string]bool{}, claims: map[string]map[string]uint64{}, versions: map[string]uint64{}}
	for _, name := range names {
		n.alive[name] = true
	}
	return n
}

// setAlive adds or removes name from everyone's view (a join, a death as
// memberlist reports it).
func (n *fakeNet) setAlive(name string, alive bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.alive[name] = alive
}

type fakeMedium struct {
	net  *fakeNet
	self string
}

func (m *fakeMedium) View() View {
	n := m.net
	n.mu.Lock()
	defer n.mu.Unlock()
	v := View{Claims: map[string]map[string]uint64{}, Versions: map[string]uint64{}}
	for name, alive := range n.alive {
		if !alive && name != m.self {
			continue
		}
		v.Members = append(v.Members, name)
		if name != m.self && n.versions[name] > 0 {
			v.Versions[name] = n.versions[name]
			v.Claims[name] = maps.Clone(n.claims[name])
		}
	}
	slices.Sort(v.Members)
	return v
}

func (m *fakeMedium) Changes() <-chan struct{} { return nil }

func (m *fakeMedium) Publish(claims map[string]uint64) error {
	n := m.net
	n.mu.Lock()
	defer n.mu.Unlock()
	n.versions[m.self]++
	n.claims[m.self] = maps.Clone(claims)
	return nil
}

const (
	testTTL   = 10 * time.Second
	testRenew = 3 * time.Second
)

func newTestElector(t *testing.T, net *fakeNet, self string, clk clock.Clock, names []string) *Elector {
	t.Helper()
	e, err := New(Config{Self: self, TTL: testTTL, RenewEvery: testRenew}, &fakeMedium{net: net, self: self}, Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	e.SetNames(names)
	return e
}

// candidates returns the Maglev pick of each name over members, as the
// package doc's rule 1 says.
func candidates(t *testing.T, members, names []string) map[string]string {
	t.Helper()
	tbl, err := hashing.NewMaglev(hashing.DefaultConfig(), members)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, n := range names {
		out[n], _ = tbl.PickName(hashing.String(n))
	}
	return out
}

// holders returns, per lease, the electors holding it ("a+b" when two do).
func holders(es map[string]*Elector) map[string]string {
	out := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(es)) {
		for l := range es[name].Held() {
			if out[l] != "" {
				out[l] += "+"
			}
			out[l] += name
		}
	}
	return out
}

var groupNames = []string{"us-east-b-web", "us-east-c-web", "eu-west-b-web", "eu-west-c-web", "ap-south-a-web", "ap-south-b-web"}

// TestElectorTakeover runs three replicas on the fake clock: they wait a
// TTL after start, then each candidate claims its leases and holds them
// RenewEvery later (one holder per lease, term 1); when one dies, its
// leases stay unclaimed until TTL after its last renewal, then its
// successors claim them with term 2 and hold them RenewEvery later.
func TestElectorTakeover(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	names := []string{"cp-a", "cp-b", "cp-c"}
	net := newFakeNet(names...)
	es := map[string]*Elector{}
	for _, n := range names {
		es[n] = newTestElector(t, net, n, clk, groupNames)
	}
	stepAll := func(skip string) {
		for _, n := range names {
			if n != skip {
				es[n].step(true)
			}
		}
	}

	stepAll("")
	if h := holders(es); len(h) != 0 {
		t.Fatalf("leases held before the startup wait: %v", h)
	}
	clk.Advance(testTTL - time.Nanosecond)
	stepAll("")
	if h := holders(es); len(h) != 0 {
		t.Fatalf("leases held 1ns before the startup wait ends: %v", h)
	}
	clk.Advance(time.Nanosecond)
	stepAll("") // claims, pending
	stepAll("")
	if h := holders(es); len(h) != 0 {
		t.Fatalf("leases held at once when claimed, before RenewEvery: %v", h)
	}
	clk.Advance(testRenew)
	stepAll("")
	want := candidates(t, names, groupNames)
	if diff := cmp.Diff(want, holders(es)); diff != "" {
		t.Fatalf("holders after start (-candidates +holders):\n%s", diff)
	}
	for _, n := range names {
		for l, term := range es[n].Held() {
			if term != 1 {
				t.Errorf("%s holds %s with term %d, want 1", n, l, term)
			}
		}
	}

	// cp-a renews one last time, then dies: memberlist drops it from the
	// others' views at once.
	var victim string
	for _, n := range names {
		if len(es[n].Held()) > 0 {
			victim = n
			break
		}
	}
	orphans := es[victim].Held()
	es[victim].step(true)
	lastRenewal := clk.Now()
	stepAll(victim) // the others see the renewal
	net.setAlive(victim, false)

	survivors := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == victim })
	wantAfter := candidates(t, survivors, groupNames)
	for clk.Now().Before(lastRenewal.Add(testTTL)) {
		stepAll(victim)
		for l := range orphans {
			for _, n := range survivors {
				if c := es[n].table.claims[l]; c != nil {
					t.Fatalf("%s claimed %s at +%v after the dead holder's last renewal, before the TTL %v", n, l, clk.Now().Sub(lastRenewal), testTTL)
				}
			}
		}
		clk.Advance(time.Second)
	}
	clk.AdvanceTo(lastRenewal.Add(testTTL))
	stepAll(victim) // claims the orphans
	clk.Advance(testRenew)
	stepAll(victim) // holds them
	delete(es, victim)
	if diff := cmp.Diff(wantAfter, holders(es)); diff != "" {
		t.Fatalf("holders TTL after the death (-candidates among survivors +holders):\n%s", diff)
	}
	for l := range orphans {
		if term, _ := es[wantAfter[l]].Holds(l); term != 2 {
			t.Errorf("%s took %s with term %d, want 2", wantAfter[l], l, term)
		}
	}
}

// TestElectorHandover: a replica that joins becomes the candidate of some
// leases; their holder releases them at its next step (it is no longer the
// candidate) and the newcomer claims them as soon as its startup wait is
// over, without waiting for a lapse, and holds them RenewEvery later.
func TestElectorHandover(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	net := newFakeNet("cp-a")
	a := newTestElector(t, net, "cp-a", clk, groupNames)
	clk.Advance(testTTL)
	a.step(true)
	clk.Advance(testRenew)
	a.step(true)
	if got := len(a.Held()); got != len(groupNames) {
		t.Fatalf("a single replica holds %d leases, want all %d", got, len(groupNames))
	}

	b := newTestElector(t, net, "cp-b", clk, groupNames)
	net.setAlive("cp-b", true)
	b.step(true)
	a.step(true) // a sees b: releases the leases whose candidate is now b
	want := candidates(t, []string{"cp-a", "cp-b"}, groupNames)
	var moved []string
	for l, c := range want {
		if c == "cp-b" {
			moved = append(moved, l)
			if _, ok := a.Holds(l); ok {
				t.Errorf("cp-a still holds %s, whose candidate is cp-b", l)
			}
		}
	}
	if len(moved) == 0 {
		t.Fatalf("no lease moves to cp-b; pick other names")
	}
	b.step(true)
	if h := b.Held(); len(h) != 0 {
		t.Fatalf("cp-b took %v during its startup wait", h)
	}
	clk.Advance(testTTL)
	b.step(true)
	clk.Advance(testRenew)
	b.step(true)
	a.step(true)
	es := map[string]*Elector{"cp-a": a, "cp-b": b}
	if diff := cmp.Diff(want, holders(es)); diff != "" {
		t.Fatalf("holders after the handover (-candidates +holders):\n%s", diff)
	}
	for _, l := range moved {
		if term, _ := b.Holds(l); term != 2 {
			t.Errorf("cp-b holds %s with term %d, want 2", l, term)
		}
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		cfg  Config
		want string
	}{
		{cfg: Config{}, want: "self: required"},
		{cfg: Config{Self: "a", TTL: time.Second, RenewEvery: time.Second}, want: "renew_every: 1s, want 0 < renew_every < ttl (1s)"},
		{cfg: Config{Self: "a", TTL: -time.Second}, want: "ttl: -1s is negative"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.cfg), func(t *testing.T) {
			_, err := New(tt.cfg, &fakeMedium{}, Options{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New(%+v) = %v, want an error containing %q", tt.cfg, err, tt.want)
			}
		})
	}
}

// TestTableConflict: after a partition heals, two replicas may hold one
// lease; the claim with the higher term, or with the same term the higher
// name, stays, and the other holder releases.
func TestTableConflict(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const lease = "us-east-b-web"
	members := []string{"cp-a", "cp-b"}
	self := candidates(t, members, []string{lease})[lease]
	other := "cp-a"
	if self == "cp-a" {
		other = "cp-b"
	}
	tests := []struct {
		name         string
		mine, theirs uint64
		wantHeld     bool
	}{
		{name: "their term higher", mine: 2, theirs: 3, wantHeld: false},
		{name: "my term higher", mine: 3, theirs: 2, wantHeld: true},
		{name: "same term, the higher name stays", mine: 2, theirs: 2, wantHeld: self > other},
		// A term no holder change could reach (a forged or buggy claim)
		// is ignored rather than let win and overflow the next term.
		{name: "their term implausible", mine: 2, theirs: math.MaxUint64 - 1, wantHeld: true},
		{name: "their term at the bound", mine: 2, theirs: MaxTerm, wantHeld: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := newTable(self, testTTL, testRenew, t0)
			tb.claims[lease] = &claim{term: tt.mine, since: t0, held: true}
			tb.terms[lease] = tt.mine
			now := t0.Add(time.Minute)
			tb.observe(View{Members: members, Claims: map[string]map[string]uint64{other: {lease: tt.theirs}}, Versions: map[string]uint64{other: 7}}, now)
			_, released, err := tb.decide([]string{lease}, members, now)
			if err != nil {
				t.Fatal(err)
			}
			if _, held := tb.held()[lease]; held != tt.wantHeld || (len(released) == 1) == tt.wantHeld {
				t.Errorf("held %v, released %v; want held %v", held, released, tt.wantHeld)
			}
			if tt.theirs > MaxTerm && tb.terms[lease] != tt.mine {
				t.Errorf("highest term seen %d after an implausible claim, want mine (%d)", tb.terms[lease], tt.mine)
			}
		})
	}
}

// TestElectorRun drives Run on the fake clock: its ticks claim and then
// hold the lease of a lone replica, Changes fires, and when Run ends the
// replica publishes no claims any more.
func TestElectorRun(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	net := newFakeNet("cp-a")
	e := newTestElector(t, net, "cp-a", clk, []string{"us-east-b-web"})
	changed := e.Changes()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()

	wait, stop := context.WithTimeout(t.Context(), 30*time.Second)
	defer stop()
	if err := clk.BlockUntil(wait, 1); err != nil { // Run's ticker
		t.Fatal(err)
	}
	// Tick until the lease is held: the ticks before TTL do nothing, the
	// next claims it, the one after holds it. Ticks that Run has not
	// consumed yet coalesce, hence the loop.
	for held := false; !held; {
		clk.Advance(testRenew)
		select {
		case <-changed:
			held = true
		case <-time.After(50 * time.Millisecond):
		case <-wait.Done():
			t.Fatal("lease never held")
		}
	}
	if term, ok := e.Holds("us-east-b-web"); !ok || term != 1 {
		t.Fatalf("Holds = %d, %v; want 1, true", term, ok)
	}
	if !clk.Now().After(time.Unix(1000, 0).Add(testTTL)) {
		t.Errorf("held at %v, before the startup wait ended", clk.Now())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if _, ok := e.Holds("us-east-b-web"); ok {
		t.Error("still holds the lease after Run returned")
	}
	net.mu.Lock()
	defer net.mu.Unlock()
	if c := net.claims["cp-a"]; len(c) != 0 {
		t.Errorf("claims published after Run returned: %v, want none", c)
	}
}
