package gossip

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/memberlist"
	"github.com/rs/zerolog"

	"github.com/spillway-lb/spillway/internal/devpki"
	"github.com/spillway-lb/spillway/internal/mtls"
	"github.com/spillway-lb/spillway/lb/clock"
)

// sealPKI issues the certificates of a test's nodes from one CA, as
// deploy/mkcerts.sh does (CN = the node name).
type sealPKI struct {
	t   testing.TB
	ca  *devpki.CA
	dir string
}

func newSealPKI(t testing.TB) *sealPKI {
	t.Helper()
	ca, err := devpki.NewCA("gossip test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &sealPKI{t: t, ca: ca, dir: t.TempDir()}
}

func (p *sealPKI) files(name string) mtls.Files {
	p.t.Helper()
	f, err := p.ca.IssueFiles(p.dir, name, devpki.Leaf{CommonName: name, Names: []string{name + ".spillway.internal"}, ValidFor: time.Hour})
	if err != nil {
		p.t.Fatal(err)
	}
	return mtls.Files(f)
}

func (p *sealPKI) sealer(name string) *mtls.GossipSealer {
	p.t.Helper()
	s, err := mtls.NewGossipSealer(p.files(name), name, zerolog.Nop())
	if err != nil {
		p.t.Fatal(err)
	}
	return s
}

func (p *sealPKI) verifier() *mtls.GossipVerifier {
	p.t.Helper()
	v, err := mtls.NewGossipVerifier(p.files("verifier").CA, zerolog.Nop())
	if err != nil {
		p.t.Fatal(err)
	}
	return v
}

// sealedNode returns an offline Node (see newOfflineNode) that seals with
// its own certificate and verifies seals against p's CA.
func (p *sealPKI) sealedNode(name string, clk clock.Clock, mutate func(*Config)) *Node {
	p.t.Helper()
	cfg := DefaultConfig()
	cfg.Name = name
	if mutate != nil {
		mutate(&cfg)
	}
	n, err := New(cfg, Options{Clock: clk, Sealer: p.sealer(name), Verifier: p.verifier()})
	if err != nil {
		p.t.Fatal(err)
	}
	return n
}

// replicaFacts is what only a replica may publish: leases, autoscaled
// instances and health verdicts.
func replicaFacts(term uint64, addr string) NodeState {
	return NodeState{
		Kind:       KindControlPlane,
		Groups:     []GroupState{{Group: "us-east-b", Region: "us-east", Instances: 1, Healthy: 1, HealthyInstances: []string{addr}}},
		Leases:     map[string]uint64{"us-east-b": term},
		Autoscaled: map[string][]AutoscaledInstance{"us-east-b": {{Address: addr}}},
	}
}

// TestImpersonatedReplicaRefused replays the gossip-insider finding over
// real memberlist (loopback, one keyring): with replica cp-2 down, key
// holders join and publish the replica facts an absent cp-2 could
// (autoscaled instances at their own address, a lease with a huge term):
// one joins as cp-2 without a seal, one as cp-3 sealed with a compromised
// gfe's key, one as cp-4 sealed by another CA's certificate named cp-4, and
// one injects a state under the live replica cp-1's name with the highest
// version. The observer (a gfe that verifies seals) believes none of them:
// it holds exactly cp-1's real state and its own, and counts every refusal.
// Without seals it held all four forgeries (cp-1's replaced by the fake).
func TestImpersonatedReplicaRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	const key = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
	pki := newSealPKI(t)
	c := newCluster(t)
	cfg := func(name string) Config {
		cfg := testConfig(name)
		cfg.SecretKey = key
		cfg.UDPBufferSize = 8192
		return cfg
	}
	honest := func(name string) Options {
		return Options{Logger: testLogger(t), Sealer: pki.sealer(name), Verifier: pki.verifier()}
	}
	var mu sync.Mutex
	refused := map[string]map[string]bool{} // node → reasons
	ping := make(chan struct{}, 1)
	cp1 := c.startOpts(cfg("cp-1"), honest("cp-1"), func(n *Node) { mustPublish(t, n, replicaFacts(3, "10.0.0.1:80")) })
	obs := c.startOpts(cfg("gfe-1"), honest("gfe-1"), func(n *Node) {
		mustPublish(t, n, gfeFor("gfe-1", 10))
		n.onRefused = func(s NodeState, reason string) {
			mu.Lock()
			if refused[s.Node] == nil {
				refused[s.Node] = map[string]bool{}
			}
			refused[s.Node][reason] = true
			mu.Unlock()
			select {
			case ping <- struct{}{}:
			default:
			}
		}
	})
	if _, err := obs.Join([]string{cp1.Addr()}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, obs, "cp-1's state", func(s *Snapshot) bool { return s.States["cp-1"].Version > 0 })

	other := newSealPKI(t)
	lie := replicaFacts(math.MaxUint64-1, "127.0.0.1:6666")
	rogues := []struct {
		name string
		opts Options
	}{
		{"cp-2", Options{Logger: testLogger(t)}},
		// A compromised gfe's own key on a replica's name.
		{"cp-3", Options{Logger: testLogger(t), Sealer: pki.sealer("gfe-1")}},
		{"cp-4", Options{Logger: testLogger(t), Sealer: other.sealer("cp-4")}},
	}
	var first *Node
	for _, r := range rogues {
		n := c.startOpts(cfg(r.name), r.opts, func(n *Node) { mustPublish(t, n, lie) })
		if _, err := n.Join([]string{cp1.Addr()}); err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = n
		}
	}
	waitFor(ctx, t, obs, "every rogue a member", hasMembers("cp-1", "cp-2", "cp-3", "cp-4", "gfe-1"))
	// The fourth forgery: a state under cp-1's name, sent by a rogue
	// member straight to the observer.
	forged := lie
	forged.Node, forged.Version, forged.Addr = "cp-1", math.MaxUint64-1, first.Addr()
	frame, err := encodeFrame(forged)
	if err != nil {
		t.Fatal(err)
	}
	target, ok := first.member("gfe-1")
	if !ok {
		t.Fatal("the rogue does not know the observer")
	}
	if err := first.ml.Load().SendReliable(&target, withRoute(routeDirect, frame)); err != nil {
		t.Fatal(err)
	}
	// Each forgery is either refused or believed; wait until all four
	// are one or the other.
	want := map[string]string{"cp-1": "unsealed", "cp-2": "unsealed", "cp-3": "bad_seal", "cp-4": "bad_seal"}
	decided := func(s *Snapshot) bool {
		mu.Lock()
		defer mu.Unlock()
		for node := range want {
			_, r := refused[node]
			if b, ok := s.States[node]; !r && !(ok && b.Leases["us-east-b"] == lie.Leases["us-east-b"]) {
				return false
			}
		}
		return true
	}
	for !decided(obs.Snapshot()) {
		select {
		case <-obs.Changes():
		case <-ping:
		case <-ctx.Done():
			mu.Lock()
			t.Fatalf("not every forgery was refused or believed: refused %v, states %v", refused, slices.Sorted(mapKeys(obs.Snapshot().States)))
		}
	}
	mu.Lock()
	for node, reason := range want {
		if !refused[node][reason] {
			t.Errorf("%s's forgery: refusals %v, want %s among them", node, refused[node], reason)
		}
	}
	mu.Unlock()
	snap := obs.Snapshot()
	if got := slices.Sorted(mapKeys(snap.States)); !slices.Equal(got, []string{"cp-1", "gfe-1"}) {
		t.Errorf("the observer believes states of %v, want only cp-1 and itself", got)
	}
	if got := snap.States["cp-1"]; !got.Sealed || got.Leases["us-east-b"] != 3 || got.Autoscaled["us-east-b"][0].Address != "10.0.0.1:80" {
		t.Errorf("cp-1's state as the observer holds it: %+v, want cp-1's own (sealed, term 3, 10.0.0.1:80)", got)
	}
	// A rogue that watched cp-1 does not make cp-1 refute it either.
	if v := cp1.Snapshot().States["cp-1"].Version; v >= math.MaxUint64-1 {
		t.Errorf("cp-1 raised its version to %d after an unsealed state under its name", v)
	}
}

func hasMembers(names ...string) func(*Snapshot) bool {
	return func(s *Snapshot) bool { return slices.Equal(s.Members, names) }
}

// TestSealedStateRoundTrip: a sealed state is believed as published and
// marked Sealed; any change of its fields after sealing, or a seal moved to
// another state, is refused as bad_seal.
func TestSealedStateRoundTrip(t *testing.T) {
	pki := newSealPKI(t)
	clk := newFakeClock()
	a := pki.sealedNode("cp-1", clk, nil)
	mustPublish(t, a, cpState())
	full := a.enc.full
	js, err := frameJSON(full)
	if err != nil {
		t.Fatal(err)
	}
	tampered := bytes.Replace(js, []byte(`"instances":4`), []byte(`"instances":5`), 1)
	if bytes.Equal(tampered, js) {
		t.Fatal("test bug: nothing to tamper with")
	}
	// The same seal on another node's state: the body differs.
	other := pki.sealedNode("cp-2", clk, nil)
	mustPublish(t, other, cpState())
	ojs, _ := frameJSON(other.enc.full)
	body, _, err := splitSeal(ojs)
	if err != nil {
		t.Fatal(err)
	}
	_, seal, _ := splitSeal(js)
	moved, err := spliceSeal(body, seal)
	if err != nil {
		t.Fatal(err)
	}
	frameOf := func(js []byte) []byte {
		f, err := encodeJSONFrame(js)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	tests := []struct {
		name     string
		frame    []byte
		believed bool
	}{
		{"as published", full, true},
		{"a field changed", frameOf(tampered), false},
		{"another replica's seal", frameOf(moved), false},
		{"a member after the seal", frameOf(append(bytes.TrimSuffix(js, []byte("}")), []byte(`,"demand":{"web":1}}`)...)), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := pki.sealedNode("gfe-1", clk, nil)
			for _, m := range []string{"cp-1", "cp-2"} {
				b.memberJoined(&memberlist.Node{Name: m})
			}
			b.handleMessage(withRoute(routeDirect, tt.frame))
			got, ok := b.Snapshot().States["cp-1"]
			if !tt.believed {
				_, ok2 := b.Snapshot().States["cp-2"]
				if ok || ok2 || b.Stats().BadSeals != 1 {
					t.Errorf("believed %v (cp-2 %v), bad seals %d; want nothing believed and 1 bad seal", ok, ok2, b.Stats().BadSeals)
				}
				return
			}
			want := cpState()
			want.Version, want.Addr, want.Sealed = a.version, "", true
			if diff := cmp.Diff(want, got); !ok || diff != "" {
				t.Errorf("believed %v, state (-want +got):\n%s", ok, diff)
			}
		})
	}
}

// TestChainCarriedWhereNeeded: a state sent without its chain is refused
// by a node that has not seen the certificate (unknown_certificate), and
// believed once a push/pull, which always carries chains, brought it; from
// then on the publisher's chainless states are believed.
func TestChainCarriedWhereNeeded(t *testing.T) {
	pki := newSealPKI(t)
	clk := newFakeClock()
	a := pki.sealedNode("gfe-a", clk, nil)
	b := pki.sealedNode("gfe-b", clk, nil)
	b.memberJoined(&memberlist.Node{Name: "gfe-a"})
	mustPublish(t, a, gfeFor("a", 1))
	if js, _ := frameJSON(a.enc.lean); bytes.Contains(js, []byte(`"chain"`)) {
		t.Fatalf("the lean frame carries the chain: %s", js)
	}
	b.handleMessage(withRoute(routeDirect, a.enc.lean))
	if _, ok := b.Snapshot().States["gfe-a"]; ok || b.Stats().UnknownCerts != 1 {
		t.Fatalf("chainless state of an unknown certificate: believed %v, unknown %d; want refused and counted", ok, b.Stats().UnknownCerts)
	}
	b.handlePushPull(a.localView())
	if s := b.Snapshot().States["gfe-a"]; !s.Sealed || s.Demand["web"] != 1 {
		t.Fatalf("after push/pull b holds %+v, want a's sealed state", s)
	}
	clk.Advance(time.Second)
	v := mustPublish(t, a, gfeFor("a", 2))
	b.handleMessage(withRoute(routeGossip, a.enc.lean))
	if s := b.Snapshot().States["gfe-a"]; s.Version != v || !s.Sealed {
		t.Errorf("a's next chainless state: b holds version %d sealed %v, want %d sealed", s.Version, s.Sealed, v)
	}
	// b's push/pull hands a's state on with the chain, to a third node.
	c := pki.sealedNode("gfe-c", clk, nil)
	c.memberJoined(&memberlist.Node{Name: "gfe-a"})
	c.memberJoined(&memberlist.Node{Name: "gfe-b"})
	c.handlePushPull(b.localView())
	if s := c.Snapshot().States["gfe-a"]; s.Version != v || !s.Sealed {
		t.Errorf("a's state relayed by b's push/pull: c holds version %d sealed %v, want %d sealed", s.Version, s.Sealed, v)
	}
}

// TestStaleSealRefused: a sealed state older than SealMaxAge is a replay
// (its publisher re-publishes every SealMaxAge/3) and is refused; the
// publisher's refresh keeps its current state young.
func TestStaleSealRefused(t *testing.T) {
	pki := newSealPKI(t)
	clk := newFakeClock()
	a := pki.sealedNode("cp-2", clk, nil)
	mustPublish(t, a, replicaFacts(3, "10.0.0.2:80"))
	recorded := a.enc.full
	v0 := a.version

	clk.Advance(DefaultConfig().SealMaxAge/3 - time.Second)
	a.refreshSeal()
	if a.version != v0 {
		t.Fatalf("refreshed before a third of the max age: version %d, was %d", a.version, v0)
	}
	clk.Advance(time.Second)
	a.refreshSeal()
	if a.version == v0 || !a.own.Sealed {
		t.Fatalf("not refreshed at a third of the max age: version %d sealed %v", a.version, a.own.Sealed)
	}

	clk.Advance(DefaultConfig().SealMaxAge)
	b := pki.sealedNode("cp-1", clk, nil)
	b.memberJoined(&memberlist.Node{Name: "cp-2"})
	b.handleMessage(withRoute(routeDirect, recorded))
	if _, ok := b.Snapshot().States["cp-2"]; ok || b.Stats().StaleSeals != 1 {
		t.Errorf("a replay of cp-2's state 80s later: believed %v, stale seals %d; want refused and counted", ok, b.Stats().StaleSeals)
	}
}

// TestAcceptUnsealedDuringUpgrade: with AcceptUnsealed, states of members
// that do not seal (an older version) are believed and listed as unsealed,
// but an unsealed state never replaces a sealed node's.
func TestAcceptUnsealedDuringUpgrade(t *testing.T) {
	pki := newSealPKI(t)
	clk := newFakeClock()
	b := pki.sealedNode("gfe-b", clk, func(c *Config) { c.AcceptUnsealed = true })
	a := pki.sealedNode("gfe-a", clk, nil)
	for _, m := range []string{"gfe-a", "gfe-old"} {
		b.memberJoined(&memberlist.Node{Name: m})
	}
	old := gfeFor("old", 5)
	old.Node, old.Version = "gfe-old", 1
	b.handleMessage(directMsg(t, old))
	mustPublish(t, a, gfeFor("a", 1))
	b.handleMessage(withRoute(routeDirect, a.enc.full))
	snap := b.Snapshot()
	if got := snap.Unsealed(); !slices.Equal(got, []string{"gfe-old"}) {
		t.Errorf("unsealed states %v, want [gfe-old]", got)
	}
	if !snap.States["gfe-a"].Sealed || snap.States["gfe-old"].Demand["web"] != 5 {
		t.Errorf("states %+v: want gfe-a sealed and gfe-old believed", snap.States)
	}
	impostor := gfeFor("a", 1e9)
	impostor.Node, impostor.Version = "gfe-a", a.version+1
	b.handleMessage(directMsg(t, impostor))
	if got := b.Snapshot().States["gfe-a"]; !got.Sealed || got.Demand["web"] != 1 || b.Stats().Unsealed != 1 {
		t.Errorf("after an unsealed state under gfe-a's name: b holds %+v, unsealed refusals %d; want a's sealed state and 1", got, b.Stats().Unsealed)
	}
}

// TestOlderMembersAndSeals: an older member's decoder reads a sealed state
// (the seal is a field it ignores) as the state published; an older
// member's push/pull, whose states have no seals, is refused state by state
// and counted at a node that requires seals, and nothing else breaks.
func TestOlderMembersAndSeals(t *testing.T) {
	pki := newSealPKI(t)
	clk := newFakeClock()
	a := pki.sealedNode("cp-1", clk, nil)
	mustPublish(t, a, cpState())
	js, err := frameJSON(a.enc.full)
	if err != nil {
		t.Fatal(err)
	}
	var old NodeState // what a version without seals decodes
	if err := json.Unmarshal(js, &old); err != nil {
		t.Fatal(err)
	}
	want := cpState()
	want.Version, want.Addr = a.version, ""
	if diff := cmp.Diff(want, old); diff != "" {
		t.Errorf("an older member reads (-want +got):\n%s", diff)
	}

	b := pki.sealedNode("gfe-1", clk, nil)
	b.memberJoined(&memberlist.Node{Name: "gfe-old"})
	payload, err := encodeFrame(stateList{States: []NodeState{old, {Node: "gfe-old", Kind: KindGFE, Site: "paris", Version: 9}}})
	if err != nil {
		t.Fatal(err)
	}
	b.handlePushPull(payload)
	if got := len(b.Snapshot().States); got != 0 || b.Stats().Unsealed != 2 || b.Stats().Invalid != 0 {
		t.Errorf("an older member's push/pull: %d states believed, %d unsealed refusals, %d invalid; want 0, 2, 0", got, b.Stats().Unsealed, b.Stats().Invalid)
	}
}

// TestSealOverhead: a seal adds the fingerprint and the signature to every
// state, about 100 to 160 bytes after compression, and the chain (a
// devpki P-256 certificate, 415 bytes of DER) only to push/pull, greetings
// and the first state after a certificate change. It logs the sizes and
// the time to publish and to verify one state.
func TestSealOverhead(t *testing.T) {
	pki := newSealPKI(t)
	clk := newFakeClock()
	for _, s := range []NodeState{gfeState(), cpState()} {
		sealed := pki.sealedNode(s.Node, clk, nil)
		plain := newOfflineNode(t, s.Node, clk)
		mustPublish(t, sealed, s)
		mustPublish(t, plain, s)
		unsealed, lean, full := len(plain.enc.lean), len(sealed.enc.lean), len(sealed.enc.full)
		t.Logf("%s state: %d bytes unsealed, %d sealed, %d with the chain", s.Kind, unsealed, lean, full)
		if lean-unsealed > 200 || full-lean < 400 {
			t.Errorf("%s state: the seal adds %d bytes (want at most 200), the chain %d (want the certificate, at least 400)", s.Kind, lean-unsealed, full-lean)
		}
	}
	a := pki.sealedNode("gfe-a", clk, nil)
	b := pki.sealedNode("gfe-b", clk, nil)
	mustPublish(t, a, cpState())
	b.handleMessage(withRoute(routeDirect, a.enc.full))
	const n = 200
	start := time.Now()
	for range n {
		clk.Advance(time.Millisecond)
		mustPublish(t, a, cpState())
	}
	publish := time.Since(start) / n
	start = time.Now()
	for range n {
		ws, err := decodeWireState(a.enc.lean, nil)
		if err != nil {
			t.Fatal(err)
		}
		if v, err := b.checkSeal(&ws, clk.Now()); v != sealOK {
			t.Fatalf("seal %d: %v", v, err)
		}
	}
	t.Logf("publishing a sealed control-plane state takes %v, decoding and verifying one %v", publish, time.Since(start)/n)
}
